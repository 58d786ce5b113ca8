"""Exact verification: the true Jaccard similarity of every candidate pair.

The shingle sets are the sorted, distinct 64-bit hash arrays from
:mod:`lsh_spark.shingle`.  Pair rows get ``|A & B|`` over Arrow batches (a
compiled merge of the two sorted sets, or a binary search of the smaller in
the larger in numpy, see :func:`sorted_intersections`); :func:`jaccard` is
the same value as a native Spark expression, for the other methods' optional
Jaccard check.  Only documents
that appear in some candidate pair get their shingle arrays joined in.

Large buckets (a template family, thousands of near-copies) are verified as
*blocks* instead of pair by pair: the members' shingle sets become one 0/1
matrix ``M`` (documents x shingles shared by two or more members) and every
intersection size of the block comes out of one matrix product ``M @ M.T``
(BLAS) instead of ``n (n - 1) / 2`` hash-set intersections.  A pair that sits
in several blocks is emitted only by the block with the smallest key, so block
output needs no de-duplication across blocks.  A family of blocks above
``max_family_size`` members emits a spanning forest of its pairs instead
(:func:`block_forest`): the same clusters, at most ``n - 1`` pairs.

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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.buckets import sort_ranks
from lsh_spark.components import spanning_forest
from lsh_spark.kernels import compiled, use_compiled
from lsh_spark.shingle import shingle_parts

# Cells of a dense block matrix (documents x shingles) evaluated at a time:
# 4M cells (16 MiB of float32), whatever the block's shape.
BLOCK_CELLS = 1 << 22
PAIR_SCHEMA = T.StructType(
    [
        T.StructField("id_a", T.StringType(), False),
        T.StructField("id_b", T.StringType(), False),
        T.StructField("jaccard", T.DoubleType(), False),
    ]
)
PAIR_ARROW_SCHEMA = pa.schema(
    [
        pa.field("id_a", pa.string(), False),
        pa.field("id_b", pa.string(), False),
        pa.field("jaccard", pa.float64(), False),
    ]
)
# A block group with more pairs than this is verified by several tasks, each
# computing a contiguous share of its rows (one template family of 5,000
# members holds 12.5 million pairs: 12 tasks instead of one straggler).
PAIRS_PER_TASK = 1 << 20
# The same for a group of a family written as a spanning forest (block_forest),
# by its worst case: a 5,000-member family (12.5 million pairs) is one task.
FOREST_PAIRS_PER_TASK = 1 << 24


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


def _incidence_columns(
    values: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Row and column indices of the 0/1 matrix of values shared by two or more rows.

    The entries come in column order (``cols`` ascending), so a range of
    columns is a contiguous slice.
    """
    rows = np.repeat(np.arange(len(lengths)), lengths)
    # Each member's values are sorted, so a stable sort (a run-merging sort in
    # numpy) costs a fraction of np.unique's quicksort.
    order = np.argsort(values, kind="stable")
    ranked = values[order]
    new = np.empty(len(ranked), dtype=bool)
    new[:1] = True
    np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
    cols = np.cumsum(new) - 1
    counts = np.bincount(cols, minlength=int(new.sum()))
    # A value held by one row only adds nothing to any intersection: keep the
    # shared ones, renumbered 0..V-1 in the same order.
    keep = counts > 1
    renum = np.cumsum(keep) - 1
    shared = keep[cols]
    return rows[order][shared], renum[cols[shared]], int(keep.sum())


