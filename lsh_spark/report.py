"""The run's ``report.json``: its header, the merge of the stages' sections, histograms.

Each stage returns a section (a dict of counts, timings and figures);
:func:`merge_reports` merges them into one report.
"""

from __future__ import annotations

import math
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lsh_spark import __version__
from lsh_spark.config import DedupConfig
from lsh_spark.io import input_name
from lsh_spark.stages.common import Output, tagged

# Similarity histograms (Jaccard, cosine) have this many bins of equal width
# over [0, 1] (width 0.05), 1.0 falling in the last.
SIMILARITY_BINS = 20
# Rows of the cluster-size histogram in the report (the smallest sizes first).
CLUSTER_SIZE_ROWS = 50


def similarity_bin(value: Column) -> Column:
    """The bin of a value in [0, 1] among ``SIMILARITY_BINS`` of equal width."""
    return F.least(F.floor(value * SIMILARITY_BINS), F.lit(SIMILARITY_BINS - 1))


def similarity_bin_of(threshold: float) -> int:
    """The bin :func:`similarity_bin` gives ``threshold`` (the same double
    arithmetic): no value at or above the threshold falls in a lower bin.

    >>> similarity_bin_of(0.8), similarity_bin_of(1.0), similarity_bin_of(0.0)
    (16, 19, 0)
    """
    return max(0, min(math.floor(float(threshold) * SIMILARITY_BINS), SIMILARITY_BINS - 1))


def histogram_metrics(key: Column, bins: int, first: int = 0) -> dict[str, Column]:
    """Observation metrics ``bin<first> .. bin<bins-1>``: rows whose integer ``key``
    is each bin (the caller's key stays within ``first .. bins - 1``).

    Each metric is an aggregate evaluated on every written row, so bins that no
    row can reach (below the threshold's) are left out, which matters when
    ``pairs/`` has tens of millions of rows.
    """
    return {f"bin{b}": F.count(F.when(key == b, 1)) for b in range(first, bins)}


def histogram(metrics: dict[str, Any]) -> list[tuple[int, int]]:
    """``(bin, count)`` of the non-empty bins of :func:`histogram_metrics`, in order.

    >>> histogram({"bin17": 2, "bin16": 0, "bin19": 5, "exact": 5})
    [(17, 2), (19, 5)]
    """
    counts = sorted((int(k[3:]), int(v)) for k, v in metrics.items() if k.startswith("bin"))
    return [(b, n) for b, n in counts if n]


def merge_reports(*sections: dict[str, Any]) -> dict[str, Any]:
    """Merge stage sections: dict values are merged key by key, others replaced.

    >>> merge_reports({"counts": {"a": 1}, "x": 1}, {"counts": {"b": 2}, "x": 2})
    {'counts': {'a': 1, 'b': 2}, 'x': 2}
    """
    merged: dict[str, Any] = {}
    for section in sections:
        for key, value in section.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return merged


def report_header(input_path: str | DataFrame, cfg: DedupConfig) -> dict[str, Any]:
    """The report's first keys: the version, the input and every parameter."""
    return {
        "lsh_spark_version": __version__,
        "input_path": input_name(input_path),
        "parameters": cfg.to_dict(),
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
