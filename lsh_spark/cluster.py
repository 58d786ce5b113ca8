"""Duplicate clusters: distributed connected components and the keep policy.

Connected components use the alternating large-star / small-star rounds of
Kiveris, Lattanzi, Mirrokni, Rastogi and Vassilvitskii, "Connected Components
in MapReduce and Beyond" (SoCC 2014), on DataFrames of edges.  Each round is
checkpointed (reliable checkpoints in the configured directory) so the lineage
stays short and a lost executor recomputes one round, not the whole history.
The loop ends when the edges form stars: every edge points from a node to a
root, no root has a parent and no node has two parents; then the root is the
smallest id of its component.  Nothing is collected to the driver but two
counts per round.

Example
-------
>>> clusters = connected_components(pairs, vertices)  # doctest: +SKIP
>>> clusters.columns  # doctest: +SKIP
['id', 'cluster_id', 'cluster_size']
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


class ClusteringDidNotConverge(RuntimeError):
    """The component computation exceeded its round limit."""


def _large_star(edges: DataFrame) -> DataFrame:
    # Each node u links every larger neighbour v to m(u) = min(N(u) + {u}).
    both = edges.union(edges.select(F.col("dst").alias("src"), F.col("src").alias("dst")))
    m = both.groupBy("src").agg(F.least(F.min("dst"), F.col("src")).alias("m"))
    return (
        both.filter(F.col("dst") > F.col("src"))
        .join(m, "src")
        .select(F.col("dst").alias("src"), F.col("m").alias("dst"))
        .filter(F.col("src") != F.col("dst"))
        .distinct()
    )


def _small_star(edges: DataFrame) -> DataFrame:
    # Each node u links itself and every smaller neighbour to m(u) = min(smaller N(u) + {u}).
    down = edges.select(
        F.greatest("src", "dst").alias("src"), F.least("src", "dst").alias("dst")
    )
    m = down.groupBy("src").agg(F.min("dst").alias("m"))
    members = down.union(down.select("src", F.col("src").alias("dst")))
    return (
        members.join(m, "src")
        .select(F.col("dst").alias("src"), F.col("m").alias("dst"))
        .filter(F.col("src") != F.col("dst"))
        .distinct()
    )


def _is_star_forest(edges: DataFrame) -> bool:
    parents = edges.groupBy("src").agg(F.count(F.lit(1)).alias("n"))
    if parents.filter(F.col("n") > 1).limit(1).count():
        return False
    roots_with_parent = edges.select(F.col("dst").alias("src")).distinct().join(
        edges.select("src"), "src", "left_semi"
    )
    return roots_with_parent.limit(1).count() == 0


def connected_components(
    pairs: DataFrame, vertices: DataFrame, max_iterations: int = 64, checkpoint: bool = True
) -> DataFrame:
    """``(id_a, id_b)`` edges + ``(id)`` vertices -> ``(id, cluster_id, cluster_size)``.

    Every vertex appears exactly once; ``cluster_id`` is the smallest id of its
    connected component; isolated vertices are their own cluster of size 1.
    ``checkpoint=True`` needs ``SparkContext.setCheckpointDir`` to have been called.
    """
    edges = pairs.select(
        F.least("id_a", "id_b").alias("src"), F.greatest("id_a", "id_b").alias("dst")
    ).filter(F.col("src") != F.col("dst")).distinct()
    for _ in range(max_iterations):
        edges = _small_star(_large_star(edges))
        edges = edges.checkpoint() if checkpoint else edges.localCheckpoint()
        if _is_star_forest(edges):
            break
    else:
        raise ClusteringDidNotConverge(
            f"connected components did not converge in {max_iterations} rounds; "
            "raise --max-cc-iterations"
        )
    parent = edges.select(F.col("src").alias("id"), F.col("dst").alias("cluster_id"))
    labelled = vertices.select("id").distinct().join(parent, "id", "left").select(
        "id", F.coalesce("cluster_id", "id").alias("cluster_id")
    )
    sizes = labelled.groupBy("cluster_id").agg(F.count(F.lit(1)).alias("cluster_size"))
    return labelled.join(sizes, "cluster_id").select("id", "cluster_id", "cluster_size")


def apply_keep_policy(clusters: DataFrame, docs: DataFrame, policy: str) -> DataFrame:
    """Add ``keep``: exactly one ``True`` per cluster, chosen deterministically.

    ``min-id`` keeps the cluster's smallest id (its ``cluster_id``); ``longest``
    keeps the document with the most characters (``docs.text_len``), ties to the
    smallest id.
    """
    if policy == "min-id":
        return clusters.withColumn("keep", F.col("id") == F.col("cluster_id"))
    if policy == "longest":
        w = Window.partitionBy("cluster_id").orderBy(F.col("text_len").desc(), F.col("id"))
        return (
            clusters.join(docs.select("id", "text_len"), "id")
            .withColumn("keep", F.row_number().over(w) == 1)
            .drop("text_len")
        )
    raise ValueError(f"--keep: got {policy!r}; allowed: min-id | longest")
