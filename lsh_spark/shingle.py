"""Shingles: word or character k-grams, hashed to seeded 64-bit integers.

Everything here is native Spark (higher-order array functions and XXH64 in the
JVM), so no shingle string ever crosses into Python.  Spark's ``xxhash64(seed,
v_1, ..., v_n)`` starts from XXH64 of the 8-byte little-endian seed with seed
42 and chains each value in with the previous result as its seed (golden values
in tests/test_shingle.py).  A character shingle's hash is ``xxhash64(seed,
window)``; a word k-gram's is ``xxhash64(seed, t_1, ..., t_k)`` over the token
hashes ``t_i = xxhash64(seed, token_i)``, so each token is hashed once and no
k-gram string is built.

A document with fewer tokens (or characters) than ``k`` gets one shingle, the
whole normalized text, so two short documents match only when their texts are
identical and short documents never pile up into one false cluster.

Example
-------
>>> add_shingles(docs, "word", 5, seed=1).columns  # doctest: +SKIP
[..., 'shingles']
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def _hash(seed: int, value: Column) -> Column:
    return F.xxhash64(F.lit(seed).cast("bigint"), value)


def _token_hashes(norm: Column, seed: int) -> Column:
    """``array<bigint>``: the hash of every space-separated token."""
    return F.transform(F.split(norm, " "), lambda t: _hash(seed, t))


def _kgrams(units: Column, k: int, seed: int) -> Column:
    """One hash per run of ``k`` consecutive token hashes.

    The ``k`` shifted slices are zipped once per row, so the work is linear in
    the document (a lambda that indexed the array by position would re-evaluate
    its argument per element and go quadratic on a 5 MB document).  ``units``
    must be a column reference, not an expression, or each slice re-evaluates it.
    """
    m = F.greatest(F.size(units) - k + 1, F.lit(0))
    zipped = F.arrays_zip(*[F.slice(units, i + 1, m).alias(str(i)) for i in range(k)])
    return F.transform(
        zipped, lambda z: F.xxhash64(F.lit(seed).cast("bigint"), *[z[str(i)] for i in range(k)])
    )


def _char_windows(norm: Column, k: int, seed: int) -> Column:
    # Every k-character window, found by one regex pass (a zero-width match with
    # a capturing look-ahead at each position that does not split a UTF-16
    # surrogate pair); no per-position substring scans.
    pattern = r"(?s)(?![\uDC00-\uDFFF])(?=(.{%d}))" % k
    return F.transform(F.regexp_extract_all(norm, F.lit(pattern), 1), lambda w: _hash(seed, w))


def add_shingles(df: DataFrame, kind: str, k: int, seed: int, norm: str = "norm",
                 out: str = "shingles", all_out: str | None = None) -> DataFrame:
    """Add ``out``: the sorted, distinct ``array<bigint>`` of shingle hashes of ``norm``.

    ``norm`` must be the output of :func:`lsh_spark.normalize.normalize_col`:
    tokens separated by single spaces, no leading or trailing space, not empty;
    where it is null, ``out`` is null.

    * ``word``: each token is hashed once, and a k-gram's hash is Spark's
      ``xxhash64(seed, t_1, ..., t_k)`` of its ``k`` token hashes (no k-gram
      string is ever built).  Two different k-grams collide only if two 64-bit
      hashes do, about ``2**-64`` per pair.
    * ``char``: ``xxhash64(seed, window)`` of every ``k``-code-point window (a
      CJK character outside the BMP is one character, not two UTF-16 halves).

    A text with fewer than ``k`` units gets one shingle, ``xxhash64(seed, text)``.
    With ``all_out``, that column also gets every shingle occurrence (sorted, with
    repeats: the term frequencies SimHash weighs by).
    """
    if kind not in ("word", "char"):
        raise ValueError(f"--shingle: got {kind!r}; allowed: word | char")
    units = "_shingle_units"
    text = F.col(norm)
    staged = df.withColumn(
        units, _token_hashes(text, seed) if kind == "word" else _char_windows(text, k, seed))
    u = F.col(units)
    grams = _kgrams(u, k, seed) if kind == "word" else u
    whole = F.array(_hash(seed, text))
    shingles = F.when(text.isNull(), F.lit(None)).when(F.size(u) < (k if kind == "word" else 1),
                                                        whole).otherwise(grams)
    if all_out is None:
        return staged.withColumn(out, F.sort_array(F.array_distinct(shingles))).drop(units)
    staged = staged.withColumn(all_out, F.sort_array(shingles)).drop(units)
    return staged.withColumn(out, F.array_distinct(F.col(all_out)))


def text_hash(norm: Column, seed: int) -> Column:
    """128-bit fingerprint (16 bytes) of the normalized text, for exact-duplicate grouping.

    Two independent XXH64 values make an accidental collision among a billion
    documents vanishingly unlikely (about n**2 / 2**129).
    """
    def hex64(s: int) -> Column:
        return F.lpad(F.hex(_hash(s, norm)), 16, "0")

    return F.unhex(F.concat(hex64(seed * 2 + 101), hex64(seed * 2 + 102)))
