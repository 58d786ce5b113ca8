"""The dedup pipeline: four restartable stages, and the run that chains them.

Each stage reads what the previous one wrote (Parquet under ``--output``) and
the input corpus where it needs text, so a failed stage re-runs alone
(``jobs/signatures.py`` ... ``jobs/cluster.py``); ``jobs/dedup.py`` runs all
four with :func:`run_dedup` into one staged directory that appears under its
real name only when the whole run succeeded.  The stages only compose the pure
DataFrame functions of the other modules and time them; all I/O goes through
:mod:`lsh_spark.readers` and :mod:`lsh_spark.outputs`.

Where things are:

==========================================  =====================================
:mod:`lsh_spark.stages.signatures`          1. read, normalize, shingle, MinHash
:mod:`lsh_spark.stages.candidates`          2. band keys, buckets, blocks
:mod:`lsh_spark.stages.verify`              3. exact Jaccard (MinHash)
:mod:`lsh_spark.stages.verify_plan`         3. how verification runs (pure)
:mod:`lsh_spark.stages.measure`             3. exact measure (SimHash, vectors)
:mod:`lsh_spark.stages.cluster`             4. components, keep policy, deduped/
:mod:`lsh_spark.stages.extract`             WARC input, extracted once
:mod:`lsh_spark.stages.common`              Output, Timer and job tags, observe
:mod:`lsh_spark.report`                     report.json sections and histograms
:mod:`lsh_spark.caching`                    ``cached``: persist inside a block
==========================================  =====================================

Every name below is importable from here, as the jobs and the CLI do.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lsh_spark.config import VECTOR_METHODS, DedupConfig
from lsh_spark.outputs import StagedOutput
from lsh_spark.readers import input_bytes
from lsh_spark.report import StageBytes, merge_reports, report_header
from lsh_spark.session import adaptive_enabled, size_shuffle_partitions
from lsh_spark.stages.candidates import banding_section, stage_candidates
from lsh_spark.stages.cluster import describe_bounded_families, keep_columns, stage_cluster
from lsh_spark.stages.common import Output, Timer, log_counts, observed
from lsh_spark.stages.extract import extract_crawl_input, release_crawl_input
from lsh_spark.stages.measure import stage_verify_measure
from lsh_spark.stages.signatures import (
    stage_signatures,
    stage_vector_signatures,
    start_id_check,
)
from lsh_spark.stages.verify import stage_verify
from lsh_spark.stages.verify_plan import BROADCAST_ID_ROWS, BROADCAST_SHINGLE_BYTES
from lsh_spark.warc import register_extracted

__all__ = [
    "BROADCAST_ID_ROWS",
    "BROADCAST_SHINGLE_BYTES",
    "Output",
    "Timer",
    "banding_section",
    "describe_bounded_families",
    "extract_crawl_input",
    "merge_reports",
    "observed",
    "release_crawl_input",
    "report_header",
    "run_dedup",
    "stage_candidates",
    "stage_cluster",
    "stage_signatures",
    "stage_vector_signatures",
    "stage_verify",
    "stage_verify_measure",
    "start_id_check",
]


def _s_curve_png(cfg: DedupConfig) -> bytes:
    from lsh_spark.advisor import s_curve_png

    return s_curve_png(cfg)


def _start_s_curve(cfg: DedupConfig) -> Future[bytes] | None:
    """Draw the S-curve in a thread: it depends on the configuration alone, so it
    is drawn while the driver waits on the first stages (SimHash's block tables
    have none)."""
    if cfg.method == "simhash":
        return None
    plotter = ThreadPoolExecutor(max_workers=1)
    s_curve = plotter.submit(_s_curve_png, cfg)
    plotter.shutdown(wait=False)
    return s_curve


def run_dedup(
    spark: SparkSession,
    input_path: str | DataFrame,
    output: str,
    cfg: DedupConfig,
    overwrite: bool = False,
    deduped: bool = True,
) -> dict[str, Any]:
    """Run every stage into ``output`` atomically and return the report.

    ``input_path``: a path, or the input as a DataFrame (see
    :func:`lsh_spark.readers.read_corpus`); ``deduped``: whether to write ``deduped/``.
    """
    out = StagedOutput(spark, output, overwrite)
    started = time.perf_counter()
    s_curve = _start_s_curve(cfg)
    stage_bytes = StageBytes(spark)
    try:
        report = _run_stages(spark, input_path, out, cfg, deduped)
        report["execution"]["stage_bytes"] = stage_bytes.result()
        report["seconds"]["total"] = round(time.perf_counter() - started, 3)
        describe_bounded_families(spark, out, report)
        _check_accounting(report["counts"])
        _commit(input_path, out, report, s_curve)
    except BaseException:
        register_extracted(input_path, None)
        out.abort()
        raise
    return report


def _run_stages(
    spark: SparkSession, input_path: str | DataFrame, out: Output, cfg: DedupConfig, deduped: bool
) -> dict[str, Any]:
    """Every stage in turn into ``out``; the merged report."""
    if cfg.keep_order:  # a missing --keep-by column stops the run before any work
        keep_columns(spark, input_path, cfg)
    read_bytes = input_bytes(spark, input_path)
    partitions = size_shuffle_partitions(spark, read_bytes)
    crawl = extract_crawl_input(spark, input_path, out, cfg)
    # shingles/ is deleted before the commit: its sets travel packed.  The ids
    # of shingles/ are checked beside the candidate stage, whose planning leaves
    # a core idle, instead of beside the signature stage's writes, which it
    # slowed; the output is aborted if they repeat.  (The vector methods write
    # vectors/ and check its ids in their own stage.)
    later = cfg.method not in VECTOR_METHODS
    signatures = stage_signatures(spark, input_path, out, cfg, packed=True, check_ids=not later)
    log_counts("signatures", signatures)
    accepted = signatures["counts"]["accepted"]
    ids_checked = start_id_check(spark, out.read("shingles")) if later else None
    try:
        candidates = stage_candidates(
            spark, out, cfg, accepted, signatures["counts"].get("longest_id_bytes")
        )
    finally:
        if ids_checked is not None:
            ids_checked.result()
    log_counts("candidates", candidates)
    verified = stage_verify(
        spark,
        out,
        cfg,
        block_members=candidates["buckets"].get("block_members"),
        documents=accepted,
        shingles=signatures["counts"].get("accepted_shingles"),
    )
    log_counts("verify", verified)
    clustered = stage_cluster(
        spark, input_path, out, cfg, verified["counts"]["verified_pairs"], deduped
    )
    log_counts("cluster", clustered)
    report = merge_reports(
        report_header(input_path, cfg), crawl, signatures, candidates, verified, clustered
    )
    report["execution"] = {
        "input_bytes": read_bytes,
        "shuffle_partitions": partitions,
        "adaptive": adaptive_enabled(spark),
    }
    return report


def _check_accounting(counts: dict[str, Any]) -> None:
    """Every input record ends in exactly one of ``clusters/`` or ``rejects/``."""
    if counts["clustered_documents"] + counts["rejected"] != counts["input_records"]:
        raise RuntimeError(
            "accounting error: clusters + rejects != input records "
            f"({counts['clustered_documents']} + {counts['rejected']} != "
            f"{counts['input_records']})"
        )


def _commit(
    input_path: str | DataFrame,
    out: StagedOutput,
    report: dict[str, Any],
    s_curve: Future[bytes] | None,
) -> None:
    """Delete the scratch datasets, write the report and commit the output."""
    out.fs.delete(out.path("_checkpoints"))
    # Shingle sets are only needed up to verification; stage-by-stage runs
    # keep them (see the README).
    out.fs.delete(out.path("shingles"))
    release_crawl_input(input_path, out)
    out.write_json("report.json", report)
    if s_curve is not None:
        out.write_bytes("s_curve.png", s_curve.result())
    out.commit()
