"""Candidate pairs: documents that share a ``(band, bucket)`` key.

The self-join on the bucket key is evaluated per bucket: band rows are shuffled
once by ``(band, bucket)``, each bucket's members are gathered into one sorted
array, and the pairs are generated from that array with native higher-order
functions.  That is the same result as ``rows JOIN rows ON (band, bucket) AND
a.id < b.id`` with one shuffle instead of two, and it sees each bucket's size,
which is what bounds the work:

* singleton buckets produce nothing and are dropped;
* within a bucket, exact duplicates (same ``text_hash``) collapse to their
  smallest id first, because their pairs are already known (Jaccard 1);
* buckets of different bands holding the same members produce their pairs once;
* a bucket of ``block_min_size`` members or more (a large family) produces no
  pair rows at all: its member set becomes one *block* that
  :func:`lsh_spark.verify.verify_blocks` checks whole with a matrix product;
* a bucket with more than ``max_bucket_size`` members (boilerplate, templates)
  produces star edges from its smallest id to every other member, ``n - 1``
  pairs instead of ``n (n - 1) / 2``.  Members of such a family still end in one
  cluster when they are near-duplicates of the smallest id, and the report says
  how many buckets were bounded and how large they were.

Example
-------
>>> buckets = bucket_members(band_rows)  # doctest: +SKIP
>>> pairs = candidate_pairs(buckets, max_bucket_size=5000, block_min_size=32)  # doctest: +SKIP
>>> blocks = candidate_blocks(buckets, max_bucket_size=5000, block_min_size=32)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def bucket_members(band_rows: DataFrame) -> DataFrame:
    """``(id, band, bucket, text_hash) -> (band, bucket, ids, size)`` for buckets of 2+.

    ``ids`` is sorted ascending and holds one id per distinct ``text_hash``.
    """
    collapsed = (
        band_rows.repartition("band", "bucket")
        .groupBy("band", "bucket", "text_hash")
        .agg(F.min("id").alias("id"))
    )
    return (
        collapsed.groupBy("band", "bucket")
        .agg(F.array_sort(F.collect_list("id")).alias("ids"))
        .withColumn("size", F.size("ids"))
        .filter(F.col("size") > 1)
    )


def _block_sized(max_bucket_size: int, block_min_size: int | None) -> Column:
    size = F.col("size")
    if block_min_size is None:
        return F.lit(False)
    return (size >= block_min_size) & (size <= max_bucket_size)


def candidate_pairs(buckets: DataFrame, max_bucket_size: int,
                    block_min_size: int | None = None) -> DataFrame:
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
        "ids", "size", F.posexplode("ids").alias("pos", "id_a"))
    # A bounded bucket keeps only its first (smallest) member's row: star edges.
    rows = members.filter((F.col("size") <= max_bucket_size) | (F.col("pos") == 0))
    return (
        rows.filter(F.col("pos") < F.col("size") - 1)
        .select("id_a", F.explode(F.slice("ids", F.col("pos") + 2, F.col("size"))).alias("id_b"))
        .distinct()
    )


def candidate_blocks(buckets: DataFrame, max_bucket_size: int, block_min_size: int
                     ) -> DataFrame:
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

    Collects one aggregate row and at most ``top`` bucket rows.
    """
    size = F.col("size").cast("long")
    bounded = size > max_bucket_size
    row = buckets.agg(
        F.count(F.lit(1)).alias("shared_buckets"),
        F.sum(F.when(bounded, 1).otherwise(0)).alias("bounded_buckets"),
        F.max(size).alias("max_bucket_size_seen"),
        F.sum(F.when(bounded, size - 1).otherwise(size * (size - 1) / 2)).alias("pairs_generated"),
        F.sum(F.when(bounded, size * (size - 1) / 2).otherwise(0)).alias("pairs_avoided"),
    ).first()
    largest = (
        buckets.filter(bounded)
        .orderBy(F.col("size").desc(), "band", "bucket")
        .select("band", "bucket", "size", F.element_at("ids", 1).alias("star_center"))
        .limit(top)
        .collect()
    )
    return {
        "shared_buckets": int(row["shared_buckets"] or 0),
        "bounded_buckets": int(row["bounded_buckets"] or 0),
        "bounding": f"star edges to the smallest id in buckets above {max_bucket_size} members",
        "max_bucket_size_seen": int(row["max_bucket_size_seen"] or 0),
        "pairs_generated_before_distinct": int(row["pairs_generated"] or 0),
        "pairs_avoided_by_bounding": int(row["pairs_avoided"] or 0),
        "largest_bounded_buckets": [
            {"band": r["band"], "bucket": r["bucket"], "size": r["size"],
             "star_center": r["star_center"]}
            for r in largest
        ],
    }


def exact_duplicate_pairs(docs: DataFrame) -> DataFrame:
    """``(id, text_hash) -> (id_a, id_b, jaccard=1.0)``: star edges to each group's smallest id."""
    rep = docs.groupBy("text_hash").agg(F.min("id").alias("id_a"))
    return (
        docs.join(rep, "text_hash")
        .filter(F.col("id") != F.col("id_a"))
        .select("id_a", F.col("id").alias("id_b"), F.lit(1.0).alias("jaccard"))
    )
