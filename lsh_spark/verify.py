"""Exact verification: the true Jaccard similarity of every candidate pair.

The shingle sets are the sorted, distinct 64-bit hash arrays from
:mod:`lsh_spark.shingle`; ``|A & B|`` comes from Spark's native
``array_intersect`` (a hash set in the JVM, linear in the two sizes), so no row
passes through Python.  Only documents that appear in some candidate pair get
their shingle arrays built and joined in.

Example
-------
>>> verify_pairs(candidates, shingles, threshold=0.8).columns  # doctest: +SKIP
['id_a', 'id_b', 'jaccard']
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def jaccard(a: Column, b: Column) -> Column:
    """Exact Jaccard of two distinct-element arrays, as a double."""
    inter = F.size(F.array_intersect(a, b))
    union = F.size(a) + F.size(b) - inter
    return inter / union


def candidate_ids(candidates: DataFrame) -> DataFrame:
    """Distinct ids that occur in any candidate pair."""
    return candidates.select(F.col("id_a").alias("id")).union(
        candidates.select(F.col("id_b").alias("id"))
    ).distinct()


def verify_pairs(candidates: DataFrame, shingles: DataFrame, threshold: float,
                 broadcast: bool = False) -> DataFrame:
    """``(id_a, id_b)`` x ``(id, shingles) -> (id_a, id_b, jaccard)`` with ``jaccard >= threshold``.

    ``shingles`` should hold the candidate documents only (see
    :func:`candidate_ids`); ``broadcast=True`` ships that table to every task
    instead of shuffling shingle arrays once per pair side.
    """
    needed = shingles.select("id", "shingles")
    if broadcast:
        needed = F.broadcast(needed)
    left = needed.select(F.col("id").alias("id_a"), F.col("shingles").alias("sa"))
    right = needed.select(F.col("id").alias("id_b"), F.col("shingles").alias("sb"))
    return (
        candidates.join(left, "id_a")
        .join(right, "id_b")
        .select("id_a", "id_b", jaccard(F.col("sa"), F.col("sb")).alias("jaccard"))
        .filter(F.col("jaccard") >= F.lit(float(threshold)))
    )
