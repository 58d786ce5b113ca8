import struct

import pytest
import xxhash
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.kernels import KERNELS
from lsh_spark.shingle import add_shingles, text_hash


def spark_xxhash64(seed: int, s: str) -> int:
    """Independent XXH64 of Spark's ``xxhash64(seed_long, string)`` (signed 64-bit)."""
    h1 = xxhash.xxh64_intdigest(struct.pack("<q", seed), seed=42)
    h2 = xxhash.xxh64_intdigest(s.encode("utf-8"), seed=h1)
    return h2 - (1 << 64) if h2 >= 1 << 63 else h2


def signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


def spark_xxhash64_longs(seed: int, *values: int) -> int:
    """Independent XXH64 of Spark's ``xxhash64(seed_long, v_1, ..., v_n)`` over longs."""
    h = 42
    for v in (seed, *values):
        h = xxhash.xxh64_intdigest(struct.pack("<q", v), seed=h)
    return signed(h)


def word_kgram(seed: int, tokens: list[str]) -> int:
    return spark_xxhash64_longs(seed, *[spark_xxhash64(seed, t) for t in tokens])


def _one(spark, norm, kind, k, seed=1):
    df = spark.createDataFrame([(norm,)], T.StructType([T.StructField("norm", T.StringType())]))
    return add_shingles(df, kind, k, seed, out="s").first().s


def test_word_shingle_hashes_golden(spark):
    norm = "the quick brown fox jumps over the lazy dog"
    tokens = norm.split()
    expect = sorted({word_kgram(1, tokens[i : i + 3]) for i in range(len(tokens) - 2)})
    assert _one(spark, norm, "word", 3) == expect
    # Fixed values, so a change of hash definition is caught even if the xxhash
    # package changed along with it (stored signatures and indexes depend on them).
    assert _one(spark, "the quick brown", "word", 3) == [-3561388690820553932]
    assert spark_xxhash64(1, "the") == -6875731314696134087


def test_char_shingles_unicode(spark):
    norm = "東京都の天気"
    expect = sorted({spark_xxhash64(7, norm[i : i + 2]) for i in range(len(norm) - 1)})
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
        spark, "one two three", "word", 2, seed=2
    )


def test_null_text_gets_null_shingles(spark):
    df = spark.createDataFrame([(None,), ("a b c",)], "norm string")
    got = [r.s for r in add_shingles(df, "word", 2, 1, out="s").collect()]
    assert got[0] is None and len(got[1]) == 2


def test_token_hashes_are_computed_once_per_row(spark):
    """The shifted slices read one projected column: the plan holds one split."""
    df = spark.createDataFrame([("a b c d e f",)], "norm string")
    plan = add_shingles(df, "word", 5, 1)._jdf.queryExecution().optimizedPlan().toString()
    assert plan.count("split(") == 1


def test_text_hash_is_16_bytes_and_content_sensitive(spark):
    df = spark.createDataFrame([("abc",), ("abc",), ("abd",)], "norm string")
    h = [r.h for r in df.select(text_hash(F.col("norm"), 1).alias("h")).collect()]
    assert len(h[0]) == 16 and h[0] == h[1] and h[0] != h[2]


def test_char_shingles_count_code_points_outside_the_bmp(spark):
    norm = "𠀀𠀁𠀂x"  # three CJK Extension B characters (UTF-16 surrogate pairs) and x
    expect = sorted({spark_xxhash64(1, norm[i : i + 2]) for i in range(len(norm) - 1)})
    assert _one(spark, norm, "char", 2) == expect


def test_huge_document_is_linear_not_quadratic(spark):
    # 200k tokens: a quadratic shingler would not finish within the test's budget.
    norm = " ".join(f"w{i % 5003}" for i in range(200_000))
    assert len(_one(spark, norm, "word", 5)) == 5003


NUMPY_TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "a b a b a b a b",  # repeated k-grams: distinct, sorted
    "hi there",  # fewer tokens than k: one shingle, the whole text
    "x",
    None,
    "東京 都 の 天気 です ね 今日 は 晴れ",
    "𠀀𠀁 𠀂x ü é café naïve",
    " ".join(f"w{i % 37}" for i in range(500)),
]


