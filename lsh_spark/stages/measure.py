"""Stage 3 for SimHash and the vector methods: each method's exact measure.

Exact Hamming distance (simhash), cosine (hyperplane) or Euclidean distance
(pstable) of every candidate; pairs within the bound, plus exact duplicates
(same text or same vector), go to ``pairs/`` (``id_a``, ``id_b``, measure).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lsh_spark import jaccard as jaccard_module
from lsh_spark.buckets import DuplicateGroups, pairs_written
from lsh_spark.caching import cached
from lsh_spark.config import DedupConfig
from lsh_spark.jaccard import candidate_ids, join_sides
from lsh_spark.report import (
    SIMILARITY_BINS,
    histogram,
    histogram_metrics,
    similarity_bin,
    similarity_bin_of,
)
from lsh_spark.simhash import hamming
from lsh_spark.stages.common import Output, Timer, accepted_shingles, observed
from lsh_spark.stages.verify_plan import BROADCAST_ID_ROWS, small_id_list
from lsh_spark.vectors import cosine, distance

# Euclidean distance histograms: this many bins of equal width up to
# max_distance (the last also holds the pairs beyond).
DISTANCE_BINS = 20


@dataclass(frozen=True)
class _Histogram:
    """How a measure is binned: ``key`` (an integer column), ``bins`` bins from
    ``first``; bin ``b`` starts at ``b / scale``."""

    key: Column
    bins: int
    scale: float
    first: int = 0


def _binning(cfg: DedupConfig) -> _Histogram:
    measure = F.col(cfg.measure)
    if cfg.method == "simhash":
        return _Histogram(measure, cfg.simhash.max_hamming + 1, 1.0)
    if cfg.method == "hyperplane":  # cosine >= threshold
        return _Histogram(
            similarity_bin(measure),
            SIMILARITY_BINS,
            float(SIMILARITY_BINS),
            similarity_bin_of(cfg.threshold),
        )
    step = float(cfg.vectors.max_distance) / DISTANCE_BINS
    key = F.least(F.floor(measure / F.lit(step)), F.lit(DISTANCE_BINS - 1))
    return _Histogram(key, DISTANCE_BINS, 1 / step)


def stage_verify_measure(spark: SparkSession, out: Output, cfg: DedupConfig) -> dict[str, Any]:
    """Exact Hamming distance (simhash), cosine (hyperplane) or Euclidean distance
    (pstable) of every candidate; pairs within the bound, plus exact duplicates
    (same text or same vector), go to ``pairs/`` (``id_a``, ``id_b``, measure)."""
    timer = Timer(spark)
    binning = _binning(cfg)
    with timer("verify"), ExitStack() as stack:
        # Candidates join group representatives of identical texts (or vectors);
        # the copies get a star edge each to it (with --pairs all, its pairs and
        # their own).
        dups = stack.enter_context(
            cached(DuplicateGroups(out.read("signatures"), cfg.max_bucket_size, cfg.pairs == "all"))
        )
        written = pairs_written(dups, out.read("candidates"), None, cfg)
        if cfg.method == "simhash":
            near, same = _simhash_pairs(out, cfg, stack)
        else:
            near, same = _vector_pairs(out, cfg, stack)
        copies = dups.pairs(cfg.measure, same.pop(cfg.measure))
        for name, value in same.items():
            copies = copies.withColumn(name, F.lit(value))
        # The histogram of the measure comes with the write.
        pairs, seen = observed(
            dups.expand(near, BROADCAST_ID_ROWS).unionByName(copies),
            **histogram_metrics(binning.key, binning.bins, binning.first),
        )
        out.write(pairs, "pairs")
    bins = histogram(seen.result(out, "pairs"))
    return {
        "counts": {"verified_pairs": sum(n for _, n in bins)},
        "pairs_written": written,
        "exact_duplicates": dups.stats(),
        f"{cfg.measure}_histogram": [
            {"from": round(b / binning.scale, 6), "pairs": n} for b, n in bins
        ],
        "seconds": timer.seconds,
        "cpu_seconds": timer.cpu,
    }


def _keep_listed(table: DataFrame, ids: DataFrame) -> DataFrame:
    """The rows of ``table`` whose ``id`` is in the cached id list ``ids``, which
    is counted and broadcast when it has at most ``BROADCAST_ID_ROWS`` rows."""
    return table.join(small_id_list(ids, ids.count()), "id", "left_semi")


def _simhash_pairs(
    out: Output, cfg: DedupConfig, stack: ExitStack
) -> tuple[DataFrame, dict[str, Any]]:
    """Candidates within ``max_hamming`` bits (and, with ``verify_jaccard``, at
    least ``threshold`` Jaccard); and the values of a pair of identical texts."""
    measure = cfg.measure
    value = hamming(F.col("simhash_a"), F.col("simhash_b"))
    near = (
        join_sides(out.read("candidates"), out.read("signatures"), "simhash")
        .select("id_a", "id_b", value.alias(measure))
        .filter(F.col(measure) <= cfg.simhash.max_hamming)
    )
    if not cfg.simhash.verify_jaccard:
        return near, {measure: 0}
    ids = stack.enter_context(cached(candidate_ids(near)))
    sh = _keep_listed(accepted_shingles(out), ids)
    near = jaccard_module.similar(
        join_sides(near, sh, "shingles"), ["id_a", "id_b", measure], cfg.threshold
    )
    return near, {measure: 0, "jaccard": 1.0}


def _vector_pairs(
    out: Output, cfg: DedupConfig, stack: ExitStack
) -> tuple[DataFrame, dict[str, Any]]:
    """Candidates with cosine at least ``threshold`` (hyperplane) or distance at
    most ``max_distance`` (pstable); and the measure of two identical vectors."""
    cands = out.read("candidates")
    vectors = out.read("vectors").filter(F.col("reason").isNull())
    ids = stack.enter_context(cached(candidate_ids(cands)))
    needed = _keep_listed(vectors, ids).select("id", "vector")
    if cfg.method == "hyperplane":
        fn, same = cosine, 1.0

        def ok(v: Column) -> Column:
            return v >= F.lit(float(cfg.threshold))
    else:
        fn, same = distance, 0.0

        def ok(v: Column) -> Column:
            return v <= F.lit(float(cfg.vectors.max_distance))

    near = jaccard_module.kept_where(
        join_sides(cands, needed, "vector"),
        ["id_a", "id_b"],
        fn(F.col("vector_a"), F.col("vector_b")),
        cfg.measure,
        ok,
    )
    return near, {cfg.measure: same}
