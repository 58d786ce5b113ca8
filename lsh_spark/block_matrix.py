"""Every pair of one block at once: exact Jaccard from a matrix product, in numpy.

The members' shingle sets become one 0/1 matrix ``M`` (documents x shingles
shared by two or more members) and every intersection size of the block comes
out of one matrix product ``M @ M.T`` (BLAS) instead of ``n (n - 1) / 2``
hash-set intersections, ``BLOCK_CELLS`` cells at a time (:func:`block_pairs`).
:func:`block_forest` gives a spanning forest of those pairs instead (the same
connected components, at most ``n - 1`` pairs), and :func:`row_ranges` shares
a block's pairs evenly among tasks.  Nothing here runs Spark: the block tasks
of :mod:`lsh_spark.blocks` call these on one block's members.

Example
-------
>>> import numpy as np
>>> values = np.array([1, 2, 3, 1, 2, 4, 7])  # {1, 2, 3}, {1, 2, 4}, {7}
>>> i, j, jac = block_pairs(values, np.array([3, 3, 1]), threshold=0.4)
>>> i.tolist(), j.tolist(), jac.tolist()
([0], [1], [0.5])
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from lsh_spark.components import spanning_forest

# Cells of a dense block matrix (documents x shingles) evaluated at a time:
# 4M cells (16 MiB of float32), whatever the block's shape.
BLOCK_CELLS = 1 << 22


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
