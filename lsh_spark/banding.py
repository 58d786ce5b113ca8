"""LSH banding: choose ``(b, r)``, describe the S-curve, explode band keys.

A pair with Jaccard similarity ``s`` agrees on one MinHash value with
probability ``s``; on all ``r`` rows of a band with ``s**r``; and shares at least
one of ``b`` bands with ``P(s) = 1 - (1 - s**r)**b`` (Leskovec, Rajaraman and
Ullman, *Mining of Massive Datasets*, ch. 3.4).  Because every candidate is
verified exactly, false positives cost only work while false negatives are lost
for good, so the default choice puts ``P(threshold)`` at or above
``target_recall`` and, among such choices, takes the one with the least expected
work on dissimilar pairs, ``integral_0^t P(s) ds``.

Example
-------
>>> choose_bands(0.8, 128, 0.99)
(16, 6)
>>> round(candidate_probability(0.8, 16, 6), 4)
0.9923
"""

from __future__ import annotations

import math

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def candidate_probability(s: float, b: int, r: int) -> float:
    """Probability that a pair of Jaccard ``s`` shares at least one band."""
    return 1.0 - (1.0 - s**r) ** b


def _false_positive_area(t: float, b: int, r: int, steps: int = 400) -> float:
    """``integral_0^t P(s) ds`` by the midpoint rule (work spent below threshold)."""
    h = t / steps
    return sum(candidate_probability((i + 0.5) * h, b, r) for i in range(steps)) * h


def choose_bands(threshold: float, num_perm: int, target_recall: float = 0.99) -> tuple[int, int]:
    """Recall-biased ``(b, r)`` with ``b * r <= num_perm``.

    For every ``r`` the least ``b`` with ``P(threshold) >= target_recall`` is
    found; among those that fit in ``num_perm`` the one with the smallest
    below-threshold area wins (ties: fewer bands).  If no choice reaches the
    target, the one with the highest ``P(threshold)`` is returned.
    """
    best: tuple[float, int, int] | None = None
    fallback: tuple[float, int, int] | None = None
    for r in range(1, num_perm + 1):
        max_b = num_perm // r
        p_row = threshold**r
        if p_row >= 1.0:
            need = 1
        elif math.log1p(-p_row) == 0.0:  # s**r underflows: no b can reach the target
            need = max_b + 1
        else:
            need = math.ceil(math.log1p(-target_recall) / math.log1p(-p_row))
        if need <= max_b:
            cost = _false_positive_area(threshold, need, r)
            key = (cost, need, r)
            if best is None or key < best:
                best = key
        p_at_t = candidate_probability(threshold, max_b, r)
        if fallback is None or (-p_at_t, max_b, r) < fallback:
            fallback = (-p_at_t, max_b, r)
    chosen = best if best is not None else fallback
    assert chosen is not None
    return chosen[1], chosen[2]


def s_curve(b: int, r: int, points: int = 21) -> list[dict[str, float]]:
    """``[{"s": s, "p": P(s)}, ...]`` on an even grid of ``points`` similarities."""
    return [
        {"s": round(i / (points - 1), 4), "p": candidate_probability(i / (points - 1), b, r)}
        for i in range(points)
    ]


def band_key(signature: str, band: Column, rows: int) -> Column:
    """The 64-bit bucket key of band ``band`` (an int column, from 0) of the
    ``array<int>`` column named ``signature``, ``rows`` values per band.

    Spark's XXH64 of ``(band, value_1, ..., value_rows)``: ``xxhash64(band,
    slice(signature, band * rows + 1, rows))`` (an array hashes as its elements
    in turn, so the slice hashes like its values listed one by one).  The band
    number is part of the key, so equal values in different bands never share
    a bucket.  A null signature gives the hash of the band number alone.
    """
    start = band * F.lit(rows) + F.lit(1)
    return F.xxhash64(band, F.slice(F.col(signature), start, F.lit(rows)))


def explode_bands(signatures: DataFrame, bands: int, rows: int, *extra: str) -> DataFrame:
    """``(id, signature, ...) -> (id, band, bucket, *extra)``: one row per band.

    Each row takes a band number from ``sequence(0, bands - 1)`` and its key
    from :func:`band_key`, so the generated code is the same few lines for
    any ``(b, r)``.  Written out instead as one hash expression per band, the
    bands made one method of the stage's generated code longer than the 8,000
    bytes of bytecode HotSpot compiles at most (``-XX:+DontCompileHugeMethods``,
    its default), so the JVM interpreted it, and a profile found a large share
    of all task time in that method; the sequence form is several times faster
    for every ``(b, r)`` measured.

    Example
    -------
    >>> spark = getfixture("spark")
    >>> sigs = spark.createDataFrame([("a", [1, 2, 3, 4, 5, 6])], "id string, signature array<int>")
    >>> bands = explode_bands(sigs, 3, 2)
    >>> bands.columns
    ['id', 'band', 'bucket']
    >>> sorted(row.band for row in bands.collect())
    [0, 1, 2]
    """
    band = F.explode(F.sequence(F.lit(0), F.lit(bands - 1))).alias("band")
    return signatures.select("id", "signature", band, *extra).select(
        "id", "band", band_key("signature", F.col("band"), rows).alias("bucket"), *extra
    )