@pytest.mark.parametrize("k,seed", [(5, 1), (3, 7), (1, 2)])
def test_numpy_word_shingles_equal_the_spark_path(spark, k, seed):
    import pyarrow as pa

    from lsh_spark.shingle import text_hash_arrow, word_shingles_arrow

    df = spark.createDataFrame([(t,) for t in NUMPY_TEXTS], "norm string")
    rows = add_shingles(
        df.select("norm", text_hash(F.col("norm"), seed).alias("h")), "word", k, seed
    ).collect()
    norm = pa.array(NUMPY_TEXTS, type=pa.large_string())
    for kernel in KERNELS:
        assert word_shingles_arrow(norm, k, seed, kernel).to_pylist() == [r.shingles for r in rows]
    # The fingerprint is null for a null text (the pipeline only asks for accepted ones).
    assert text_hash_arrow(norm, seed).to_pylist() == [
        None if t is None else bytes(r.h) for t, r in zip(NUMPY_TEXTS, rows, strict=False)
    ]


def _random_texts(rng, n):
    """Texts of random tokens: lengths 0-70 bytes (empty tokens from double spaces,
    tokens past XXH64's 32-byte stripes), ASCII and multi-byte characters, nulls,
    empty texts and texts shorter than k."""
    alphabet = list("abcdefghij0123456789") + ["é", "ü", "東", "𠀀"]
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.05:
            out.append(None)
            continue
        if r < 0.08:
            out.append("")
            continue
        tokens = [
            "".join(rng.choice(alphabet, size=int(rng.choice([0, 1, 3, 5, 8, 12, 31, 33, 70]))))
            for _ in range(int(rng.integers(1, 60)))
        ]
        out.append(" ".join(tokens))
    return out


@pytest.mark.parametrize("k,seed", [(1, 0), (2, 3), (5, 1), (9, 2**40)])
def test_compiled_and_numpy_word_shingles_agree(k, seed):
    """The compiled kernels give the numpy path's values on random batches of
    every shape (the numpy path equals the Spark path above)."""
    import numpy as np
    import pyarrow as pa

    from lsh_spark.shingle import word_shingles_arrow

    rng = np.random.default_rng(k)
    texts = pa.array(["head", *_random_texts(rng, 400), "tail"], type=pa.large_string()).slice(
        1, 400
    )
    sizes = [len(t.split(" ")) for t in texts.to_pylist() if t is not None]
    assert texts.null_count and "" in texts.to_pylist() and (k == 1 or min(sizes) < k)
    got, want = (word_shingles_arrow(texts, k, seed, kernel) for kernel in KERNELS)
    assert got.equals(want)


def test_numpy_word_shingles_of_an_empty_batch_and_all_nulls():
    import pyarrow as pa

    from lsh_spark.shingle import word_shingles_arrow

    assert word_shingles_arrow(pa.array([], type=pa.large_string()), 5, 1).to_pylist() == []
    assert word_shingles_arrow(
        pa.array([None, None], type=pa.large_string()), 5, 1
    ).to_pylist() == [None, None]


# -- packed shingle sets (dedup.py's shingles/) ----------------------------------
def _sets_array():
    import pyarrow as pa

    return pa.array(
        [[1, 2, 3], None, [], [-5, 2**62], [-(2**63), 2**63 - 1, 0]], pa.list_(pa.int64())
    )


@pytest.mark.parametrize("start,stop", [(0, 5), (1, 5), (2, 4), (3, 5), (0, 0)])
def test_packed_sets_unpack_to_the_same_hashes(start, stop):
    import numpy as np

    from lsh_spark.shingle import pack_shingles, shingle_parts

    sets = _sets_array().slice(start, stop - start)
    packed = pack_shingles(sets)
    assert str(packed.type) == "binary" and len(packed) == len(sets)
    assert packed.is_null().to_pylist() == sets.is_null().to_pylist()
    for value, want in zip(packed.to_pylist(), sets.to_pylist(), strict=False):
        if want is None:
            assert value is None
        else:  # little-endian int64, set after set
            assert np.frombuffer(value, dtype="<i8").tolist() == want
    got_values, got_lengths = shingle_parts(packed)
    want_values, want_lengths = shingle_parts(sets)
    assert got_values.dtype == np.int64 and got_lengths.tolist() == want_lengths.tolist()
    assert (
        got_values.tolist() == want_values.tolist() == [h for s in sets.to_pylist() if s for h in s]
    )


