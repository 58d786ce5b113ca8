"""Candidate pairs: documents that share a ``(band, bucket)`` key.

The self-join on the bucket key is evaluated per bucket: band rows are shuffled
once by ``(band, bucket)``, each partition's buckets are gathered into sorted
id arrays by two numpy sorts (:func:`bucket_members`), and the pairs are
generated from those arrays with native higher-order functions.  That is the
same result as ``rows JOIN rows ON (band, bucket) AND a.id < b.id`` with one
shuffle instead of two, and it sees each bucket's size, which is what bounds
the work:

* singleton buckets produce nothing and are dropped;
* within a bucket, exact duplicates (same ``text_hash``) collapse to their
  smallest id first, because their pairs are already known (Jaccard 1);
  :class:`DuplicateGroups` gives the copies their edges after verification;
* buckets of different bands holding the same members produce their pairs once;
* a bucket of ``block_min_size`` members or more (a large family) produces no
  pair rows at all: its member set becomes one *block* that
  :func:`lsh_spark.blocks.verify_blocks` checks whole with a matrix product;
* a bucket with more than ``max_bucket_size`` members (boilerplate, templates)
  produces star edges from its smallest id to every other member, ``n - 1``
  pairs instead of ``n (n - 1) / 2``, and (with :func:`bucket_members`'
  ``max_ids``) comes in rows of at most that many ids.  Members of such a family still end in one
  cluster when they are near-duplicates of the smallest id, and the report says
  how many buckets were bounded and how large they were.

Example
-------
>>> spark = getfixture("spark")
>>> rows = [("a", 0, 7, b"x"), ("b", 0, 7, b"y"), ("c", 0, 7, b"z"), ("d", 0, 9, b"w")]
>>> band_rows = spark.createDataFrame(rows, "id string, band int, bucket long, text_hash binary")
>>> buckets = bucket_members(band_rows)
>>> buckets.select("ids", "size").collect()
[Row(ids=['a', 'b', 'c'], size=3)]
>>> sorted(tuple(row) for row in candidate_pairs(buckets, max_bucket_size=5000).collect())
[('a', 'b'), ('a', 'c'), ('b', 'c')]
>>> candidate_blocks(buckets, max_bucket_size=5000, block_min_size=3).select("ids").collect()
[Row(ids=['a', 'b', 'c'])]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.config import ConfigError, DedupConfig


def sort_ranks(values: pa.Array) -> np.ndarray:
    """The position of each value in Arrow's ascending sort of ``values`` (which
    orders strings bytewise, as Spark compares them): int64, ``0 .. n - 1``."""
    rank = np.empty(len(values), dtype=np.int64)
    rank[pc.sort_indices(values).to_numpy()] = np.arange(len(values))
    return rank


def _bucket_rows(
    band: np.ndarray, bucket: np.ndarray, text: np.ndarray, by_id: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The rows that make buckets of 2+ distinct texts, and where each bucket starts.

    ``by_id`` lists the rows in ascending id order.  Returns ``kept``, row
    indices grouped by bucket (a run of equal ``(band, bucket)``), ascending
    by id within a bucket, one row per distinct ``text`` of the bucket (the
    smallest id's), every bucket of at least two; and ``first``, the position
    in ``kept`` where each bucket starts.

    One stable sort of the bucket keys over the rows in id order groups them
    (a key is a hash of its band and values, so a run of equal keys is one
    band's bucket; should two bands share a 64-bit key, the rows are sorted
    by ``(band, bucket)`` instead).  The copies of a text are then dropped
    among the rows of buckets of 2+ only, which most rows are not.
    """
    order = by_id[np.argsort(bucket[by_id], kind="stable")]
    keys = bucket[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = keys[1:] != keys[:-1]
    in_run = ~new[1:]
    bands = band[order]
    if np.any(bands[1:][in_run] != bands[:-1][in_run]):
        order = by_id[np.lexsort((bucket[by_id], band[by_id]))]
        keys, bands = bucket[order], band[order]
        new[1:] = (keys[1:] != keys[:-1]) | (bands[1:] != bands[:-1])
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, len(order)))
    shared = sizes > 1
    rows = order[np.repeat(shared, sizes)]
    group = np.repeat(np.arange(int(shared.sum())), sizes[shared])
    # Stable: equal (bucket, text) rows stay in id order, the smallest first.
    by_text = np.lexsort((text[rows], group))
    texts, groups = text[rows][by_text], group[by_text]
    first_copy = np.ones(len(by_text), dtype=bool)
    first_copy[1:] = (texts[1:] != texts[:-1]) | (groups[1:] != groups[:-1])
    keep = np.zeros(len(rows), dtype=bool)
    keep[by_text[first_copy]] = True
    kept, group = rows[keep], group[keep]
    starts = np.ones(len(kept), dtype=bool)
    starts[1:] = group[1:] != group[:-1]
    first = np.flatnonzero(starts)
    sizes = np.diff(np.append(first, len(kept)))
    # Buckets left with one text after dropping the copies make no pair.
    two = np.repeat(sizes > 1, sizes)
    kept = kept[two]
    starts = np.ones(len(kept), dtype=bool)
    starts[1:] = group[two][1:] != group[two][:-1]
    return kept, np.flatnonzero(starts)


