"""Each removed document beside the document kept in its place, and anchored clusters.

A cluster is a connected component of verified edges, so a removed document
may be linked to the kept one only through other members, and its own
similarity to the kept one can be below the threshold (docs/outputs.md).
:func:`kept_of` pairs every removed document with its cluster's kept one,
:func:`with_jaccard` adds the exact Jaccard of the two shingle sets, and
:func:`anchor` releases the members that are not themselves similar enough
to the kept document.  :func:`shingled` recomputes the shingle sets of a few
documents from the input, as the run computed them (``dedup.py`` deletes
``shingles/`` before it commits).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lsh_spark.config import DedupConfig
from lsh_spark.jaccard import jaccard, join_sides
from lsh_spark.readers import read_corpus
from lsh_spark.shingle import text_shingles
from lsh_spark.stages.verify_plan import small_id_list


def kept_of(clusters: DataFrame) -> DataFrame:
    """``(id, kept_id)``: every removed document of ``clusters`` (``(id,
    cluster_id, cluster_size, keep)``) with the kept document of its cluster."""
    removed = clusters.filter(~F.col("keep")).select("id", "cluster_id")
    kept = clusters.filter(F.col("keep") & (F.col("cluster_size") > 1)).select(
        "cluster_id", F.col("id").alias("kept_id")
    )
    return removed.join(kept, "cluster_id").select("id", "kept_id")


def chosen_texts(
    spark: SparkSession,
    source: str | DataFrame,
    cfg: DedupConfig,
    ids: DataFrame | list[Any],
    rows: int | None = None,
) -> DataFrame:
    """``(id, text)`` of the accepted input documents ``ids`` (an ``(id)``
    DataFrame of ``rows`` rows, or a short list): the input is filtered where
    it is read when the ids are few (:func:`small_id_list`)."""
    raw, _ = read_corpus(spark, source, cfg)
    raw = raw.filter(F.col("reject_reason").isNull())
    if isinstance(ids, list):
        chosen = raw.filter(F.col("id").isin(ids))
    else:
        wanted = small_id_list(ids, rows) if rows is not None else ids
        chosen = raw.join(wanted, "id", "left_semi")
    return chosen.select("id", F.col(cfg.text_col).alias("text"))


def shingled(
    spark: SparkSession,
    source: str | DataFrame,
    cfg: DedupConfig,
    ids: DataFrame | list[Any],
    rows: int | None = None,
) -> DataFrame:
    """``(id, text, shingles)`` of the documents of :func:`chosen_texts`, the
    shingle sets as the run computed them: only those documents are shingled."""
    docs = chosen_texts(spark, source, cfg, ids, rows)
    return text_shingles(docs, "text", cfg.shingle, cfg.shingle_k, cfg.seed, cfg.token_mode)


def with_jaccard(pairs: DataFrame, shingles: DataFrame, left: str, right: str) -> DataFrame:
    """``pairs`` plus the exact ``jaccard`` of its ``left`` and ``right`` ids
    (``shingles``: ``(id, shingles)``, sorted distinct hashes)."""
    return (
        join_sides(pairs, shingles, "shingles", left, right)
        .withColumn("jaccard", jaccard(F.col("shingles_a"), F.col("shingles_b")))
        .drop("shingles_a", "shingles_b")
    )


def removals(
    spark: SparkSession, source: str | DataFrame, cfg: DedupConfig, clusters: DataFrame, n: int
) -> DataFrame:
    """``(id, kept_id, jaccard)`` of the ``n`` removed documents of ``clusters``:
    only they and their kept documents are read and shingled again."""
    pairs = kept_of(clusters)
    ids = pairs.select("id").union(pairs.select(F.col("kept_id").alias("id"))).distinct()
    sets = shingled(spark, source, cfg, ids, 2 * n).select("id", "shingles")
    return with_jaccard(pairs, sets, "id", "kept_id").select("id", "kept_id", "jaccard")


def anchor(clusters: DataFrame, removals: DataFrame, threshold: float) -> DataFrame:
    """``clusters`` anchored on their kept documents: a removed member whose
    Jaccard with the kept one (``removals``) is below ``threshold`` becomes a
    kept singleton; the rest of its cluster keeps its kept document, is
    resized and named by its smallest remaining id.

    >>> spark = getfixture("spark")
    >>> c = spark.createDataFrame(
    ...     [(1, 1, 3, True), (2, 1, 3, False), (3, 1, 3, False), (4, 4, 1, True)],
    ...     "id long, cluster_id long, cluster_size long, keep boolean",
    ... )
    >>> r = spark.createDataFrame(
    ...     [(2, 1, 0.9), (3, 1, 0.5)], "id long, kept_id long, jaccard double"
    ... )
    >>> sorted(tuple(x) for x in anchor(c, r, 0.8).collect())
    [(1, 1, 2, True), (2, 1, 2, False), (3, 3, 1, True), (4, 4, 1, True)]
    """
    far = removals.filter(F.col("jaccard") < F.lit(threshold)).select(
        "id", F.lit(True).alias("_far")
    )
    marked = clusters.join(far, "id", "left").withColumn("_far", F.coalesce("_far", F.lit(False)))
    stay = marked.filter(~F.col("_far"))
    sizes = stay.groupBy("cluster_id").agg(
        F.count(F.lit(1)).alias("_size"), F.min("id").alias("_first")
    )
    return (
        stay.join(sizes, "cluster_id")
        .select(
            "id",
            F.col("_first").alias("cluster_id"),
            F.col("_size").alias("cluster_size"),
            "keep",
        )
        .unionByName(
            marked.filter(F.col("_far")).select(
                "id",
                F.col("id").alias("cluster_id"),
                F.lit(1).cast("long").alias("cluster_size"),
                F.lit(True).alias("keep"),
            )
        )
    )
