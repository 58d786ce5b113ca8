"""Exact verification of candidate pairs: the true Jaccard similarity of each pair.

The shingle sets are the sorted, distinct 64-bit hash arrays from
:mod:`lsh_spark.shingle`.  Pair rows get ``|A & B|`` over Arrow batches (a
compiled merge of the two sorted sets, or a binary search of the smaller in
the larger in numpy, see :func:`sorted_intersections`); :func:`jaccard` is
the same value as a native Spark expression, for the other methods' optional
Jaccard check.  Only documents
that appear in some candidate pair get their shingle arrays joined in.

Large buckets (a template family, thousands of near-copies) are verified as
*blocks* instead of pair by pair: :mod:`lsh_spark.blocks`, with the matrix
products of :mod:`lsh_spark.block_matrix`.

Example
-------
>>> spark = getfixture("spark")
>>> sets = [("a", [1, 2, 3, 4]), ("b", [1, 2, 3, 5]), ("c", [7, 8])]
>>> shingles = spark.createDataFrame(sets, "id string, shingles array<bigint>")
>>> candidates = spark.createDataFrame([("a", "b"), ("a", "c")], "id_a string, id_b string")
>>> verify_pairs(candidates, shingles, threshold=0.5).collect()
[Row(id_a='a', id_b='b', jaccard=0.6)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.kernels import compiled, use_compiled
from lsh_spark.shingle import shingle_parts


def jaccard(a: Column, b: Column) -> Column:
    """Exact Jaccard of two distinct-element arrays, as a double."""
    inter = F.size(F.array_intersect(a, b))
    union = F.size(a) + F.size(b) - inter
    return inter / union


def kept_where(
    df: DataFrame, keep: list[str], value: Column, name: str, ok: Callable[[Column], Column]
) -> DataFrame:
    """``keep`` plus ``name`` (``value``, a double), for the rows where ``ok(value)``.

    ``value`` is computed once per row.  A filter on a projected column is
    pushed below the projection with the expression inlined, so an expensive
    value (an ``array_intersect``, a dot product) ran again in the filter, and
    a Jaccard's intersection twice there, doubling its cost.  Here the value
    is projected, and an ``explode`` of a
    zero- or one-element array, which the optimizer does not inline into,
    keeps the rows.
    """
    v = F.col("_value")
    return df.select(*keep, value.alias("_value")).select(
        *keep,
        F.explode(F.when(ok(v), F.array(v)).otherwise(F.array().cast("array<double>"))).alias(name),
    )


def similar(
    df: DataFrame, keep: list[str], threshold: float, a: str = "shingles_a", b: str = "shingles_b"
) -> DataFrame:
    """``keep`` plus ``jaccard`` of the array columns ``a`` and ``b``, rows with
    ``jaccard >= threshold`` only (see :func:`kept_where`)."""
    return kept_where(
        df, keep, jaccard(F.col(a), F.col(b)), "jaccard", lambda j: j >= F.lit(float(threshold))
    )


def candidate_ids(candidates: DataFrame) -> DataFrame:
    """Distinct ids that occur in any candidate pair."""
    return (
        candidates.select(F.col("id_a").alias("id"))
        .union(candidates.select(F.col("id_b").alias("id")))
        .distinct()
    )


def join_sides(
    pairs: DataFrame,
    table: DataFrame,
    value: str,
    left: str = "id_a",
    right: str = "id_b",
    how: str = "inner",
) -> DataFrame:
    """``pairs`` plus ``<value>_a`` and ``<value>_b``: ``table``'s ``value`` column
    (``table`` keyed by ``id``) for the ``left`` and the ``right`` id of each pair."""
    a = table.select(F.col("id").alias(left), F.col(value).alias(value + "_a"))
    b = table.select(F.col("id").alias(right), F.col(value).alias(value + "_b"))
    return pairs.join(a, left, how).join(b, right, how)


def verify_pairs(
    candidates: DataFrame, shingles: DataFrame, threshold: float, broadcast: bool = False
) -> DataFrame:
    """``(id_a, id_b)`` x ``(id, shingles) -> (id_a, id_b, jaccard)`` with ``jaccard >= threshold``.

    ``shingles`` should hold the candidate documents only (see
    :func:`candidate_ids`); ``broadcast=True`` ships that table to every task
    instead of shuffling shingle arrays once per pair side.  The Jaccard of
    each pair is computed over Arrow batches (:func:`pair_jaccards`): the
    shingle sets are sorted, so one merge of the two (compiled) or a binary
    search of the smaller in the larger (numpy, :func:`sorted_intersections`)
    counts the intersection.  Spark's ``array_intersect`` builds a hash
    set per pair instead (its generated code also boxes every element until the
    JIT warms up), which is markedly slower.
    """
    needed = shingles.select("id", "shingles")
    if broadcast:
        needed = F.broadcast(needed)
    joined = join_sides(candidates, needed, "shingles").select(
        "id_a", "id_b", "shingles_a", "shingles_b"
    )
    schema = T.StructType(
        [
            T.StructField("id_a", joined.schema["id_a"].dataType, False),
            T.StructField("id_b", joined.schema["id_b"].dataType, False),
            T.StructField("jaccard", T.DoubleType(), False),
        ]
    )
    threshold = float(threshold)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                yield pair_jaccards(batch, threshold)

    return joined.mapInArrow(run, schema)


def sorted_intersections(
    a_values: np.ndarray,
    a_lengths: np.ndarray,
    b_values: np.ndarray,
    b_lengths: np.ndarray,
    kernel: str | None = None,
) -> np.ndarray:
    """``|A_k & B_k|`` for every pair ``k`` of sorted, distinct sets given flat
    (values set after set, and the sets' lengths).

    ``kernel`` chooses the implementation (:func:`lsh_spark.kernels.use_compiled`):
    the compiled one merges the two sorted sets of each pair in one loop
    (:func:`_intersections_loop`); the numpy one searches the smaller set in
    the larger, one pair at a time from Python, an order of magnitude slower.
    Both give the same counts.
    """
    a_off = np.zeros(len(a_lengths) + 1, dtype=np.int64)
    np.cumsum(a_lengths, out=a_off[1:])
    b_off = np.zeros(len(b_lengths) + 1, dtype=np.int64)
    np.cumsum(b_lengths, out=b_off[1:])
    out = np.zeros(len(a_lengths), dtype=np.int64)
    if use_compiled(kernel):
        # Contiguous int64 arrays: one specialization per writability (see
        # lsh_spark.signature.minhash_flat), cached by numba.
        compiled(_intersections_loop)(
            np.ascontiguousarray(a_values, dtype=np.int64),
            a_off,
            np.ascontiguousarray(b_values, dtype=np.int64),
            b_off,
            out,
        )
        return out
    for k, (a0, a1, b0, b1) in enumerate(
        zip(
            a_off[:-1].tolist(),
            a_off[1:].tolist(),
            b_off[:-1].tolist(),
            b_off[1:].tolist(),
            strict=True,
        )
    ):
        small, large = a_values[a0:a1], b_values[b0:b1]
        if len(small) > len(large):
            small, large = large, small
        if not len(small):
            continue
        pos = np.searchsorted(large, small)
        np.minimum(pos, len(large) - 1, out=pos)
        out[k] = np.count_nonzero(large[pos] == small)
    return out


def _intersections_loop(a_values, a_off, b_values, b_off, out):
    """The compiled kernel's source (:func:`lsh_spark.kernels.compiled`):
    ``out[k]`` is the number of values that set ``k`` of ``a`` and set ``k`` of
    ``b`` (``values[off[k]:off[k + 1]]``, sorted ascending, distinct) share,
    by one merge of the two."""
    for k in range(out.shape[0]):
        i, i_end = a_off[k], a_off[k + 1]
        j, j_end = b_off[k], b_off[k + 1]
        n = 0
        while i < i_end and j < j_end:
            x, y = a_values[i], b_values[j]
            if x == y:
                n += 1
                i += 1
                j += 1
            elif x < y:
                i += 1
            else:
                j += 1
        out[k] = n


def pair_jaccards(batch: pa.RecordBatch, threshold: float) -> pa.RecordBatch:
    """``(id_a, id_b, shingles_a, shingles_b)`` -> ``(id_a, id_b, jaccard)``, the rows
    with ``jaccard >= threshold``.

    The Jaccard is ``|A & B| / (|A| + |B| - |A & B|)`` divided in float64, as
    :func:`jaccard` divides in Spark, so both give the same doubles.
    """
    a_values, a_lengths = shingle_parts(batch.column("shingles_a"))
    b_values, b_lengths = shingle_parts(batch.column("shingles_b"))
    inter = sorted_intersections(a_values, a_lengths, b_values, b_lengths)
    jac = inter / (a_lengths + b_lengths - inter)
    keep = jac >= threshold
    mask = pa.array(keep)
    return pa.RecordBatch.from_arrays(
        [
            batch.column("id_a").filter(mask),
            batch.column("id_b").filter(mask),
            pa.array(jac[keep], pa.float64()),
        ],
        names=["id_a", "id_b", "jaccard"],
    )