def _gram_rows(
    rows: np.ndarray,
    cols: np.ndarray,
    n: int,
    v: int,
    r0: int,
    r1: int,
    dtype: type,
    first: int = 0,
) -> np.ndarray:
    """Rows ``r0:r1``, columns ``first:n`` of ``M @ M.T`` for the 0/1 matrix ``(rows, cols)``.

    ``(rows, cols)`` come in column order (see :func:`_incidence_columns`) and
    ``first <= r0``.  Only the rows ``first:n`` of ``M`` are built, a range of
    its columns at a time, so no dense piece exceeds ``BLOCK_CELLS`` cells.
    """
    height = n - first
    out = np.zeros((r1 - r0, height), dtype=dtype)
    if first:
        mine = rows >= first
        rows, cols = rows[mine], cols[mine]
    step = max(1, BLOCK_CELLS // max(height, 1))
    edges = np.searchsorted(cols, np.arange(0, v + step, step))
    dense = np.empty((height, min(step, max(v, 1))), dtype=dtype)
    for k in range(len(edges) - 1):
        lo, hi = edges[k], edges[k + 1]
        if lo == hi:
            continue
        c0 = k * step
        width = min(v, c0 + step) - c0
        piece = dense[:, :width]
        piece.fill(0)
        piece[rows[lo:hi] - first, cols[lo:hi] - c0] = 1
        out += piece[r0 - first : r1 - first] @ piece.T
    return out


def row_ranges(n: int, parts: int, rows: int | None = None) -> np.ndarray:
    """``parts + 1`` row boundaries splitting the pairs ``i < j`` of ``n`` rows evenly.

    Row ``i`` holds ``n - 1 - i`` pairs, so the first ranges are short and the
    last long; every range is non-empty when ``parts <= n``.  ``rows``: split
    only the first ``rows`` rows (all by default); fewer than ``parts + 1``
    boundaries when ``rows < parts``.
    """
    rows = n if rows is None else rows
    parts = max(1, min(parts, rows))
    before = np.concatenate([[0], np.cumsum(np.arange(n - 1, n - 1 - rows, -1, dtype=np.int64))])
    target = before[-1] * np.arange(1, parts) / parts
    cuts = np.searchsorted(before, target, side="left")
    # The nearer of the two rows around each target.
    lower = np.maximum(cuts - 1, 0)
    cuts = np.where(target - before[lower] < before[cuts] - target, lower, cuts)
    bounds = np.concatenate([[0], cuts, [rows]])
    # Keep every range non-empty (tiny blocks split into more parts than rows with pairs).
    return np.maximum.accumulate(np.maximum(bounds, np.minimum(np.arange(parts + 1), rows)))


def block_pairs(
    values: np.ndarray,
    lengths: np.ndarray,
    threshold: float,
    covered: tuple[np.ndarray, np.ndarray] | None = None,
    required: tuple[np.ndarray, np.ndarray] | None = None,
    row_range: tuple[int, int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact Jaccard of every pair of one block with ``J >= threshold``.

    Parameters
    ----------
    values : the members' shingle hashes, member after member; each member's
        are distinct.
    lengths : shingles per member (all >= 1).
    covered : optional ``(values, lengths)`` of each member's *other* block keys
        whose pairs are emitted elsewhere; a pair whose two members share any
        such key is skipped.
    required : optional ``(values, lengths)`` of each member's block keys; only
        pairs whose two members share at least one are emitted.
    row_range : optional ``(start, stop)``: only pairs whose first member ``i``
        is in ``start <= i < stop`` (one task's share of a large block, see
        :func:`row_ranges`); only columns from ``start`` on are computed.

    Returns
    -------
    ``(i, j, jaccard)`` with ``i < j`` member positions and float64 Jaccard,
    computed as ``|A & B| / (|A| + |B| - |A & B|)`` exactly as Spark divides.
    """
    chunks = list(_pair_chunks(values, lengths, threshold, covered, required, row_range))
    if not chunks:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
    i, j, jac = zip(*chunks, strict=True)
    return np.concatenate(i), np.concatenate(j), np.concatenate(jac)


def _pair_chunks(
    values: np.ndarray,
    lengths: np.ndarray,
    threshold: float,
    covered: tuple[np.ndarray, np.ndarray] | None,
    required: tuple[np.ndarray, np.ndarray] | None,
    row_range: tuple[int, int] | None,
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """:func:`block_pairs` as it computes them: the pairs of ``BLOCK_CELLS`` cells
    at a time, in order."""
    n = len(lengths)
    lengths = np.asarray(lengths, dtype=np.int64)
    rows, cols, v = _incidence_columns(values, lengths)
    # float32 BLAS counts exactly up to 2**24 shingles per document.
    dtype = np.float32 if lengths.max(initial=0) < (1 << 24) else np.float64
    if covered is not None:
        c_rows, c_cols, c_v = _incidence_columns(*covered)
    if required is not None:
        q_rows, q_cols, q_v = _incidence_columns(*required)
    start, stop = row_range if row_range is not None else (0, n)
    step = max(1, BLOCK_CELLS // max(n, 1))
    for r0 in range(start, stop, step):
        r1 = min(stop, r0 + step)
        inter = _gram_rows(rows, cols, n, v, r0, r1, dtype, start).astype(np.int64)
        union = lengths[r0:r1, None] + lengths[None, start:] - inter
        jac = inter / union
        ok = jac >= threshold
        ok &= np.arange(start, n)[None, :] > np.arange(r0, r1)[:, None]
        if covered is not None and c_v:
            ok &= _gram_rows(c_rows, c_cols, n, c_v, r0, r1, np.float32, start) == 0
        if required is not None:
            ok &= _gram_rows(q_rows, q_cols, n, q_v, r0, r1, np.float32, start) > 0
        i, j = np.nonzero(ok)
        yield i + r0, j + start, jac[i, j]


def _take_members(
    values: np.ndarray, lengths: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Flattened per-member lists ``(values, lengths)`` with the members in ``order``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    new_lengths = lengths[order]
    new_starts = np.concatenate([[0], np.cumsum(new_lengths)[:-1]])
    shift = np.repeat(starts[order] - new_starts, new_lengths)
    return values[np.arange(int(new_lengths.sum())) + shift], new_lengths


def block_forest(
    values: np.ndarray,
    lengths: np.ndarray,
    threshold: float,
    covered: tuple[np.ndarray, np.ndarray] | None = None,
    required: tuple[np.ndarray, np.ndarray] | None = None,
    share: tuple[int, int] = (0, 1),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A spanning forest of :func:`block_pairs`: a subset of its pairs, with
    their Jaccard, that connects exactly what all of them connect.

    Member 0's pairs are computed first; with them, every member they reach is
    connected to member 0, so a pair between two such members changes no
    component.  The other pairs all involve a member that member 0 did not
    reach, so only those members' rows are computed (against every member).
    A template family, where nearly every pair is above the threshold, costs
    about ``n`` Jaccard values instead of ``n (n - 1) / 2``; a family that
    member 0 reaches little costs up to the whole block, never more.  The
    result depends only on the members and their order.

    ``share``: ``(part, parts)``, one of several tasks of a large group.  Each
    computes member 0's row (about ``n`` values) and an even share of the rows
    of the members it did not reach (:func:`row_ranges`); part 0 also emits
    member 0's pairs.  Every pair is emitted by at most one share, and the
    shares' forests together connect what the whole block's pairs connect.

    The pairs are folded into the forest as they are computed, ``BLOCK_CELLS``
    cells at a time, so a share holds at most ``n - 1`` forest pairs beside one
    piece's pairs, however many pairs are above the threshold.  A forest of the
    forest so far and the next pairs is the forest of all of them (it is the
    minimum spanning forest by position, which drops only pairs that close a
    cycle), so the result is the same as one forest of every pair.
    """
    n = len(lengths)
    part, parts = share
    # Member 0's pairs: a star, so already a forest.
    i, j, jac = block_pairs(values, lengths, threshold, covered, required, row_range=(0, min(1, n)))
    reached = np.zeros(n, dtype=bool)
    reached[:1] = True
    reached[j] = True
    rest = np.flatnonzero(~reached)
    if part:
        i, j, jac = i[:0], j[:0], jac[:0]
    bounds = row_ranges(n, parts, rows=len(rest))
    if part + 1 < len(bounds) and bounds[part] < bounds[part + 1]:
        # The members not reached first (as rows 0..r-1), then the others.
        order = np.concatenate([rest, np.flatnonzero(reached)])

        def reordered(lists: tuple[np.ndarray, np.ndarray] | None):
            return None if lists is None else _take_members(*lists, order)

        for ri, rj, rjac in _pair_chunks(
            *_take_members(values, lengths, order),
            threshold,
            reordered(covered),
            reordered(required),
            row_range=(int(bounds[part]), int(bounds[part + 1])),
        ):
            a, b = order[ri], order[rj]
            i = np.concatenate([i, np.minimum(a, b)])
            j = np.concatenate([j, np.maximum(a, b)])
            jac = np.concatenate([jac, rjac])
            forest = spanning_forest(i, j, n)
            i, j, jac = i[forest], j[forest], jac[forest]
    return i, j, jac


def _verify_block(table: pa.Table, threshold: float, forest: bool = False) -> pa.Table:
    """One task's share of one group: rows ``part`` of ``parts`` (see :func:`row_ranges`);
    ``forest``: a spanning forest of the group's pairs whatever its family's size."""
    group = table.column("group")[0].as_py()
    part, parts = table.column("part")[0].as_py(), table.column("parts")[0].as_py()
    table = table.take(pc.sort_indices(table, [("id", "ascending")]))
    values, lengths = shingle_parts(table.column("shingles"))
    keys, n_keys = shingle_parts(table.column("in_blocks"))
    bounds = row_ranges(len(lengths), parts)
    if part + 1 >= len(bounds):
        return pa.Table.from_batches([], PAIR_ARROW_SCHEMA)
    rows = (int(bounds[part]), int(bounds[part + 1]))
    if table.column("merged")[0].as_py():
        # A merged group holds every block its members are in: check all its
        # pairs in one product, emit those that share a block.
        which = {"required": (keys, n_keys)}
    else:
        # One block of an oversized group: pairs whose members also share a
        # block with a smaller key are emitted there.
        smaller = keys < group
        owner = np.repeat(np.arange(len(n_keys)), n_keys)[smaller]
        which = {"covered": (keys[smaller], np.bincount(owner, minlength=len(n_keys)))}
    ids = table.column("id").combine_chunks()
    bounded = forest or table.column("bounded")[0].as_py()
    if bounded:
        # Edges only, or a family above --max-family-size: a spanning forest of its pairs
        # (this task's share of them, see block_tasks), the same clusters
        # with at most n - 1 pairs.  Copies of a member are joined to it by
        # their own pairs of identical texts, so they are not expanded here.
        i, j, jac = block_forest(values, lengths, threshold, share=(part, parts), **which)
    else:
        i, j, jac = block_pairs(values, lengths, threshold, row_range=rows, **which)
    if (
        not bounded
        and "copies" in table.column_names
        and table.column("copies").null_count < table.num_rows
    ):
        id_a, id_b, jac = expand_copies(ids, table.column("copies").combine_chunks(), i, j, jac)
    else:
        id_a, id_b = ids.take(pa.array(i)), ids.take(pa.array(j))
    return pa.table(
        {"id_a": id_a, "id_b": id_b, "jaccard": pa.array(jac, pa.float64())},
        schema=PAIR_ARROW_SCHEMA,
    )


def expand_copies(
    ids: pa.Array, copies: pa.Array, i: np.ndarray, j: np.ndarray, jac: np.ndarray
) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Pairs of block members ``(i, j, jac)`` -> the same pairs between every copy.

    ``copies``: per member, the ids of all documents with its text (itself
    included; see :meth:`lsh_spark.buckets.DuplicateGroups.copies`), null for
    a member with no copy.  A pair of members with ``c_i`` and ``c_j`` copies
    becomes ``c_i * c_j`` pairs with the same Jaccard, each ordered so that
    ``id_a < id_b`` (Arrow compares strings bytewise, as Spark does): what
    :meth:`~lsh_spark.buckets.DuplicateGroups.expand` does with two joins
    per pair row, here in numpy inside the block task.
    """
    singles = pa.ListArray.from_arrays(pa.array(np.arange(len(ids) + 1, dtype=np.int32)), ids)
    names = pc.coalesce(copies.cast(singles.type), singles)
    n = pc.list_value_length(names).to_numpy(zero_copy_only=False).astype(np.int64)
    off = np.zeros(len(n) + 1, dtype=np.int64)
    np.cumsum(n, out=off[1:])
    flat = pc.list_flatten(names)
    m = n[i] * n[j]
    pair = np.repeat(np.arange(len(i)), m)
    t = np.arange(int(m.sum())) - np.repeat(np.cumsum(m) - m, m)
    width = n[j][pair]
    ia = off[i][pair] + t // width
    ib = off[j][pair] + t % width
    # Each pair ordered by its ids' ranks in Arrow's sort (bytewise for
    # strings, as Spark compares them): two takes of the ids, instead of two
    # takes, a string comparison and two string selections.
    rank = sort_ranks(flat)
    first = rank[ia] < rank[ib]
    return (
        flat.take(pa.array(np.where(first, ia, ib))),
        flat.take(pa.array(np.where(first, ib, ia))),
        jac[pair],
    )


def block_memberships(blocks: DataFrame) -> DataFrame:
    """``(block, ids) -> (id, in_blocks)``: the keys of every block each document is in."""
    return (
        blocks.select("block", F.explode("ids").alias("id"))
        .groupBy("id")
        .agg(F.array_sort(F.collect_list("block")).alias("in_blocks"))
    )


def drop_block_pairs(candidates: DataFrame, memberships: DataFrame) -> DataFrame:
    """Candidate pairs minus those whose two documents share a block (checked there)."""
    both = F.coalesce(F.arrays_overlap("in_blocks_a", "in_blocks_b"), F.lit(False))
    return (
        join_sides(candidates, memberships, "in_blocks", how="left")
        .filter(~both)
        .select("id_a", "id_b")
    )


def block_groups(
    blocks: DataFrame,
    memberships: DataFrame,
    max_size: int,
    n_edges: int | None = None,
    max_family_size: int | None = None,
    checkpoint_dir: str | None = None,
) -> DataFrame:
    """``(id, group, merged, family, family_size, bounded)``: which task verifies
    each block member, and whether its family's pairs are bounded.

    Blocks that share members (the bands of one template family give dozens of
    nearly equal member sets) are joined into one group when the group has at
    most ``max_size`` members, so their pairs are computed once instead of once
    per block.  A larger group stays split into its blocks (``merged`` false):
    a member then sits in several groups and each pair goes to the smallest
    block holding it.  ``n_edges``: the total of ``size(in_blocks)`` over
    ``memberships``, counted here when not given.

    A *family* is a connected set of blocks (``family`` is its smallest
    member id, ``family_size`` its members).  A family of more than
    ``max_family_size`` members (None: no bound) is ``bounded``: its groups
    write only a spanning forest of their pairs at or above the threshold,
    computing about ``n`` Jaccard values for a dense family, in one task up to
    ``FOREST_PAIRS_PER_TASK`` pairs (see :func:`block_forest`, :func:`block_tasks`).

    Up to ``LOCAL_FINISH_EDGES`` memberships the rows are computed in one task
    (:func:`_group_rows`); a larger block graph takes distributed connected
    components (its rounds saved in ``checkpoint_dir``) and joins, with the
    same result.
    """
    from lsh_spark.components import LOCAL_FINISH_EDGES, connected_components

    if n_edges is None:  # block memberships in all (one small job)
        n_edges = memberships.agg(F.sum(F.size("in_blocks"))).first()[0] or 0
    if n_edges <= LOCAL_FINISH_EDGES:
        return _groups_in_one_task(memberships, max_size, max_family_size)
    # Edges from each member's first block to all its blocks (self-edges keep
    # every block in the graph).
    edges = memberships.select(
        F.element_at("in_blocks", 1).alias("id_a"), F.explode("in_blocks").alias("id_b")
    )
    comps = connected_components(
        edges, blocks.select(F.col("block").alias("id")), checkpoint_dir=checkpoint_dir
    )
    root = comps.select(F.col("id").alias("block"), F.col("cluster_id").alias("root"))
    member_root = memberships.select("id", F.element_at("in_blocks", 1).alias("block")).join(
        root, "block"
    )
    families = member_root.groupBy("root").agg(
        F.count(F.lit(1)).alias("family_size"), F.min("id").alias("family")
    )
    small = F.col("family_size") <= max_size
    bounded = (
        F.lit(False) if max_family_size is None else F.col("family_size") > max_family_size
    ).alias("bounded")
    family = ["family", "family_size", bounded]
    merged = member_root.join(families.filter(small), "root").select(
        "id", F.col("root").alias("group"), F.lit(True).alias("merged"), *family
    )
    split = (
        blocks.select("block", F.explode("ids").alias("id"))
        .join(root, "block")
        .join(families.filter(~small), "root")
        .select("id", F.col("block").alias("group"), F.lit(False).alias("merged"), *family)
    )
    return merged.unionByName(split)


def _group_rows(table: pa.Table, max_size: int, max_family_size: int | None) -> pa.Table:
    """:func:`block_groups` of all ``(id, in_blocks)`` memberships at once, in numpy.

    Blocks are numbered in key order and joined through each member's first
    block (:func:`lsh_spark.components.local_roots`), so a family's group is its
    smallest block key and its name its smallest member id in Spark's order
    (Arrow sorts strings bytewise, as Spark compares them): the values of the
    distributed path.
    """
    from lsh_spark.components import local_roots

    ids = table.column("id").combine_chunks()
    in_blocks = table.column("in_blocks").combine_chunks()
    m = len(ids)
    counts = pc.list_value_length(in_blocks).to_numpy(zero_copy_only=False).astype(np.int64)
    keys, block = np.unique(
        pc.list_flatten(in_blocks).to_numpy(zero_copy_only=False), return_inverse=True
    )
    owner = np.repeat(np.arange(m), counts)  # the member of each membership
    starts = np.zeros(m, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    first = block[starts]
    child, parent = local_roots(first[owner], block, len(keys), max_sweeps=len(keys) + 1)
    root = np.arange(len(keys))
    root[child] = parent
    family = root[first]  # each member's family, as its smallest block number
    size = np.bincount(family, minlength=len(keys))
    order = pc.sort_indices(ids).to_numpy()
    rank = np.empty(m, dtype=np.int64)
    rank[order] = np.arange(m)
    smallest = np.full(len(keys), m, dtype=np.int64)
    np.minimum.at(smallest, family, rank)
    member_size = size[family]
    merged = member_size <= max_size
    # Members of a merged family: one row in its group; of a larger one, one
    # row per block they are in, the block being the group.
    split = ~merged[owner]
    row = np.concatenate([np.flatnonzero(merged), owner[split]])
    group = np.concatenate([keys[family[merged]], keys[block[split]]])
    bounded = (
        np.zeros(len(row), dtype=bool)
        if max_family_size is None
        else member_size[row] > max_family_size
    )
    take = pa.array(row)
    return pa.table(
        {
            "id": ids.take(take),
            "group": pa.array(group, pa.int64()),
            "merged": pa.array(np.arange(len(row)) < int(merged.sum())),
            "family": ids.take(pa.array(order[smallest[family[row]]])),
            "family_size": pa.array(member_size[row], pa.int64()),
            "bounded": pa.array(bounded),
        }
    )


def _groups_in_one_task(
    memberships: DataFrame, max_size: int, max_family_size: int | None
) -> DataFrame:
    """:func:`block_groups` in one task (:func:`_group_rows`): for block graphs up
    to ``LOCAL_FINISH_EDGES`` memberships, where the joins and aggregations of
    the distributed path cost more in stages than in work."""
    id_type = memberships.schema["id"].dataType.simpleString()
    schema = (
        f"id {id_type}, group long, merged boolean, family {id_type}, "
        "family_size long, bounded boolean"
    )

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = [b for b in batches if b.num_rows]
        if batches:
            yield from _group_rows(
                pa.Table.from_batches(batches), max_size, max_family_size
            ).to_batches()

    return memberships.select("id", "in_blocks").repartition(1).mapInArrow(run, schema)


def block_tasks(groups: DataFrame) -> DataFrame:
    """:func:`block_groups` -> ``(group, n, parts, part, family, family_size,
    bounded)``: one row per verification task.

    A group of ``n`` members gets ``ceil(n (n - 1) / 2 / PAIRS_PER_TASK)`` tasks
    (at most ``n``), a group of a bounded family ``FOREST_PAIRS_PER_TASK``
    pairs per task; one row per task, so the table grows with the block
    groups, not with the documents.
    """
    n = F.col("n").cast("long")
    # A group lies inside one family: the maxima are its family's values.
    family = ["family", "family_size", "bounded"]
    # A bounded family's group usually computes about n pairs (see
    # block_forest), and every share receives all n members: it is split only
    # when its worst case (all pairs) exceeds FOREST_PAIRS_PER_TASK.
    pairs = n * (n - 1) / 2
    per_task = F.when(F.col("bounded"), F.lit(FOREST_PAIRS_PER_TASK)).otherwise(
        F.lit(PAIRS_PER_TASK)
    )
    parts = F.least(n, F.greatest(F.lit(1), F.ceil(pairs / per_task)))
    return (
        groups.groupBy("group")
        .agg(F.count(F.lit(1)).alias("n"), *[F.max(c).alias(c) for c in family])
        .select("group", "n", parts.cast("int").alias("parts"), *family)
        .select(
            "group",
            "n",
            "parts",
            F.explode(F.sequence(F.lit(0), F.col("parts") - 1)).alias("part"),
            *family,
        )
    )


def block_work(groups: DataFrame | None, top: int = 10) -> dict[str, Any]:
    """How block verification is shared out: groups, tasks, split groups and their
    tasks, the largest group, and the families bounded to a spanning forest
    (how many, their members, the ``top`` largest as ``{smallest_id, size}``,
    the smallest id being the family's cluster id when it is one cluster); one
    small aggregation over :func:`block_tasks` (:func:`block_work_frame`, which
    a caller may fold into a query of its own and read with
    :func:`block_work_of`), all zero without ``groups``."""
    if groups is None:
        return block_work_of(None, top)
    return block_work_of(block_work_frame(groups).first(), top)


def block_work_frame(groups: DataFrame) -> DataFrame:
    """The one-row aggregation of :func:`block_work`: columns ``bw_groups``,
    ``bw_tasks``, ``bw_split``, ``bw_split_tasks``, ``bw_largest``, ``bw_bounded``."""
    fam = F.when(
        F.col("bounded"),
        F.struct(F.col("family_size").alias("size"), F.col("family").alias("family")),
    )
    return (
        block_tasks(groups)
        .filter(F.col("part") == 0)
        .agg(
            F.count(F.lit(1)).alias("bw_groups"),
            F.sum("parts").alias("bw_tasks"),
            F.count(F.when(F.col("parts") > 1, 1)).alias("bw_split"),
            F.sum(F.when(F.col("parts") > 1, F.col("parts"))).alias("bw_split_tasks"),
            F.max("n").alias("bw_largest"),
            # One entry per bounded family (a split one has a group per block).
            F.array_sort(F.collect_set(fam)).alias("bw_bounded"),
        )
    )


def block_work_of(row: Any, top: int = 10) -> dict[str, Any]:
    """:func:`block_work` from a row holding :func:`block_work_frame`'s columns
    (None: no block groups)."""
    limits = {"pairs_per_task": PAIRS_PER_TASK, "forest_pairs_per_task": FOREST_PAIRS_PER_TASK}
    if row is None:
        return {
            "groups": 0,
            "tasks": 0,
            "split_groups": 0,
            "split_tasks": 0,
            "largest_group": 0,
            **limits,
            "forest_families": 0,
            "forest_family_documents": 0,
            "largest_forest_families": [],
        }
    bounded = row["bw_bounded"] or []
    return {
        "groups": int(row["bw_groups"]),
        "tasks": int(row["bw_tasks"] or 0),
        "split_groups": int(row["bw_split"]),
        "split_tasks": int(row["bw_split_tasks"] or 0),
        "largest_group": int(row["bw_largest"] or 0),
        **limits,
        "forest_families": len(bounded),
        "forest_family_documents": sum(int(b["size"]) for b in bounded),
        "largest_forest_families": [
            {"smallest_id": b["family"], "size": int(b["size"])} for b in bounded[::-1][:top]
        ],
    }


def share_slots(split: DataFrame, n: int) -> DataFrame:
    """``(group, part, parts)`` of split tasks -> the same plus ``slot``.

    ``slot`` is a long whose Spark hash partition among ``n`` (``pmod(hash(slot),
    n)``, the placement of ``repartition(n, "slot")``) is the task's own, so each
    of ``n`` tasks gets a partition to itself.  A range partitioning only
    samples its bounds and can put two shares in one partition, which then
    takes twice as long as the others.  The slots are the smallest longs that
    hash to each partition, found among ``64 n`` candidates; a partition that
    none of them reaches (probability about ``n e**-64``) falls back to its own
    number, which only risks sharing a partition.

    With more than ``n`` tasks (``n`` a partition count chosen before they
    were counted, see :func:`verify_blocks`), task ``i`` in one arbitrary
    order gets partition ``i mod n``: no partition holds more than one task
    more than another, and tasks that share a slot stay apart by their
    ``(group, part)``.
    """
    # Numbered 0, 1, ... mod n: in one partition, monotonically_increasing_id
    # counts the rows from 0 (the table has one row per share, not per document).
    numbered = split.coalesce(1).withColumn("_i", F.monotonically_increasing_id() % n)
    keys = (
        split.sparkSession.range(64 * n)
        .select(F.pmod(F.hash("id"), F.lit(n)).alias("_i"), "id")
        .groupBy("_i")
        .agg(F.min("id").alias("slot"))
    )
    return numbered.join(F.broadcast(keys), "_i", "left").select(
        "group", "part", "parts", F.coalesce("slot", F.col("_i").cast("long")).alias("slot")
    )


def verify_blocks(
    blocks: DataFrame,
    memberships: DataFrame,
    shingles: DataFrame,
    threshold: float,
    max_group_size: int,
    groups: DataFrame | None = None,
    work: dict[str, Any] | None = None,
    copies: DataFrame | None = None,
    max_family_size: int | None = None,
    share_partitions: int | None = None,
    forest: bool = False,
    checkpoint_dir: str | None = None,
) -> DataFrame:
    """``(block, ids)`` x ``(id, shingles) -> (id_a, id_b, jaccard)`` with ``jaccard >= threshold``.

    Each group of blocks (see :func:`block_groups`; pass ``groups`` to reuse a
    persisted one) travels to one task with its members' shingles and the keys
    of every block they belong to (``memberships``, from
    :func:`block_memberships`); see :func:`block_pairs`.  A group of more than
    ``PAIRS_PER_TASK`` pairs goes to several tasks, each with all its members
    and a contiguous share of its rows.  Every pair of members of some block is
    checked and emitted exactly once.  Starts one small job (:func:`block_work`)
    unless its result is passed as ``work`` or ``share_partitions`` is given:
    the shares of split groups then go to that many partitions, round robin
    (see :func:`share_slots`), however many there are.  ``copies``: ``(rep, copies)`` of
    :meth:`lsh_spark.buckets.DuplicateGroups.copies`; a member with copies
    then has its pairs given to every copy in the block task
    (:func:`expand_copies`).  ``max_family_size`` (used when ``groups`` is not
    given): a larger family's tasks emit a spanning forest of its pairs
    instead of all of them (see :func:`block_groups`).  ``forest=True``
    (``--pairs edges``): every family emits a spanning forest of its verified
    pairs, copies not expanded (they have their own star edges).
    """
    if groups is None:
        groups = block_groups(
            blocks,
            memberships,
            max_group_size,
            max_family_size=max_family_size,
            checkpoint_dir=checkpoint_dir,
        )
    if work is None and share_partitions is None:
        work = block_work(groups)
    tasks = block_tasks(groups)
    rows = (
        groups.join(memberships, "id")
        .join(shingles.select("id", "shingles"), "id")
        .select("group", "merged", "bounded", "id", "shingles", "in_blocks")
    )
    if copies is not None and not forest:
        rows = rows.join(copies.withColumnRenamed("rep", "id"), "id", "left")

    def verified(df: DataFrame, key: list[str]) -> DataFrame:
        return df.groupBy(*key).applyInArrow(
            lambda _, t: _verify_block(t, threshold, forest), PAIR_SCHEMA
        )

    whole = tasks.filter(F.col("parts") == 1).select("group", "part", "parts")
    split = tasks.filter(F.col("parts") > 1).select("group", "part", "parts")
    # Groups verified by one task go through one shuffle by group, sized by
    # adaptive execution.  The shares of split groups get one partition each,
    # so they run in parallel: hash-partitioned on their slot into as many
    # partitions as there are shares (a number adaptive execution leaves as it
    # is), and grouped by (slot, group, part), which needs no further shuffle.
    one = verified(rows.join(F.broadcast(whole), "group"), ["group"])
    n_split = work["split_tasks"] if work is not None else share_partitions
    if not n_split:
        return one
    shares = rows.join(F.broadcast(share_slots(split, n_split)), "group").repartition(
        n_split, "slot"
    )
    return one.unionByName(verified(shares, ["slot", "group", "part"]))
