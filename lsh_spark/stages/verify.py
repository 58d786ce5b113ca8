"""Stage 3, verify: the exact Jaccard of every candidate, plus exact-duplicate edges.

Writes ``pairs/``.  The stage first decides how to run (a
:class:`~lsh_spark.stages.verify_plan.VerifyPlan`, from counts alone), then
builds one query that verifies the candidate pairs (:func:`_near_pairs`) and
the blocks (:func:`_block_pairs`) and writes them with the copies' edges:
with ``--pairs edges`` a star edge from each copy of a text to its
representative and a spanning forest inside each block family; with
``--pairs all`` every copy also gets its representative's pairs.  The other
methods' exact measures are in :mod:`lsh_spark.stages.measure`.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from lsh_spark import blocks as blocks_module
from lsh_spark import jaccard as jaccard_module
from lsh_spark.blocks import block_groups, block_memberships, drop_block_pairs
from lsh_spark.buckets import DuplicateGroups, pairs_written
from lsh_spark.caching import cached
from lsh_spark.components import Checkpoints
from lsh_spark.config import DedupConfig
from lsh_spark.jaccard import candidate_ids
from lsh_spark.report import (
    SIMILARITY_BINS,
    histogram,
    histogram_metrics,
    similarity_bin,
    similarity_bin_of,
)
from lsh_spark.stages.common import Output, Timer, accepted_shingles, checkpoint_dir, observed
from lsh_spark.stages.measure import stage_verify_measure
from lsh_spark.stages.rounds import saved_rounds
from lsh_spark.stages.verify_plan import (
    BROADCAST_ID_ROWS,
    VerifyCounts,
    VerifyPlan,
    bounded_counts,
    plan_verify,
)


@dataclass
class _Tables:
    """The tables verification reads, the ones read more than once cached."""

    blocks: DataFrame
    signatures: DataFrame
    shingles: DataFrame  # (id, shingles) of every accepted document
    memberships: DataFrame  # (id, in_blocks), cached
    pairs: DataFrame  # candidate pairs not inside a block, cached
    pair_ids: DataFrame  # the ids of those pairs, cached
    dups: DuplicateGroups  # groups of identical texts, cached
    checkpoints: Checkpoints | None  # where connected components of the block graph keep rounds
    groups: DataFrame | None = None  # block groups, cached once planned


def stage_verify(
    spark: SparkSession,
    out: Output,
    cfg: DedupConfig,
    block_members: int | None = None,
    documents: int | None = None,
    shingles: int | None = None,
) -> dict[str, Any]:
    """Exact Jaccard of every candidate, plus exact-duplicate edges: writes ``pairs/``.

    For the other methods, the method's exact measure (:func:`stage_verify_measure`).

    Parameters
    ----------
    block_members : the total of the block sizes in ``blocks/`` when the
        caller knows it (the candidate stage's ``buckets.block_members``); the
        block groups are then planned before the sizing job, which also
        counts how their verification is shared out.
    documents, shingles : the accepted documents and their shingles when the
        caller knows them (the signature stage's ``counts``).  With all three
        given and small enough, no sizing job runs at all
        (:func:`lsh_spark.stages.verify_plan.bounded_counts`).
    """
    if cfg.method != "minhash":
        return stage_verify_measure(spark, out, cfg)
    timer = Timer(spark)
    with timer("verify"), ExitStack() as stack:
        t = _cached_tables(out, cfg, stack)
        written = pairs_written(t.dups, t.pairs, t.blocks, cfg)
        if block_members:
            t.groups = _cached_groups(t, cfg, block_members, stack)
        plan, sizes = _plan(t, block_members, documents, shingles)
        found, block_work = _verified_pairs(spark, t, plan, sizes, cfg, stack)
        pairs, seen = observed(
            found.unionByName(t.dups.pairs()),
            **histogram_metrics(
                similarity_bin(F.col("jaccard")),
                SIMILARITY_BINS,
                first=similarity_bin_of(cfg.threshold),
            ),
            exact=F.count(F.when(F.col("jaccard") >= 1.0, 1)),
        )
        out.write(pairs, "pairs")
        if plan.report_after_write:
            after = _figures_after_write(t)
            if after is not None:
                block_work = after
    # The histogram bins also give the total.
    metrics = seen.result(out, "pairs")
    bins = histogram(metrics)
    return {
        # Rows of pairs/: every one a verified pair, edges only by default.
        "counts": {
            "verified_pairs": sum(n for _, n in bins),
            "pairs_with_jaccard_1": int(metrics["exact"]),
        },
        "pairs_written": written,
        "block_verification": {**block_work, "max_family_size": cfg.max_family_size},
        "exact_duplicates": t.dups.stats(),
        "jaccard_histogram": [{"from": round(b / SIMILARITY_BINS, 2), "pairs": n} for b, n in bins],
        "verify_sizing": plan.sized_by,
        "seconds": timer.seconds,
        "cpu_seconds": timer.cpu,
    }


def _cached_tables(out: Output, cfg: DedupConfig, stack: ExitStack) -> _Tables:
    """Read the stage's inputs; cache, until ``stack`` closes, what is read twice."""
    blocks = out.read("blocks")
    memberships = stack.enter_context(cached(block_memberships(blocks)))
    # Read twice below (its ids, then the pairs themselves): computed once.
    pairs = stack.enter_context(cached(drop_block_pairs(out.read("candidates"), memberships)))
    signatures = out.read("signatures")
    return _Tables(
        checkpoints=saved_rounds(checkpoint_dir(out, cfg)),
        blocks=blocks,
        signatures=signatures,
        shingles=accepted_shingles(out),
        memberships=memberships,
        pairs=pairs,
        pair_ids=stack.enter_context(cached(candidate_ids(pairs))),
        # Read by the sizing job, the pair expansion, the block tasks' copies
        # and the pairs of identical texts: computed once.
        dups=stack.enter_context(
            cached(DuplicateGroups(signatures, cfg.max_bucket_size, cfg.pairs == "all"))
        ),
    )


def _cached_groups(t: _Tables, cfg: DedupConfig, n_edges: int, stack: ExitStack) -> DataFrame:
    """The block groups (:func:`lsh_spark.blocks.block_groups`), cached: read twice
    (the number of tasks, then the tasks)."""
    return stack.enter_context(
        cached(
            block_groups(
                t.blocks,
                t.memberships,
                cfg.max_bucket_size,
                n_edges=n_edges,
                max_family_size=cfg.max_family_size,
                checkpoints=t.checkpoints,
            )
        )
    )


def _plan(
    t: _Tables, block_members: int | None, documents: int | None, shingles: int | None
) -> tuple[VerifyPlan, Row | None]:
    """The plan, from the earlier stages' counts or from one sizing job (then also
    its row, which holds the duplicate groups' figures and, with the block
    groups planned, how their verification is shared out)."""
    bounds = bounded_counts(block_members, documents, shingles)
    groups_planned = t.groups is not None
    if bounds is not None:
        # Every count is at most the accepted documents.
        t.dups.plan_for(bounds.pair_docs)
        return plan_verify(bounds, "bounds", groups_planned), None
    sizes = _count_sizes(t)
    t.dups.stats(sizes)
    counts = VerifyCounts(
        pair_docs=int(sizes["pair_docs"]),
        pair_shingles=int(sizes["pair_shingles"] or 0),
        block_docs=int(sizes["block_docs"]),
        block_edges=int(sizes["block_edges"] or 0),
    )
    return plan_verify(counts, "job", groups_planned), sizes


def _count_sizes(t: _Tables) -> Row:
    """The sizing job: one small query counting the pair candidates' documents and
    shingles (from ``signatures/``), the block members and memberships, the
    groups of identical texts and, with block groups planned, how their
    verification is shared out."""
    sizing = (
        t.signatures.join(t.pair_ids, "id", "left_semi")
        .agg(F.count(F.lit(1)).alias("pair_docs"), F.sum("num_shingles").alias("pair_shingles"))
        .crossJoin(
            t.memberships.agg(
                F.count(F.lit(1)).alias("block_docs"),
                F.sum(F.size("in_blocks")).alias("block_edges"),
            )
        )
        .crossJoin(t.dups.stats_frame())
    )
    if t.groups is not None:
        sizing = sizing.crossJoin(blocks_module.block_work_frame(t.groups))
    return sizing.first()


def _keep_ids(table: DataFrame, ids: DataFrame, broadcast: bool) -> DataFrame:
    """The rows of ``table`` whose ``id`` is in ``ids``.  A broadcast id list
    filters the table where it is read instead of shuffling it whole."""
    return table.join(F.broadcast(ids) if broadcast else ids, "id", "left_semi")


def _verified_pairs(
    spark: SparkSession,
    t: _Tables,
    plan: VerifyPlan,
    sizes: Row | None,
    cfg: DedupConfig,
    stack: ExitStack,
) -> tuple[DataFrame, dict[str, Any]]:
    """The verified pairs of the candidates and of the blocks (with ``--pairs
    all``, every copy of an identical text given its representative's pairs);
    and the block work figures known before the write."""
    # Pairs of representatives; with --pairs all every copy gets its
    # representative's pairs: near pairs by two joins, block pairs in the block
    # tasks (with --pairs edges, expand and copies leave them as they are).
    found = t.dups.expand(_near_pairs(t, plan, cfg, stack), BROADCAST_ID_ROWS)
    block_work = blocks_module.block_work(None)
    if not plan.has_blocks:  # no blocks, no second read of shingles/
        return found, block_work
    share_partitions = None
    if plan.share_spread == "own_job":
        t.groups = _cached_groups(t, cfg, plan.counts.block_edges or 0, stack)
        block_work = blocks_module.block_work(t.groups)
    elif plan.share_spread == "sizing_job":
        block_work = blocks_module.block_work_of(sizes)
    else:
        # How many tasks the split groups take is counted after the write;
        # their shares are spread over the shuffle partitions instead.
        share_partitions = max(1, int(spark.conf.get("spark.sql.shuffle.partitions")))
    blocks = _block_pairs(t, plan, cfg, block_work, share_partitions, stack)
    return found.unionByName(blocks), block_work


def _near_pairs(t: _Tables, plan: VerifyPlan, cfg: DedupConfig, stack: ExitStack) -> DataFrame:
    """Verified candidate pairs (not in a block) of representatives."""
    # Shingles of the pair candidates only, read once (both sides of every
    # pair need them) and broadcast when they are small.
    # Both sides of the joins read it: computed once.  Broadcast, it is at most
    # BROADCAST_SHINGLE_BYTES on the heap, and it must be cached all the same:
    # Spark does not reuse the first side's broadcast exchange for the second
    # (their id filters read the cached id list through two scans that do not
    # compare equal), so uncached, shingles/ was read in full once per side.
    needed = stack.enter_context(cached(_keep_ids(t.shingles, t.pair_ids, plan.broadcast_pair_ids)))
    return jaccard_module.verify_pairs(
        t.pairs, needed, cfg.threshold, broadcast=plan.broadcast_shingles
    )


def _block_pairs(
    t: _Tables,
    plan: VerifyPlan,
    cfg: DedupConfig,
    block_work: dict[str, Any],
    share_partitions: int | None,
    stack: ExitStack,
) -> DataFrame:
    """Verified pairs of the block members (a spanning forest of each family with
    ``--pairs edges``; copies expanded in the block tasks with ``--pairs all``)."""
    member_shingles = _keep_ids(t.shingles, t.memberships.select("id"), plan.broadcast_member_ids)
    return blocks_module.verify_blocks(
        t.blocks,
        t.memberships,
        member_shingles,
        cfg.threshold,
        cfg.max_bucket_size,
        groups=t.groups,
        work=None if share_partitions else block_work,
        share_partitions=share_partitions,
        copies=t.dups.copies(BROADCAST_ID_ROWS),
        forest=cfg.pairs == "edges",
        checkpoints=t.checkpoints,
        stack=stack,
    )


def _figures_after_write(t: _Tables) -> dict[str, Any] | None:
    """The report's duplicate figures and, with block groups, their block work:
    one small query over the tables the write cached."""
    stats = t.dups.stats_frame()
    if t.groups is not None:
        stats = stats.crossJoin(blocks_module.block_work_frame(t.groups))
    row = stats.first()
    t.dups.stats(row)
    return blocks_module.block_work_of(row) if t.groups is not None else None
