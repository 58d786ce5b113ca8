"""How the verification stage runs, decided from counts alone (no Spark here).

:func:`lsh_spark.stages.verify.stage_verify` needs a few sizes before it
builds its query: how many documents sit in some candidate pair and how many
shingles they hold (broadcast them to the verify tasks, or shuffle them), how
many documents sit in blocks (is there block verification at all) and whether
the id lists that filter the shingle table fit in a broadcast.  Those sizes
either come from one small *sizing job*, or, when the earlier stages' counts
already bound them below the broadcast limits, from those counts (no job).
:func:`bounded_counts` makes that choice and :func:`plan_verify` turns the
counts into a :class:`VerifyPlan`; both are pure functions, tested without a
Spark session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# Candidate documents' shingles up to this size are broadcast to the verify tasks.
BROADCAST_SHINGLE_BYTES = 64 << 20
# Candidate id lists up to this many rows (about 100 MB) are broadcast to filter
# the shingle table where it is read.
BROADCAST_ID_ROWS = 2_000_000


def small_id_list(ids: DataFrame, rows: int) -> DataFrame:
    """``ids`` (an id list of ``rows`` rows) with a broadcast hint when it has at most
    ``BROADCAST_ID_ROWS`` rows: a join against it then filters the other side where
    it is read instead of shuffling it."""
    return F.broadcast(ids) if rows <= BROADCAST_ID_ROWS else ids


# Estimated broadcast bytes of one shingle (a 64-bit hash) ...
SHINGLE_BYTES = 8
# ... and of one document's row around its shingle array (id, array header).
DOCUMENT_BYTES = 64

# How the tasks of split block groups (groups verified by several tasks) are
# spread: counted by the sizing job, counted by a job of their own after the
# groups are planned, or spread over the shuffle partitions uncounted.
ShareSpread = Literal["sizing_job", "own_job", "shuffle_partitions"]


@dataclass(frozen=True)
class VerifyCounts:
    """The sizes the plan depends on (exact from the sizing job, or upper bounds).

    Attributes
    ----------
    pair_docs : documents that occur in some candidate pair.
    pair_shingles : the shingles of those documents.
    block_docs : documents that are members of some block.
    block_edges : block memberships (``size(in_blocks)`` summed), or None when
        not counted (the block groups are then planned before the counts).
    """

    pair_docs: int
    pair_shingles: int
    block_docs: int
    block_edges: int | None = None


@dataclass(frozen=True)
class VerifyPlan:
    """The choices of one verification run.

    Attributes
    ----------
    sized_by : ``"bounds"`` (the earlier stages' counts, no sizing job) or
        ``"job"`` (one small job counted the sizes); in the report as
        ``verify_sizing``.
    counts : the sizes the choices below were made from.
    broadcast_shingles : ship the candidates' shingle sets to every task
        instead of shuffling them (and then not cache them: a broadcast reads
        them once anyway).
    broadcast_pair_ids : broadcast the ids of the pair candidates that filter
        the shingle table.
    broadcast_member_ids : broadcast the ids of the block members that filter
        the shingle table.
    has_blocks : some documents are block members: run block verification.
    share_spread : how the tasks of split block groups are spread (see
        :data:`ShareSpread`); None without blocks.
    report_after_write : the report's duplicate and block figures are counted
        by one small query after ``pairs/`` is written (the sizing job, which
        would have counted them, did not run).
    """

    sized_by: Literal["bounds", "job"]
    counts: VerifyCounts
    broadcast_shingles: bool
    broadcast_pair_ids: bool
    broadcast_member_ids: bool
    has_blocks: bool
    share_spread: ShareSpread | None
    report_after_write: bool


def fits_broadcast(documents: int, shingles: int) -> bool:
    """Whether ``documents`` shingle sets of ``shingles`` shingles in all fit in a
    broadcast of ``BROADCAST_SHINGLE_BYTES``.

    >>> fits_broadcast(1000, 10)
    True
    >>> fits_broadcast(1, BROADCAST_SHINGLE_BYTES // SHINGLE_BYTES)
    False
    """
    return SHINGLE_BYTES * shingles + DOCUMENT_BYTES * documents <= BROADCAST_SHINGLE_BYTES


def bounded_counts(
    block_members: int | None, documents: int | None, shingles: int | None
) -> VerifyCounts | None:
    """The sizes bounded by the earlier stages' counts, or None if a sizing job must count them.

    Every size of :class:`VerifyCounts` is at most the accepted ``documents``
    (or their ``shingles``).  When the shingle sets of *every* accepted
    document fit in a broadcast (:func:`fits_broadcast`) and their ids in a
    broadcast id list (at most ``BROADCAST_ID_ROWS``), those bounds lead to the
    same choices a count would: so no sizing job is needed.  ``block_members``
    (the candidate stage's total of block sizes) must be known too: it says
    whether there are blocks at all.

    >>> bounded_counts(0, 1000, 20_000)
    VerifyCounts(pair_docs=1000, pair_shingles=20000, block_docs=0, block_edges=None)
    >>> bounded_counts(None, 1000, 20_000) is None
    True
    """
    if block_members is None or documents is None or shingles is None:
        return None
    if not fits_broadcast(documents, shingles) or documents > BROADCAST_ID_ROWS:
        return None
    return VerifyCounts(
        pair_docs=documents, pair_shingles=shingles, block_docs=documents if block_members else 0
    )


def plan_verify(
    counts: VerifyCounts, sized_by: Literal["bounds", "job"], groups_planned: bool
) -> VerifyPlan:
    """The plan of a verification run from its sizes.

    Parameters
    ----------
    counts : the sizes, from :func:`bounded_counts` (``sized_by="bounds"``) or
        the sizing job (``sized_by="job"``).
    sized_by : where ``counts`` come from.
    groups_planned : the block groups were planned before the sizes were
        known (the candidate stage reported its block members), so the sizing
        job could count how their verification is shared out.

    >>> plan = plan_verify(VerifyCounts(10, 500, 0), "job", groups_planned=False)
    >>> plan.broadcast_shingles, plan.has_blocks, plan.share_spread
    (True, False, None)
    """
    has_blocks = counts.block_docs > 0
    share_spread: ShareSpread | None = None
    if has_blocks:
        if not groups_planned:
            share_spread = "own_job"
        elif sized_by == "bounds":
            share_spread = "shuffle_partitions"
        else:
            share_spread = "sizing_job"
    return VerifyPlan(
        sized_by=sized_by,
        counts=counts,
        broadcast_shingles=fits_broadcast(counts.pair_docs, counts.pair_shingles),
        broadcast_pair_ids=counts.pair_docs <= BROADCAST_ID_ROWS,
        broadcast_member_ids=counts.block_docs <= BROADCAST_ID_ROWS,
        has_blocks=has_blocks,
        share_spread=share_spread,
        report_after_write=sized_by == "bounds",
    )
