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


def _kgrams(units: Column, k: int, sep: str, seed: int) -> Column:
    """Hashes of every run of ``k`` consecutive array elements joined by ``sep``.

    The ``k`` shifted slices are zipped once per row, so the work is linear in
    the document (a lambda that sliced the token array itself would re-evaluate
    it per position and go quadratic on a 5 MB document).
    """
    m = F.greatest(F.size(units) - k + 1, F.lit(0))
    zipped = F.arrays_zip(*[F.slice(units, i + 1, m).alias(str(i)) for i in range(k)])
    return F.transform(
        zipped, lambda z: _hash(seed, F.concat_ws(sep, *[z[str(i)] for i in range(k)]))
    )


def shingle_hashes(norm: Column, kind: str, k: int, seed: int) -> Column:
    """Sorted, distinct ``array<bigint>`` of shingle hashes of a normalized text.

    ``norm`` must be the output of :func:`lsh_spark.normalize.normalize_col`:
    tokens separated by single spaces, no leading or trailing space, not empty.
    Character shingles count Unicode code points (a CJK character outside the
    BMP is one character, not two UTF-16 halves).
    """
    whole = F.array(_hash(seed, norm))
    if kind == "word":
        units = F.split(norm, " ")
        grams = F.when(F.size(units) < k, whole).otherwise(_kgrams(units, k, " ", seed))
    elif kind == "char":
        # Every k-character window, found by one regex pass (a zero-width match
        # with a capturing look-ahead at each position that does not split a
        # UTF-16 surrogate pair); no per-position substring scans.
        pattern = r"(?s)(?![\uDC00-\uDFFF])(?=(.{%d}))" % k
        windows = F.regexp_extract_all(norm, F.lit(pattern), 1)
        grams = F.when(F.size(windows) == 0, whole).otherwise(
            F.transform(windows, lambda w: _hash(seed, w)))
    else:
        raise ValueError(f"--shingle: got {kind!r}; allowed: word | char")
    return F.sort_array(F.array_distinct(grams))


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
