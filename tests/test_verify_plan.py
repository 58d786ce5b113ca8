"""The verification plan at its thresholds: pure functions, no Spark session."""

import pytest

from lsh_spark.stages.verify_plan import (
    BROADCAST_ID_ROWS,
    BROADCAST_SHINGLE_BYTES,
    VerifyCounts,
    bounded_counts,
    plan_verify,
)

# Shingles that, with 1,000 documents, fill a broadcast exactly.
FULL = BROADCAST_SHINGLE_BYTES // 8 - 8000


def test_the_limits_are_the_documented_ones():
    assert BROADCAST_SHINGLE_BYTES == 64 << 20 and BROADCAST_ID_ROWS == 2_000_000


@pytest.mark.parametrize(
    "documents,shingles,block_members,bounded",
    [
        (1000, FULL, 10, True),  # exactly BROADCAST_SHINGLE_BYTES
        (1000, FULL + 1, 10, False),  # one shingle more
        (1000, 10, None, False),
        (None, 10, 0, False),
        (1000, None, 0, False),
        (BROADCAST_ID_ROWS + 1, 10, 0, False),  # more ids than BROADCAST_ID_ROWS
    ],
)
def test_sized_by_bounds_only_when_every_shingle_set_fits_a_broadcast(
    documents, shingles, block_members, bounded
):
    assert (bounded_counts(block_members, documents, shingles) is not None) is bounded


def test_bounds_plan_broadcasts_everything_and_spreads_shares_over_partitions():
    counts = bounded_counts(10, 1000, FULL)
    assert counts == VerifyCounts(pair_docs=1000, pair_shingles=FULL, block_docs=1000)
    plan = plan_verify(counts, "bounds", groups_planned=True)
    assert plan.sized_by == "bounds" and plan.report_after_write
    assert plan.broadcast_shingles and plan.broadcast_pair_ids and plan.broadcast_member_ids
    assert plan.has_blocks and plan.share_spread == "shuffle_partitions"


def test_bounds_without_blocks():
    plan = plan_verify(bounded_counts(0, 1000, 10), "bounds", groups_planned=False)
    assert not plan.has_blocks and plan.share_spread is None
    assert plan.counts.block_docs == 0


@pytest.mark.parametrize("pair_shingles,broadcast", [(FULL, True), (FULL + 1, False)])
def test_job_plan_broadcasts_shingles_up_to_the_limit(pair_shingles, broadcast):
    plan = plan_verify(VerifyCounts(1000, pair_shingles, 0), "job", groups_planned=False)
    assert plan.broadcast_shingles is broadcast
    assert plan.sized_by == "job" and not plan.report_after_write


@pytest.mark.parametrize(
    "rows,broadcast", [(BROADCAST_ID_ROWS, True), (BROADCAST_ID_ROWS + 1, False)]
)
def test_id_lists_are_broadcast_up_to_the_limit(rows, broadcast):
    plan = plan_verify(VerifyCounts(rows, 0, rows, block_edges=rows), "job", groups_planned=True)
    assert plan.broadcast_pair_ids is broadcast and plan.broadcast_member_ids is broadcast


@pytest.mark.parametrize("groups_planned,spread", [(True, "sizing_job"), (False, "own_job")])
def test_job_plan_counts_block_shares_in_the_sizing_job_or_their_own(groups_planned, spread):
    plan = plan_verify(VerifyCounts(10, 100, 5, block_edges=7), "job", groups_planned)
    assert plan.has_blocks and plan.share_spread == spread


def test_plan_is_frozen():
    plan = plan_verify(VerifyCounts(1, 1, 0), "job", groups_planned=False)
    with pytest.raises(AttributeError):
        plan.broadcast_shingles = False
