import struct

import pytest
import xxhash
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.shingle import shingle_hashes, text_hash


def spark_xxhash64(seed: int, s: str) -> int:
    """Independent XXH64 of Spark's ``xxhash64(seed_long, string)`` (signed 64-bit)."""
    h1 = xxhash.xxh64_intdigest(struct.pack("<q", seed), seed=42)
    h2 = xxhash.xxh64_intdigest(s.encode("utf-8"), seed=h1)
    return h2 - (1 << 64) if h2 >= 1 << 63 else h2


def _one(spark, norm, kind, k, seed=1):
    df = spark.createDataFrame([(norm,)], T.StructType([T.StructField("norm", T.StringType())]))
    return df.select(shingle_hashes(F.col("norm"), kind, k, seed).alias("s")).first().s


def test_word_shingle_hashes_golden(spark):
    norm = "the quick brown fox jumps over the lazy dog"
    tokens = norm.split()
    expect = sorted({spark_xxhash64(1, " ".join(tokens[i:i + 3])) for i in range(len(tokens) - 2)})
    assert _one(spark, norm, "word", 3) == expect
    # Published-value spot check, so a change of hash function is caught even if
    # the python xxhash package changed along with it.
    assert spark_xxhash64(1, "the quick brown") == _one(spark, "the quick brown", "word", 3)[0]


def test_char_shingles_unicode(spark):
    norm = "東京都の天気"
    expect = sorted({spark_xxhash64(7, norm[i:i + 2]) for i in range(len(norm) - 1)})
    assert _one(spark, norm, "char", 2, seed=7) == expect


@pytest.mark.parametrize("kind", ["word", "char"])
def test_short_text_gets_one_shingle_of_whole_text(spark, kind):
    assert _one(spark, "hi there", kind, 50) == [spark_xxhash64(1, "hi there")]
    assert _one(spark, "hi there", kind, 50) != _one(spark, "hi where", kind, 50)


def test_repeated_shingles_are_distinct_and_sorted(spark):
    s = _one(spark, "a b a b a b", "word", 2)
    assert s == sorted(set(s)) and len(s) == 2


def test_seed_changes_hashes(spark):
    assert _one(spark, "one two three", "word", 2, seed=1) != _one(
        spark, "one two three", "word", 2, seed=2)


def test_text_hash_is_16_bytes_and_content_sensitive(spark):
    df = spark.createDataFrame([("abc",), ("abc",), ("abd",)], "norm string")
    h = [r.h for r in df.select(text_hash(F.col("norm"), 1).alias("h")).collect()]
    assert len(h[0]) == 16 and h[0] == h[1] and h[0] != h[2]


def test_char_shingles_count_code_points_outside_the_bmp(spark):
    norm = "𠀀𠀁𠀂x"  # three CJK Extension B characters (UTF-16 surrogate pairs) and x
    expect = sorted({spark_xxhash64(1, norm[i:i + 2]) for i in range(len(norm) - 1)})
    assert _one(spark, norm, "char", 2) == expect


def test_huge_document_is_linear_not_quadratic(spark):
    # 200k tokens: a quadratic shingler would not finish within the test's budget.
    norm = " ".join(f"w{i % 5003}" for i in range(200_000))
    assert len(_one(spark, norm, "word", 5)) == 5003
