"""Verification of the candidate blocks (``blocks/``) on Spark: groups, tasks, the block task.

Large buckets (a template family, thousands of near-copies) are verified as
*blocks* instead of pair by pair: the members of a block travel to one task
with their shingle sets, which computes every pair of the block with a matrix
product (:func:`lsh_spark.block_matrix.block_pairs`).  A pair that sits in
several blocks is emitted only by the block with the smallest key, so block
output needs no de-duplication across blocks, and candidate pairs inside a
block are left out of the pair verification of :mod:`lsh_spark.jaccard`
(:func:`drop_block_pairs`).  Blocks that share members are verified together
(:func:`block_groups`), a large group by several tasks (:func:`block_tasks`,
:func:`share_slots`).  A family of blocks above ``max_family_size`` members
emits a spanning forest of its pairs instead
(:func:`lsh_spark.block_matrix.block_forest`): the same clusters, at most
``n - 1`` pairs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.block_matrix import block_forest, block_pairs, row_ranges
from lsh_spark.buckets import sort_ranks
from lsh_spark.caching import cached
from lsh_spark.components import Checkpoints
from lsh_spark.jaccard import join_sides
from lsh_spark.shingle import shingle_parts

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


def _verify_block(table: pa.Table, threshold: float, forest: bool = False) -> pa.Table:
    """One task's share of one group: rows ``part`` of ``parts`` (see
    :func:`~lsh_spark.block_matrix.row_ranges`); ``forest``: a spanning forest of
    the group's pairs whatever its family's size."""
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
    checkpoints: Checkpoints | None = None,
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
    ``FOREST_PAIRS_PER_TASK`` pairs (see :func:`~lsh_spark.block_matrix.block_forest`,
    :func:`block_tasks`).

    Up to ``LOCAL_FINISH_EDGES`` memberships the rows are computed in one task
    (:func:`_group_rows`); a larger block graph takes distributed connected
    components (its rounds kept by ``checkpoints``, see
    :func:`lsh_spark.components.connected_components`) and joins, with the
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
        edges, blocks.select(F.col("block").alias("id")), checkpoints=checkpoints
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
    checkpoints: Checkpoints | None = None,
    stack: ExitStack | None = None,
) -> DataFrame:
    """``(block, ids)`` x ``(id, shingles) -> (id_a, id_b, jaccard)`` with ``jaccard >= threshold``.

    Each group of blocks (see :func:`block_groups`; pass ``groups`` to reuse a
    persisted one) travels to one task with its members' shingles and the keys
    of every block they belong to (``memberships``, from
    :func:`block_memberships`); see :func:`lsh_spark.block_matrix.block_pairs`.
    A group of more than ``PAIRS_PER_TASK`` pairs goes to several tasks, each
    with all its members and a contiguous share of its rows.  Every pair of members of some block is
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
    ``checkpoints`` (used when ``groups`` is not given): where the connected
    components of a large block graph keep their rounds (see :func:`block_groups`).
    ``stack``: when split groups have tasks of their own, the members' rows
    (with their shingle sets) are read by both kinds of task; they are then
    cached until ``stack`` closes.  Without it, each kind scans ``shingles``
    and shuffles the members' sets again.
    """
    if groups is None:
        groups = block_groups(
            blocks,
            memberships,
            max_group_size,
            max_family_size=max_family_size,
            checkpoints=checkpoints,
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
    if stack is not None:
        rows = stack.enter_context(cached(rows))
        one = verified(rows.join(F.broadcast(whole), "group"), ["group"])
    shares = rows.join(F.broadcast(share_slots(split, n_split)), "group").repartition(
        n_split, "slot"
    )
    return one.unionByName(verified(shares, ["slot", "group", "part"]))
