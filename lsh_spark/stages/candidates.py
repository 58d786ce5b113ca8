"""Stage 2, candidates: band keys and bucket grouping.

Writes ``candidates/`` (pairs) and ``blocks/`` (member sets verified whole).
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lsh_spark.banding import explode_bands
from lsh_spark.buckets import bucket_members, bucket_summary, candidate_blocks, candidate_pairs
from lsh_spark.caching import cached
from lsh_spark.config import DedupConfig, candidate_probability, s_curve
from lsh_spark.session import in_background, job_tag, small_row_batches, tagged
from lsh_spark.simhash import block_bounds, explode_tables
from lsh_spark.stages.common import Output, Timer, longest_id, observed

# Points of the p-stable S-curve in the report: distances 0 .. 3 x max_distance.
DISTANCE_CURVE_POINTS = 20
# The bytes of a band row besides its id (band, bucket, text key, offsets).
BAND_ROW_BYTES = 32
DISTANCE_CURVE_SPAN = 3


def stage_candidates(
    spark: SparkSession,
    out: Output,
    cfg: DedupConfig,
    documents: int | None = None,
    longest_id_bytes: int | None = None,
) -> dict[str, Any]:
    """Band keys and bucket grouping: writes ``candidates/`` (pairs) and ``blocks/``.

    ``documents``: the number of rows of ``signatures/`` when the caller knows
    it (counted here otherwise).  ``longest_id_bytes``: the longest id of
    ``signatures/`` in UTF-8 bytes, when the caller knows it (the signature
    stage's ``counts``; found here otherwise): it bounds the band rows, which
    then travel to the bucket grouping in large Arrow batches.
    """
    timer = Timer(spark)
    sigs = out.read("signatures")
    with timer("candidates"):
        if longest_id_bytes is None:
            longest_id_bytes = sigs.agg(longest_id()).first()[0]
        rows, bands = _band_rows(sigs, cfg)
        members = bucket_members(rows, cfg.max_bucket_size)
        # A band row: its id, band, bucket and a text key, and Arrow's offset.
        row_bytes = (longest_id_bytes or 0) + BAND_ROW_BYTES
        with (
            small_row_batches(spark, row_bytes),
            cached(members, StorageLevel.MEMORY_AND_DISK_DESER) as buckets,
        ):
            n_cands, blk, summary = _write_candidates(spark, out, cfg, buckets)
    if documents is None:
        with tagged(spark, "candidates"):
            documents = sigs.count()
    summary.update(
        {
            "block_min_size": cfg.block_min_size,
            "blocks": int(blk["blocks"] or 0),
            "block_members": int(blk["members"] or 0),
            "block_pairs": int(blk["pairs"] or 0),
        }
    )
    return {
        "banding": banding_section(cfg),
        "buckets": summary,
        # Candidate pairs: pair rows plus every pair inside a block (a pair in
        # several blocks counted once per block).  A family written as a
        # spanning forest computes fewer of them (see block_forest).
        "counts": {
            "band_rows": documents * bands,
            "candidate_pairs": n_cands + int(blk["pairs"] or 0),
        },
        "seconds": timer.seconds,
        "cpu_seconds": timer.cpu,
    }


def _band_rows(sigs: DataFrame, cfg: DedupConfig) -> tuple[DataFrame, int]:
    """``(id, band, bucket, text_hash)`` rows of every signature, and the number of bands."""
    if cfg.method == "simhash":
        rows = explode_tables(sigs, cfg.simhash.max_hamming, cfg.simhash.blocks, "text_hash")
        return rows, math.comb(cfg.simhash.blocks, cfg.simhash.max_hamming)
    b, r = cfg.band_params()
    return explode_bands(sigs, b, r, "text_hash"), b


def _write_candidates(
    spark: SparkSession, out: Output, cfg: DedupConfig, buckets: DataFrame
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Write ``candidates/`` and ``blocks/`` from the cached ``buckets``; return the
    number of candidate pairs, the blocks' counts and the buckets' summary."""
    # Block verification is a Jaccard matrix product: MinHash only.
    block_min = cfg.block_min_size if cfg.method == "minhash" else None
    pairs, seen_pairs = observed(
        candidate_pairs(buckets, cfg.max_bucket_size, block_min), pairs=F.count(F.lit(1))
    )
    out.write(pairs, "candidates")
    size = F.col("size").cast("long")
    blocks, seen_blocks = observed(
        candidate_blocks(buckets, cfg.max_bucket_size, block_min),
        blocks=F.count(F.lit(1)),
        members=F.sum(size),
        pairs=F.sum(size * (size - 1) / 2),
    )
    # The report's bucket counts: a small job over the cached buckets, beside
    # the blocks' write.
    summarized = in_background(
        spark,
        "lsh-spark-bucket-summary",
        job_tag("candidates"),
        lambda: bucket_summary(buckets, cfg.max_bucket_size),
    )
    try:
        out.write(blocks, "blocks")
    finally:
        summary = summarized.result()
    return seen_pairs.result(out, "candidates")["pairs"], seen_blocks.result(out, "blocks"), summary


def banding_section(cfg: DedupConfig) -> dict[str, Any]:
    """The report's description of how candidates are formed, with the S-curve:
    the probability that a pair becomes a candidate, by similarity (or distance)."""
    if cfg.method == "simhash":
        bounds = block_bounds(cfg.simhash.blocks)
        return {
            "method": "simhash",
            "max_hamming": cfg.simhash.max_hamming,
            "blocks": cfg.simhash.blocks,
            "tables": math.comb(cfg.simhash.blocks, cfg.simhash.max_hamming),
            "key_bits": sorted(
                {
                    sum(w for _, w in c)
                    for c in combinations(bounds, cfg.simhash.blocks - cfg.simhash.max_hamming)
                }
            ),
            "guarantee": (
                f"every pair within Hamming distance {cfg.simhash.max_hamming} shares a key"
            ),
        }
    b, r = cfg.band_params()
    section = {
        "method": cfg.method,
        "bands": b,
        "rows": r,
        "num_perm": cfg.num_perm,
        "chosen_by": "user"
        if cfg.bands or cfg.rows
        else f"recall-biased default: P(threshold) >= {cfg.target_recall}",
        "row_probability_at_threshold": cfg.row_probability(),
        "candidate_probability_at_threshold": candidate_probability(cfg.row_probability(), b, r),
    }
    if cfg.method == "minhash":
        section["s_curve"] = s_curve(b, r)
    elif cfg.method == "hyperplane":
        section["s_curve"] = [
            {"cosine": p["s"], "p": candidate_probability(cfg.row_probability(p["s"]), b, r)}
            for p in s_curve(b, r)
        ]
    else:
        section["bucket_width"] = cfg.vectors.width
        section["s_curve"] = _distance_curve(cfg, b, r)
    return section


def _distance_curve(cfg: DedupConfig, b: int, r: int) -> list[dict[str, float]]:
    """The p-stable S-curve: candidate probability at evenly spaced distances."""
    top = DISTANCE_CURVE_SPAN * float(cfg.vectors.max_distance)
    points = DISTANCE_CURVE_POINTS
    return [
        {
            "distance": round(top * i / points, 6),
            "p": candidate_probability(cfg.row_probability(top * i / points), b, r),
        }
        for i in range(points + 1)
    ]
