"""Stage 4, cluster: connected components, the keep policy and the deduplicated corpus.

Writes ``clusters/`` and ``deduped/``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lsh_spark.components import apply_keep_policy, connected_components, forest_of_clusters
from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.readers import read_corpus
from lsh_spark.report import CLUSTER_SIZE_ROWS
from lsh_spark.session import tagged
from lsh_spark.stages.common import Output, Timer, checkpoint_dir, observed, restore_id_col
from lsh_spark.stages.rounds import saved_rounds
from lsh_spark.stages.verify_plan import small_id_list


def kept_documents(
    docs: DataFrame,
    clusters: DataFrame,
    rejects: DataFrame,
    in_duplicate_clusters: int,
    id_col: str = "id",
) -> DataFrame:
    """The records of ``docs`` that ``clusters`` keeps, with their ``cluster_size``.

    ``docs``: the input's records, keyed by ``id_col``; ``clusters`` and
    ``rejects``: the run's datasets; ``in_duplicate_clusters``: how many of
    ``clusters`` are in clusters of two or more.  Every record neither in a
    duplicate cluster nor rejected is a kept singleton, so only those two id
    lists are looked up.  Their union is broadcast when it is small
    (:func:`small_id_list`): the input is then filtered where it is read and
    no document's text is shuffled; a longer one is joined by a shuffle.
    """
    n_rejects = rejects.count()  # from the Parquet footers
    size, keep = "_lsh_spark_cluster_size", "_lsh_spark_keep"
    lookup = (
        clusters.filter(F.col("cluster_size") > 1)
        .select(
            F.col("id").alias(id_col), F.col("cluster_size").alias(size), F.col("keep").alias(keep)
        )
        .unionByName(
            rejects.select(
                F.col("id").alias(id_col),
                F.lit(None).cast("long").alias(size),
                F.lit(False).alias(keep),
            )
        )
    )
    present = docs.filter(F.col(id_col).isNotNull())  # a null id is a rejected record
    joined = present.join(small_id_list(lookup, in_duplicate_clusters + n_rejects), id_col, "left")
    return joined.filter(F.coalesce(F.col(keep), F.lit(True))).select(
        *docs.columns, F.coalesce(F.col(size), F.lit(1).cast("long")).alias("cluster_size")
    )


def keep_columns(spark: SparkSession, input_path: str | DataFrame, cfg: DedupConfig) -> DataFrame:
    """``(id, *keep-by columns)`` of the accepted input records; a
    :class:`ConfigError` naming a ``--keep-by`` column the input lacks."""
    raw, _ = read_corpus(spark, input_path, cfg)
    names = [c for c, _ in cfg.keep_order]
    missing = [c for c in names if c not in raw.columns or c == "reject_reason"]
    if missing:
        columns = ", ".join(c for c in raw.columns if c != "reject_reason")
        raise ConfigError(f"--keep-by: column {missing[0]!r} not in input; columns: {columns}")
    return raw.filter(F.col("reject_reason").isNull()).select("id", *names)


def stage_cluster(
    spark: SparkSession,
    input_path: str | DataFrame,
    out: Output,
    cfg: DedupConfig,
    n_pairs: int | None = None,
    deduped: bool = True,
) -> dict[str, Any]:
    """Connected components and the keep policy: writes ``clusters/`` and (unless
    ``deduped`` is false: :mod:`lsh_spark.api` removes the copies on demand)
    ``deduped/``.

    ``n_pairs``: the number of rows of ``pairs/`` when the caller knows it.
    """
    timer = Timer(spark)
    sigs = out.read("signatures")
    with timer("cluster"):
        clusters = connected_components(
            out.read("pairs"),
            sigs.select("id"),
            cfg.max_cc_iterations,
            saved_rounds(checkpoint_dir(out, cfg)),
            n_edges=n_pairs,
        )
        docs = sigs.select("id", "text_len")
        if cfg.keep_order:
            docs = docs.join(keep_columns(spark, input_path, cfg), "id")
        clusters = apply_keep_policy(clusters, docs, cfg.keep, cfg.keep_order)
        dup = F.col("cluster_size") > 1
        # Exactly one document of each cluster is kept: kept documents count clusters.
        clusters, seen = observed(
            clusters,
            docs=F.count(F.lit(1)),
            in_dup=F.count(F.when(dup, 1)),
            kept=F.count(F.when(F.col("keep"), 1)),
            largest=F.coalesce(F.max("cluster_size"), F.lit(0)),
            dup_clusters=F.count(F.when(dup & F.col("keep"), 1)),
        )
        out.write(clusters, "clusters")
    row = seen.result(out, "clusters")
    written = out.read("clusters")
    kept = written.filter("keep")
    edges = None
    if cfg.pairs == "edges":
        with timer("forest"):
            # pairs/ as a spanning forest of each cluster: one row per removed document.
            forest, counted = observed(
                forest_of_clusters(out.read("pairs"), written), rows=F.count(F.lit(1))
            )
            out.replace(forest, "pairs")
            edges = counted.result(out, "pairs")["rows"]
    if deduped:
        with timer("deduped"):
            raw, facts = read_corpus(spark, input_path, cfg)
            accepted = raw.filter(F.col("reject_reason").isNull()).drop("reject_reason")
            kept_docs = kept_documents(accepted, written, out.read("rejects"), row["in_dup"])
            out.write(restore_id_col(kept_docs, cfg, facts["derived_ids"]), "deduped")
    with tagged(spark, "cluster"):
        sizes = [
            {"cluster_size": r["cluster_size"], "clusters": r["n"]}
            for r in kept.groupBy("cluster_size")
            .agg(F.count(F.lit(1)).alias("n"))
            .orderBy("cluster_size")
            .limit(CLUSTER_SIZE_ROWS)
            .collect()
        ]
    return {
        "counts": {
            "clustered_documents": row["docs"],
            "clusters": row["kept"],
            "duplicate_clusters": row["dup_clusters"],
            "documents_in_duplicate_clusters": row["in_dup"],
            "largest_cluster": row["largest"],
            "deduped_documents": row["kept"],
            "removed_documents": row["docs"] - row["kept"],
            **({} if edges is None else {"forest_edges": edges}),
        },
        "cluster_size_histogram": sizes,
        "seconds": timer.seconds,
        "cpu_seconds": timer.cpu,
    }


def describe_bounded_families(spark: SparkSession, out: Output, report: dict[str, Any]) -> None:
    """Add the clusters (families) that the largest bounded buckets belong to.

    Only the star centres already listed in the report are looked up (at most
    ten ids), so this never scans more than ``clusters/`` once.
    """
    buckets = report.get("buckets")
    if not buckets or "cluster_size_histogram" not in report:
        return
    centers = sorted({b["star_center"] for b in buckets.get("largest_bounded_buckets", [])})
    rows = []
    if centers:
        with tagged(spark, "report"):
            rows = (
                out.read("clusters")
                .filter(F.col("id").isin(centers))
                .select("cluster_id", "cluster_size")
                .distinct()
                .orderBy(F.col("cluster_size").desc(), "cluster_id")
                .collect()
            )
    buckets["bounded_families"] = [
        {
            "cluster_id": r["cluster_id"],
            "cluster_size": r["cluster_size"],
            "note": "pairs/ holds the verified star edges of this family, not all its pairs",
        }
        for r in rows
    ]
