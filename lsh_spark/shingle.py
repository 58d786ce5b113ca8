"""Shingles: word or character k-grams, hashed to seeded 64-bit integers.

Everything here is native Spark (higher-order array functions and XXH64 in the
JVM), so no shingle string ever crosses into Python.  The hash of a shingle is
``xxhash64(seed, shingle)`` in Spark's definition: XXH64 of the 8-byte
little-endian seed with seed 42, then XXH64 of the UTF-8 shingle with that
result as its seed (golden values in tests/test_shingle.py).

A document with fewer tokens (or characters) than ``k`` gets one shingle, the
whole normalized text, so two short documents match only when their texts are
identical and short documents never pile up into one false cluster.

Example
-------
>>> docs.withColumn("shingles", shingle_hashes(F.col("norm"), "word", 5, seed=1))  # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def _hash(seed: int, value: Column) -> Column:
    return F.xxhash64(F.lit(seed).cast("bigint"), value)


def shingle_hashes(norm: Column, kind: str, k: int, seed: int) -> Column:
    """Sorted, distinct ``array<bigint>`` of shingle hashes of a normalized text.

    ``norm`` must be the output of :func:`lsh_spark.normalize.normalize_col`:
    tokens separated by single spaces, no leading or trailing space, not empty.
    """
    if kind == "word":
        tokens = F.split(norm, " ")
        n = F.size(tokens)
        grams = F.transform(
            F.sequence(F.lit(1), n - k + 1),
            lambda i: _hash(seed, F.array_join(F.slice(tokens, i, F.lit(k)), " ")),
        )
    elif kind == "char":
        n = F.length(norm)
        grams = F.transform(
            F.sequence(F.lit(1), n - k + 1),
            lambda i: _hash(seed, F.substring(norm, i, k)),
        )
    else:
        raise ValueError(f"--shingle: got {kind!r}; allowed: word | char")
    whole = F.array(_hash(seed, norm))
    return F.array_sort(F.array_distinct(F.when(n < k, whole).otherwise(grams)))


def text_hash(norm: Column, seed: int) -> Column:
    """128-bit fingerprint (16 bytes) of the normalized text, for exact-duplicate grouping.

    Two independent XXH64 values make an accidental collision among a billion
    documents vanishingly unlikely (about n**2 / 2**129).
    """
    def hex64(s: int) -> Column:
        return F.lpad(F.hex(_hash(s, norm)), 16, "0")

    return F.unhex(F.concat(hex64(seed * 2 + 101), hex64(seed * 2 + 102)))


def add_shingles(docs: DataFrame, kind: str, k: int, seed: int) -> DataFrame:
    """``(id, norm, ...) -> (id, norm, ..., shingles)``."""
    return docs.withColumn("shingles", shingle_hashes(F.col("norm"), kind, k, seed))