def _bucket_batches(
    batches: Iterator[pa.RecordBatch], max_ids: int | None
) -> Iterator[pa.RecordBatch]:
    """One partition of ``(id, band, bucket, text_key)`` rows -> its buckets of 2+ members.

    The rows are grouped by :func:`_bucket_rows` (one stable sort of the
    bucket keys over the rows in id order); ids are ordered with Arrow's
    sort, which orders strings bytewise like Spark.  A bucket of more than
    ``max_ids`` members comes as several rows (see :func:`bucket_members`).
    """
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return
    table = pa.Table.from_batches(batches)
    ids = table.column("id").combine_chunks()
    band, bucket, text = (table.column(c).to_numpy() for c in ("band", "bucket", "text_key"))
    kept, first = _bucket_rows(band, bucket, text, pc.sort_indices(ids).to_numpy())
    if not len(kept):
        return
    sizes = np.diff(np.append(first, len(kept)))
    cap = int(sizes.max()) if max_ids is None else max_ids
    whole = (sizes > 1) & (sizes <= cap)
    members = [kept[np.repeat(whole, sizes)]]
    lengths, heads = [sizes[whole]], [kept[first[whole]]]
    size, part = [sizes[whole]], [np.zeros(int(whole.sum()), dtype=np.int64)]
    # Oversized buckets (few: a template, a boilerplate page): rows of the
    # smallest member and up to cap - 1 others, so no row outgrows cap ids.
    for b in np.flatnonzero(sizes > cap):
        center, others = kept[first[b]], kept[first[b] + 1 : first[b] + sizes[b]]
        chunks = np.array_split(others, -(-len(others) // (cap - 1)))
        members += [np.append(center, c) for c in chunks]
        lengths.append([len(c) + 1 for c in chunks])
        heads.append(np.full(len(chunks), center))
        size.append(np.full(len(chunks), sizes[b]))
        part.append(np.arange(len(chunks)))
    lengths, heads = np.concatenate(lengths), np.concatenate(heads).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    yield pa.RecordBatch.from_arrays(
        [
            pa.array(band[heads]),
            pa.array(bucket[heads]),
            pa.ListArray.from_arrays(
                pa.array(offsets), ids.take(pa.array(np.concatenate(members).astype(np.int64)))
            ),
            pa.array(np.concatenate(size).astype(np.int32)),
            pa.array(np.concatenate(part).astype(np.int32)),
        ],
        names=["band", "bucket", "ids", "size", "part"],
    )


def bucket_members(band_rows: DataFrame, max_ids: int | None = None) -> DataFrame:
    """``(id, band, bucket, text_hash) -> (band, bucket, ids, size, part)`` for buckets of 2+.

    ``ids`` is sorted ascending and holds one id, the smallest, per distinct
    ``text_hash``; ``size`` is the bucket's number of such ids.  A bucket of
    more than ``max_ids`` (None: no bound) is split in the task into rows
    ``part = 0, 1, ...``, each of its smallest id followed by at most
    ``max_ids - 1`` of the others: what :func:`candidate_pairs` makes of a
    bucket above its ``max_bucket_size`` (star edges from the smallest id)
    comes out the same, and no row holds more than ``max_ids`` ids.  Give
    ``max_ids`` the ``max_bucket_size`` of :func:`candidate_pairs`: a split
    bucket must be one that it bounds.  Band rows are shuffled by ``(band, bucket)`` and each
    partition is grouped with two numpy sorts (:func:`_bucket_batches`),
    faster than Spark's two aggregations (a ``min`` over string ids, which
    Spark can only sort-aggregate, then a ``collect_list``).  Copies are
    compared on a 64-bit hash of the 16-byte ``text_hash``; two different
    texts in one bucket would have to collide in 64 bits to be merged.
    """
    fields = {f.name: f.dataType for f in band_rows.schema.fields}
    schema = T.StructType(
        [
            T.StructField("band", fields["band"], False),
            T.StructField("bucket", fields["bucket"], False),
            T.StructField("ids", T.ArrayType(fields["id"], False), False),
            T.StructField("size", T.IntegerType(), False),
            T.StructField("part", T.IntegerType(), False),
        ]
    )
    if max_ids is not None and max_ids < 2:
        raise ValueError(f"max_ids: got {max_ids}; allowed: an integer >= 2")
    return (
        band_rows.select("id", "band", "bucket", F.xxhash64("text_hash").alias("text_key"))
        .repartition("band", "bucket")
        .mapInArrow(lambda batches: _bucket_batches(batches, max_ids), schema)
    )


def _block_sized(max_bucket_size: int, block_min_size: int | None) -> Column:
    size = F.col("size")
    if block_min_size is None:
        return F.lit(False)
    return (size >= block_min_size) & (size <= max_bucket_size)


def candidate_pairs(
    buckets: DataFrame, max_bucket_size: int, block_min_size: int | None = None
) -> DataFrame:
    """``(band, bucket, ids, size) -> (id_a, id_b)``: distinct pairs, ``id_a < id_b``.

    Buckets of different bands with the same members (a family of near-identical
    documents agrees on most bands) generate their pairs once.  Pairs are
    generated one member at a time (member ``i`` with the members after it), so no
    row ever holds more than one bucket's worth of ids, whatever the bucket size.
    Buckets of ``block_min_size`` to ``max_bucket_size`` members are left out:
    :func:`candidate_blocks` hands them to block verification.
    """
    pair_buckets = buckets.filter(~_block_sized(max_bucket_size, block_min_size))
    members = pair_buckets.dropDuplicates(["ids"]).select(
        "ids", "size", F.posexplode("ids").alias("pos", "id_a")
    )
    # A bounded bucket keeps only its first (smallest) member's row: star edges.
    rows = members.filter((F.col("size") <= max_bucket_size) | (F.col("pos") == 0))
    return (
        rows.filter(F.col("pos") < F.col("size") - 1)
        .select("id_a", F.explode(F.slice("ids", F.col("pos") + 2, F.col("size"))).alias("id_b"))
        .distinct()
    )


def candidate_blocks(buckets: DataFrame, max_bucket_size: int, block_min_size: int) -> DataFrame:
    """``(band, bucket, ids, size) -> (block, ids, size)``: distinct member sets to verify whole.

    ``block`` is a 64-bit hash of the sorted member ids, the same on every run.
    """
    return (
        buckets.filter(_block_sized(max_bucket_size, block_min_size))
        .dropDuplicates(["ids"])
        .select(F.xxhash64("ids").alias("block"), "ids", "size")
    )


def bucket_summary(buckets: DataFrame, max_bucket_size: int, top: int = 10) -> dict[str, Any]:
    """Counts for the report: shared buckets, bounded buckets, pairs generated.

    Collects one aggregate row and, when some buckets were bounded, at most
    ``top`` bucket rows (a second small job).
    """
    size = F.col("size").cast("long")
    bounded = size > max_bucket_size
    # A bucket split into several rows (bucket_members' max_ids) counts once.
    buckets = buckets.filter(F.col("part") == 0)
    row = buckets.agg(
        F.count(F.lit(1)).alias("shared_buckets"),
        F.sum(F.when(bounded, 1).otherwise(0)).alias("bounded_buckets"),
        F.max(size).alias("max_bucket_size_seen"),
        F.sum(F.when(bounded, size - 1).otherwise(size * (size - 1) / 2)).alias("pairs_generated"),
        F.sum(F.when(bounded, size * (size - 1) / 2).otherwise(0)).alias("pairs_avoided"),
    ).first()
    largest = (
        (
            buckets.filter(bounded)
            .orderBy(F.col("size").desc(), "band", "bucket")
            .select("band", "bucket", "size", F.element_at("ids", 1).alias("star_center"))
            .limit(top)
            .collect()
        )
        if row["bounded_buckets"]
        else []
    )
    return {
        "shared_buckets": int(row["shared_buckets"] or 0),
        "bounded_buckets": int(row["bounded_buckets"] or 0),
        "bounding": f"star edges to the smallest id in buckets above {max_bucket_size} members, "
        f"split into rows of at most {max_bucket_size} ids",
        "max_bucket_size_seen": int(row["max_bucket_size_seen"] or 0),
        "pairs_generated_before_distinct": int(row["pairs_generated"] or 0),
        "pairs_avoided_by_bounding": int(row["pairs_avoided"] or 0),
        "largest_bounded_buckets": [
            {
                "band": r["band"],
                "bucket": r["bucket"],
                "size": r["size"],
                "star_center": r["star_center"],
            }
            for r in largest
        ],
    }


class DuplicateGroups:
    """Groups of documents with the same normalized text (same ``text_hash``).

    Banding sees one representative per group, its smallest id, so every
    verified near pair is a pair of representatives.  With ``all_pairs=False``
    (``--pairs edges``) :meth:`pairs` gives each copy one star edge to its
    representative and :meth:`expand` leaves the representatives' pairs as
    they are: the copies are connected through their representative, so the
    components are the ones all pairs give, with one edge per copy.

    With ``all_pairs=True`` (``--pairs all``) :meth:`pairs` lists the pairs
    inside each group and :meth:`expand` gives every member of a group the
    verified pairs of its representative.  A group of more than ``max_group``
    members (the same boilerplate page crawled ten thousand times) is still
    bounded like a large bucket: star edges from its representative, and its
    other members are not expanded; :meth:`stats` reports how many were.

    Only counts reach the driver (:meth:`stats`, one small aggregation).
    """

    def __init__(self, docs: DataFrame, max_group: int, all_pairs: bool = True) -> None:
        """``docs``: ``(id, text_hash)`` of every accepted document."""
        # Star edges only is the bound of all pairs at groups of one member.
        self.max_group = max_group if all_pairs else 1
        self.docs = docs.select("id", "text_hash")
        groups = (
            self.docs.groupBy("text_hash")
            .agg(F.min("id").alias("rep"), F.count(F.lit(1)).alias("n"))
            .filter(F.col("n") > 1)
        )
        # (id, rep, n) of every document of a group, rep included: the one
        # table all the methods below read (see persist).
        self.members = self.docs.join(groups, "text_hash").select("id", "rep", "n")
        self._stats: dict[str, int] | None = None
        self._planned: int | None = None
        self._persisted = False

    def persist(self, level: StorageLevel = StorageLevel.MEMORY_AND_DISK) -> DuplicateGroups:
        """Compute the member table once for every use (at ``level``).

        Each of :meth:`stats_frame`, :meth:`pairs`, :meth:`copies` and
        :meth:`expand` otherwise groups all documents by ``text_hash`` again
        and joins them back (four more stages in the query that writes
        ``pairs/``).  The table holds only documents with copies.  Call
        :meth:`unpersist` when done (or use :func:`lsh_spark.caching.cached`).
        """
        if not self._persisted:
            self.members = self.members.persist(level)
            self._persisted = True
        return self

    def plan_for(self, documents: int) -> None:
        """Plan :meth:`expand` and :meth:`copies` for at most ``documents``
        expanded documents without counting them first (no job): they join
        the member table whether or not it is empty, broadcast up to the
        same ``broadcast_rows``.  :meth:`stats` still counts when asked."""
        self._planned = documents

    def _expanded(self) -> int:
        """Expanded documents as planned for: the bound of :meth:`plan_for`,
        or the count of :meth:`stats`."""
        if self.max_group < 2:  # star edges only: nothing is expanded
            return 0
        if self._planned is not None:
            return self._planned
        return self.stats()["expanded_documents"]

    def unpersist(self) -> None:
        if self._persisted:
            self.members.unpersist()
            self._persisted = False

    def stats_frame(self) -> DataFrame:
        """One row: ``dup_groups``, ``dup_documents``, ``dup_largest``,
        ``dup_bounded``, ``dup_expanded`` (see :meth:`stats`), to be collected
        alone or together with other one-row aggregates (one job for all)."""
        n = F.col("n")
        small = n <= self.max_group
        rep = F.col("id") == F.col("rep")  # one row per group
        return self.members.agg(
            F.count(F.when(rep, 1)).alias("dup_groups"),
            F.count(F.lit(1)).alias("dup_documents"),
            F.max(n).alias("dup_largest"),
            F.count(F.when(rep & ~small, 1)).alias("dup_bounded"),
            F.count(F.when(small, 1)).alias("dup_expanded"),
        )

    def stats(self, row: Any = None) -> dict[str, int]:
        """``groups``, ``documents`` in them, ``largest_group``, ``bounded_groups``
        (above ``max_group``: star edges only) and ``expanded_documents`` (members
        of the other groups, which get their representative's pairs).

        ``row``: a collected row holding the columns of :meth:`stats_frame`;
        without it, that one-row aggregate is collected here (one small job).
        """
        if self._stats is None:
            if row is None:
                row = self.stats_frame().first()
            self._stats = {
                "groups": int(row["dup_groups"] or 0),
                "documents": int(row["dup_documents"] or 0),
                "largest_group": int(row["dup_largest"] or 0),
                "bounded_groups": int(row["dup_bounded"] or 0),
                "expanded_documents": int(row["dup_expanded"] or 0),
                "max_group": self.max_group,
            }
        return self._stats

    def _members(self, bounded: bool) -> DataFrame:
        """``(id, rep, n)`` of every document of a (bounded or not) group, rep included."""
        size = F.col("n") > self.max_group
        return self.members.filter(size if bounded else ~size)

    def pairs(self, value_col: str = "jaccard", value: Any = 1.0) -> DataFrame:
        """``(id_a, id_b, value_col)``, ``id_a < id_b``: every pair inside each group of
        at most ``max_group`` members, star edges to the representative in larger ones."""
        star = (
            self._members(bounded=True)
            .filter(F.col("id") != F.col("rep"))
            .select(F.col("rep").alias("id_a"), F.col("id").alias("id_b"))
        )
        if self.max_group > 1:
            small = self._members(bounded=False)
            inside = (
                small.select("rep", F.col("id").alias("id_a"))
                .join(small.select("rep", F.col("id").alias("id_b")), "rep")
                .filter(F.col("id_a") < F.col("id_b"))
                .select("id_a", "id_b")
            )
            star = inside.unionByName(star)
        return star.withColumn(value_col, F.lit(value))

    def all_pairs_frame(self, candidates: DataFrame, blocks: DataFrame | None = None) -> DataFrame:
        """One row, ``all_pairs``: an upper bound of the pairs that all pairs
        (``all_pairs=True``) would write, from counts alone.

        The pairs inside each group (``n (n - 1) / 2``, or ``n - 1`` star edges
        above ``max_group``), plus, for every candidate pair of representatives,
        the product of their groups' sizes, plus ``W (W - 1) / 2`` for every
        block (``(block, ids)``) whose members' groups hold ``W`` documents.
        Verification only removes pairs from this; nothing is verified here.
        """
        n = F.col("n").cast("double")
        small = n <= self.max_group
        reps = self.members.filter(F.col("id") == F.col("rep"))
        inside = reps.agg(F.sum(F.when(small, n * (n - 1) / 2).otherwise(n - 1)).alias("inside"))
        weight = reps.select("id", F.when(small, n).otherwise(1.0).alias("w"))

        def w(side: str) -> DataFrame:
            return weight.select(F.col("id").alias(side), F.col("w").alias(f"w_{side}"))

        near = (
            candidates.select("id_a", "id_b")
            .join(w("id_a"), "id_a", "left")
            .join(w("id_b"), "id_b", "left")
            .agg(
                F.sum(F.coalesce("w_id_a", F.lit(1.0)) * F.coalesce("w_id_b", F.lit(1.0))).alias(
                    "near"
                )
            )
        )
        total = F.coalesce(F.col("inside"), F.lit(0.0)) + F.coalesce(F.col("near"), F.lit(0.0))
        row = inside.crossJoin(near)
        if blocks is not None:
            sizes = (
                blocks.select("block", F.explode("ids").alias("id"))
                .join(weight, "id", "left")
                .groupBy("block")
                .agg(F.sum(F.coalesce("w", F.lit(1.0))).alias("W"))
                .agg(F.sum(F.col("W") * (F.col("W") - 1) / 2).alias("in_blocks"))
            )
            row = row.crossJoin(sizes)
            total = total + F.coalesce(F.col("in_blocks"), F.lit(0.0))
        return row.select(total.alias("all_pairs"))

    def copies(self, broadcast_rows: int) -> DataFrame | None:
        """``(rep, copies)``: every representative of an expanded group with the
        sorted ids of its group (itself included), or None when no group is
        expanded; broadcast up to ``broadcast_rows`` member ids, as in :meth:`expand`."""
        if not self._expanded():
            return None
        return self._broadcast_if_small(
            self._members(bounded=False)
            .groupBy("rep")
            .agg(F.array_sort(F.collect_list("id")).alias("copies")),
            broadcast_rows,
        )

    def _broadcast_if_small(self, table: DataFrame, broadcast_rows: int) -> DataFrame:
        """``table`` (one of the expanded groups' member tables) with a broadcast
        hint when those groups hold at most ``broadcast_rows`` documents."""
        small = self._expanded() <= broadcast_rows
        return F.broadcast(table) if small else table

    def expand(self, pairs: DataFrame, broadcast_rows: int) -> DataFrame:
        """Pairs of representatives -> the same pairs between all members of their groups.

        Identical texts have identical shingle sets (and signatures and
        vectors), so each copy has the same measure to the other side.  The
        members of expandable groups are broadcast when there are at most
        ``broadcast_rows`` of them; without any, ``pairs`` comes back unchanged.
        """
        if not self._expanded():
            return pairs
        members = self._broadcast_if_small(
            self._members(bounded=False).select("rep", "id"), broadcast_rows
        )
        rest = [c for c in pairs.columns if c not in ("id_a", "id_b")]
        x, y = F.coalesce("x", "id_a"), F.coalesce("y", "id_b")
        return (
            pairs.join(
                members.select(F.col("rep").alias("id_a"), F.col("id").alias("x")), "id_a", "left"
            )
            .join(
                members.select(F.col("rep").alias("id_b"), F.col("id").alias("y")), "id_b", "left"
            )
            .select(F.least(x, y).alias("id_a"), F.greatest(x, y).alias("id_b"), *rest)
        )


def pairs_written(
    dups: DuplicateGroups, candidates: DataFrame, blocks: DataFrame | None, cfg: DedupConfig
) -> dict[str, Any]:
    """The report's note of what ``pairs/`` holds (``cfg.pairs``).

    With ``--pairs all`` it first estimates the number of pairs (one small job,
    :meth:`DuplicateGroups.all_pairs_frame`, before anything is verified) and
    raises a :class:`ConfigError` naming ``--max-all-pairs`` when it is above.
    """
    if cfg.pairs == "edges":
        return {
            "mode": "edges",
            "meaning": "a maximum-similarity spanning forest of each cluster's verified "
            "edges: one row per removed document",
        }
    estimate = int(dups.all_pairs_frame(candidates, blocks).first()["all_pairs"] or 0)
    if estimate > cfg.max_all_pairs:
        raise ConfigError(
            f"--pairs all: an estimated {estimate:,} pairs (an upper bound) exceed "
            f"--max-all-pairs {cfg.max_all_pairs:,}; use --pairs edges (the same clusters) "
            "or raise --max-all-pairs"
        )
    return {"mode": "all", "estimated_pairs": estimate, "max_all_pairs": cfg.max_all_pairs}
