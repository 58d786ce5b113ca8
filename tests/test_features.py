"""The fused signature pass equals the Spark path it replaces for word shingles."""

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from lsh_spark.features import word_minhash_features
from lsh_spark.normalize import NO_TEXT, checked_texts, prepare
from lsh_spark.shingle import add_shingles, text_hash
from lsh_spark.signature import minhash

TEXTS = [
    ("a", "The quick brown fox jumps over the lazy dog, again and again."),
    ("b", "THE QUICK brown fox jumps over the lazy dog again and again!!"),
    ("c", "Straße ＡＢＣ naïve café"),
    ("d", "short"),
    ("e", "!!! ??? ..."),  # no letters or digits: no_text_content
    ("f", ""),  # empty: rejected before normalization
    ("g", None),  # missing
    ("h", "東京都 の 天気 は 晴れ です"),
    # Control characters: rejected in the JVM on the Spark path, in the Arrow
    # pass on the fused one; shares that end in .5 show both round half up.
    ("i", "\x01abcdefg"),  # 1 of 8: 12.5% -> 13%
    ("j", "\ufffdabcdefg"),  # U+FFFD, 1 of 8
    ("k", "\x00\x1f\x7fabcde"),  # 3 of 8: 37.5% -> 38%
    ("l", "\x02" * 13 + "word " * 37 + "xx"),  # 13 of 200: 6.5% -> 7%
    ("m", "\x03" + "a" * 39),  # 2.5%: accepted
    ("n", "\x0b" + "b" * 19),  # exactly 5%: accepted
    ("o", "tab\tnew\nline\rfeed\fend"),  # white space is not binary
    ("p", "é\x01xy"),  # 1 of 4 characters, not of 5 bytes
]


@pytest.mark.heavy
def test_packed_features_hold_the_same_sets(spark):
    # dedup.py's signature pass packs each set into one binary value; every
    # other column, and the hashes themselves, are those of the unpacked pass.
    import numpy as np

    raw = spark.createDataFrame(TEXTS, "id string, text string")
    checked = checked_texts(raw, "text", 1000, binary=False)
    lists = word_minhash_features(checked, 3, 5, 16)
    packed = word_minhash_features(checked, 3, 5, 16, packed=True)
    assert packed.schema["shingles"].dataType.simpleString() == "binary"
    assert_df_equality(packed.drop("shingles"), lists.drop("shingles"), ignore_row_order=True)
    want = {r.id: r.shingles for r in lists.collect()}
    got = {
        r.id: None if r.shingles is None else np.frombuffer(r.shingles, "<i8").tolist()
        for r in packed.collect()
    }
    assert got == want and sum(v is not None for v in got.values()) >= 8


@pytest.mark.heavy
@pytest.mark.parametrize("passed_len", [True, False])
def test_fused_features_equal_the_spark_path(spark, passed_len):
    # passed_len=False: the Python pass counts the characters of the texts
    # the JVM passed on (char_lengths), with the same text_len.
    raw = spark.createDataFrame(TEXTS, "id string, text string")
    got = word_minhash_features(
        checked_texts(raw, "text", 1000, binary=False, passed_len=passed_len), 3, 5, 16
    )
    prepared = prepare(raw, "text", 1000)
    ok = F.col("reason").isNull()
    feats = add_shingles(
        prepared.select(
            "id",
            "text_len",
            "reason",
            F.when(ok, text_hash(F.col("norm"), 5)).alias("text_hash"),
            F.when(ok, F.col("norm")).alias("norm"),
        ),
        "word",
        3,
        5,
    ).drop("norm")
    sigs = minhash(feats.filter(ok).select("id", "shingles"), 16, 5)
    expected = feats.join(sigs.select("id", "signature"), "id", "left").select(
        "id",
        "text_len",
        "reason",
        "text_hash",
        "shingles",
        "signature",
        F.coalesce(F.size("shingles"), F.lit(0)).cast("int").alias("num_shingles"),
    )
    got = got.withColumn("num_shingles", F.col("num_shingles").cast("int"))
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    reasons = {r.id: r.reason for r in got.collect()}
    assert reasons["e"] == NO_TEXT
    assert reasons["f"].startswith("empty_text") and reasons["g"].startswith("missing_text")
    assert all(reasons[i] is None for i in "abcdhmno")
    assert reasons["i"].startswith("binary_content: 13% ") and reasons["j"] == reasons["i"]
    assert reasons["k"].startswith("binary_content: 38% ")
    assert reasons["l"].startswith("binary_content: 7% ")
    assert reasons["p"].startswith("binary_content: 25% ")


def test_fused_bucket_keys_equal_the_bands_of_the_signature(spark):
    """With ``bands``, the pass writes each accepted document's bucket keys
    instead of its signature: the keys Spark's ``explode_bands`` makes of the
    signature the pass writes without it (the crawl index's keys), in band
    order, for every accepted document."""
    from lsh_spark.banding import explode_bands

    raw = spark.createDataFrame(TEXTS, "id string, text string")
    checked = checked_texts(raw, "text", 1000, binary=False, passed_len=False)
    with_sig = word_minhash_features(checked, 3, 5, 16).filter("reason is null")
    keyed = word_minhash_features(checked, 3, 5, 16, bands=(5, 3)).filter("reason is null")
    assert "signature" not in keyed.columns
    want = {
        (r.id, r.band): r.bucket
        for r in explode_bands(with_sig.select("id", "signature"), 5, 3).collect()
    }
    got = {(r.id, band): key for r in keyed.collect() for band, key in enumerate(r.buckets)}
    assert len(got) == 5 * with_sig.count() and got == want