def test_packed_slices_keep_each_batch_within_the_limit():
    from lsh_spark.shingle import pack_shingles, packed_slices

    sets = _sets_array()  # 3, 0, 0, 2, 3 hashes: 24, 0, 0, 16, 24 bytes
    assert packed_slices(sets) == [(0, 5)]
    assert packed_slices(sets, 40) == [(0, 4), (4, 5)]
    assert packed_slices(sets, 24) == [(0, 3), (3, 4), (4, 5)]
    for start, stop in packed_slices(sets, 24):
        assert pack_shingles(sets.slice(start, stop - start)).buffers()[2].size <= 24
    with pytest.raises(ValueError, match="3 hashes exceeds 16 bytes"):
        packed_slices(sets, 16)


# -- token spans and the vectorized XXH64 of word_shingles_arrow -----------------
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("seed", [0, 42, 2**63 + 12345, 2**64 - 1])
def test_xxh64_spans_equals_xxhash_for_every_length(seed, kernel):
    import numpy as np

    from lsh_spark.shingle import xxh64_spans

    rng = np.random.default_rng(seed % 1000)
    data = rng.integers(0, 256, 4096, dtype=np.uint8)
    # Every length from 0 to 80 (past the 32-byte stripes), at every alignment.
    lengths = np.repeat(np.arange(81), 8)
    starts = rng.integers(0, len(data) - 81, len(lengths)) // 8 * 8 + np.tile(np.arange(8), 81)
    got = xxh64_spans(data, starts, lengths, seed, kernel)
    want = [
        xxhash.xxh64_intdigest(data[s : s + n].tobytes(), seed=seed)
        for s, n in zip(starts.tolist(), lengths.tolist(), strict=False)
    ]
    assert got.tolist() == want
    assert xxh64_spans(data, np.array([], np.int64), np.array([], np.int64), seed, kernel).size == 0


SPLIT_TEXTS = [
    "a b",
    "",
    None,
    " lead",
    "trail ",
    "two  spaces",
    "héllo wörld ✓ 𠀀",
    "x" * 40 + " y",
    "   ",
    None,
    "single",
    "a" * 31 + " " + "b" * 32,
]


@pytest.mark.parametrize("kind", ["string", "large_string", "sliced"])
def test_split_spans_are_arrows_split_tokens(kind):
    import pyarrow as pa
    import pyarrow.compute as pc

    from lsh_spark.shingle import split_spans

    if kind == "sliced":
        texts = pa.array(["not this one", *SPLIT_TEXTS, "nor this"]).slice(1, len(SPLIT_TEXTS))
    else:
        texts = pa.array(SPLIT_TEXTS, type=getattr(pa, kind)())
    data, starts, lengths, counts = split_spans(texts)
    tokens = pc.split_pattern(texts, " ")
    assert counts.tolist() == pc.list_value_length(tokens).fill_null(0).to_pylist()
    assert [bytes(data[s : s + n]).decode() for s, n in zip(starts, lengths, strict=False)] == [
        t for row in tokens.to_pylist() if row is not None for t in row
    ]


def test_split_spans_skip_the_bytes_of_a_null_slot():
    """Arrow lets a null slot span bytes; its spaces make no tokens."""
    import numpy as np
    import pyarrow as pa

    from lsh_spark.shingle import split_spans, word_shingles_arrow

    raw = b"ab cdx y zq r"
    offsets = np.array([0, 5, 10, 13], dtype=np.int32)
    validity = np.packbits([1, 0, 1], bitorder="little")
    texts = pa.StringArray.from_buffers(
        3, pa.py_buffer(offsets), pa.py_buffer(raw), pa.py_buffer(validity.tobytes()), null_count=1
    )
    assert texts.to_pylist() == ["ab cd", None, "q r"]
    data, starts, lengths, counts = split_spans(texts)
    assert counts.tolist() == [2, 0, 2]
    assert [bytes(data[s : s + n]) for s, n in zip(starts, lengths, strict=False)] == [
        b"ab",
        b"cd",
        b"q",
        b"r",
    ]
    clean = pa.array(["ab cd", None, "q r"], type=pa.large_string())
    assert (
        word_shingles_arrow(texts, 1, 3).to_pylist() == word_shingles_arrow(clean, 1, 3).to_pylist()
    )


def test_numpy_word_shingles_of_a_sliced_batch_equal_those_of_a_copy():
    import pyarrow as pa

    from lsh_spark.shingle import word_shingles_arrow

    texts = pa.array(["x y", *NUMPY_TEXTS, "z"], type=pa.large_string()).slice(1, len(NUMPY_TEXTS))
    copy = pa.array(texts.to_pylist(), type=pa.large_string())
    assert (
        word_shingles_arrow(texts, 3, 5).to_pylist() == word_shingles_arrow(copy, 3, 5).to_pylist()
    )
