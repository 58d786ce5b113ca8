"""Incremental crawl dedup: one batch against itself and against the index.

:func:`run_crawl_batch` runs the core pipeline's stages on the batch (extract,
signatures, candidates, verify) into the staged ``--output``, then:

1. **Lookup.**  The batch's band keys are looked up in the index's band table
   ``(bucket, doc)``, then the index documents they lead to are read with their
   shingle sets, both by :meth:`CrawlIndex.lookup`: keys pushed down to the
   Parquet reader, which skips the row groups of the range-partitioned tables
   that hold none of them (or, when most row groups would be read anyway, a
   scan filtered by the broadcast keys).  Only matches are shuffled.
2. **Verify.**  Every (batch document, index document) candidate gets its exact
   Jaccard, as in the core pipeline; pairs below ``--threshold`` are dropped.
3. **Decide.**  Verified pairs within the batch and across form clusters; each
   cluster's keeper is its oldest member (``--keep oldest``: earliest
   ``fetch_time``, then earliest index version, then smallest id) or newest.
   A batch document that is its cluster's keeper is new (``deduped/``); any
   other is a duplicate of the keeper (``duplicates/``, with the exact Jaccard
   of the two).  An index document whose cluster's keeper is a batch document
   is superseded (``superseded/``) and removed from the index by a tombstone.
4. **Commit.**  The new documents (with their band keys and shingle sets) and
   the tombstones become one index segment; the index is committed (one
   compare-and-swap, see :mod:`lsh_spark.index`), then the output, whose
   report says ``"status": "committed"``.  A batch id already in the index is
   reported and nothing is written.  A batch that loses the compare-and-swap
   to another batch or a compaction runs again from the new version, up to
   ``--max-retries`` times: its lookup then sees the documents that just landed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lsh_spark import __version__
from lsh_spark.banding import explode_bands
from lsh_spark.caching import cached
from lsh_spark.components import connected_components
from lsh_spark.config import CRAWL_KEEP_POLICIES, ConfigError, DedupConfig
from lsh_spark.errors import LshSparkError
from lsh_spark.faults import maybe_die
from lsh_spark.index import (
    RETENTION_HOURS,
    CrawlIndex,
    IndexConflict,
    Manifest,
    continued_config,
    describe,
    doc_key,
    index_params,
    segment_entry,
)
from lsh_spark.jaccard import verify_pairs
from lsh_spark.outputs import StagedOutput
from lsh_spark.readers import input_bytes, input_name, read_corpus
from lsh_spark.removals import with_jaccard
from lsh_spark.report import merge_reports
from lsh_spark.session import local_frame, size_shuffle_partitions
from lsh_spark.stages.candidates import stage_candidates
from lsh_spark.stages.common import Timer, accepted_shingles, checkpoint_dir, restore_id_col
from lsh_spark.stages.extract import extract_crawl_input, release_crawl_input
from lsh_spark.stages.rounds import saved_rounds
from lsh_spark.stages.signatures import stage_signatures
from lsh_spark.stages.verify import stage_verify
from lsh_spark.stages.verify_plan import BROADCAST_SHINGLE_BYTES, SHINGLE_BYTES, small_id_list
from lsh_spark.store import FileSystem, input_files

log = logging.getLogger(__name__)

# Bytes per index document assumed for the first batch's segment (files sizing).
FIRST_SEGMENT_BYTES_PER_DOC = 1_500
# Datasets of a batch's output that are deleted before it is committed.
# The status of a batch output committed before its index commit (see _commit).
PENDING = "pending_index"
SCRATCH_DATASETS = (
    "shingles",
    "signatures",
    "candidates",
    "blocks",
    "decisions",
    "index_documents",
    "_checkpoints",
)


def default_batch_id(spark: SparkSession, path: str) -> str:
    """``b-`` + 16 hex digits of SHA-256 over the input's name and its files'
    relative names and sizes: the same input gives the same id on every run."""
    fs = FileSystem(spark, path)
    root = fs.qualify(path).rstrip("/")
    h = hashlib.sha256(posixpath.basename(root).encode())
    for name, length, _ in fs.fingerprint(path) if fs.is_dir(path) else ((root, 0, 0),):
        rel = name[len(root) :] if name.startswith(root) else posixpath.basename(name)
        h.update(f"\n{rel}\t{length}".encode())
    if not fs.is_dir(path):
        h.update(f"\t{fs.size_bytes(path)}".encode())
    return "b-" + h.hexdigest()[:16]


def _col_or_null(df: DataFrame, name: str, dtype: str):
    return F.col(name).cast(dtype) if name in df.columns else F.lit(None).cast(dtype)


def _reject_indexed(out: StagedOutput, index: CrawlIndex, parent: Manifest) -> int:
    """Move batch records whose id is already in the index to ``rejects/``."""
    sigs = out.read("signatures")
    keys = sigs.select("id", doc_key(F.col("id")).alias("doc"))
    n = keys.count()
    docs, _ = index.lookup(parent, "docs", "doc", small_id_list(keys.select("doc"), n), n)
    with cached(
        docs.select("doc", "id", "batch_id").join(small_id_list(keys, n), ["doc", "id"])
    ) as hits:
        found = hits.count()
        if found:
            reason = F.concat(
                F.lit("already_indexed: this WARC-Record-ID/id is in the index since batch "),
                F.col("batch_id"),
            )
            rejects = out.read("rejects").unionByName(hits.select("id", reason.alias("reason")))
            out.replace(rejects, "rejects")
            out.replace(sigs.join(F.broadcast(hits.select("id")), "id", "left_anti"), "signatures")
    return found


def _lookup(
    out: StagedOutput, index: CrawlIndex, parent: Manifest, cfg: DedupConfig, stack: ExitStack
) -> tuple[DataFrame, DataFrame, dict[str, Any]]:
    """``(cross candidate pairs (id_a batch, id_b index), index documents found, facts)``.

    The candidate pairs stay cached until ``stack`` closes.
    """
    b, r = cfg.band_params()
    rows = explode_bands(out.read("signatures"), b, r).select("id", "bucket")
    with ExitStack() as local:
        keys = local.enter_context(cached(rows.select("bucket").distinct()))
        n_keys = keys.count()
        # The one read of the index's band table: only rows in the batch's
        # buckets survive it, and they are kept.
        matched, band_read = index.lookup(
            parent, "bands", "bucket", small_id_list(keys, n_keys), n_keys
        )
        matched = local.enter_context(cached(matched))
        per_bucket = local.enter_context(
            cached(
                matched.groupBy("bucket").agg(
                    F.count(F.lit(1)).alias("n"), F.min("doc").alias("first")
                )
            )
        )
        # An index bucket shared by more than max_bucket_size kept documents
        # (they are not near-duplicates of each other, so this is rare:
        # templates) pairs a batch document with its smallest doc only, as the
        # core pipeline's star.
        kept = (
            matched.join(per_bucket, "bucket")
            .filter((F.col("n") <= cfg.max_bucket_size) | (F.col("doc") == F.col("first")))
            .select("bucket", "doc")
        )
        cross = stack.enter_context(
            cached(rows.join(kept, "bucket").select("id", "doc").distinct())
        )
        buckets = per_bucket.agg(
            F.coalesce(F.sum("n"), F.lit(0)).alias("rows"),
            F.count(F.when(F.col("n") > cfg.max_bucket_size, 1)).alias("bounded"),
        ).first()
        found, doc_read = _read_index_documents(out, index, parent, cross)
        n_cross = cross.count()
    pairs = cross.join(found.select("doc", F.col("id").alias("id_b")), "doc").select(
        F.col("id").alias("id_a"), "id_b"
    )
    facts = {
        "batch_band_keys": n_keys,
        "index_band_rows_matched": int(buckets["rows"]),
        "bounded_index_buckets": int(buckets["bounded"]),
        "cross_candidate_pairs": n_cross,
        "index_documents_looked_up": found.count(),
        "band_table_read": band_read,
        "document_table_read": doc_read,
    }
    return pairs, found, facts


def _read_index_documents(
    out: StagedOutput, index: CrawlIndex, parent: Manifest, cross: DataFrame
) -> tuple[DataFrame, dict[str, Any]]:
    """The index documents of the cross candidates, written to ``index_documents/``
    and read back; and how the index was read."""
    wanted = cross.select("doc").distinct()
    n_docs = wanted.count()
    found, doc_read = index.lookup(parent, "docs", "doc", small_id_list(wanted, n_docs), n_docs)
    # Written out once and read back: later stages use these documents several
    # times, and a cached plan would not keep the pushed-down keys at the scan.
    out.write(
        found.select("doc", "id", "url", "fetch_time", "added_version", "text_len", "shingles"),
        "index_documents",
    )
    return out.read("index_documents"), doc_read


def _keeper_rank(keep: str):
    """Sort key whose minimum is a cluster's keeper (nulls of fetch_time sort last)."""
    ts = F.unix_micros(F.col("fetch_time"))
    version = F.col("added_version")
    if keep == "newest":
        ts, version = -ts, -version
    return F.struct(
        F.col("fetch_time").isNull().alias("no_time"),
        ts.alias("t"),
        version.alias("v"),
        F.col("id").alias("id"),
        F.col("in_index"),
    )


def already_applied(
    spark: SparkSession, output: str, manifest: Manifest, entry: dict[str, Any]
) -> dict[str, Any]:
    """Report that the batch of ``entry`` (its record in ``manifest``, found by
    :meth:`CrawlIndex.find_batch`) is in the index, and repair its output."""
    batch_id = entry["batch_id"]
    report = {
        "lsh_spark_version": __version__,
        "batch_id": batch_id,
        "status": "already_applied",
        "message": f"batch {batch_id} was committed in index version {entry['version']}; "
        "nothing was changed",
        "index": {"before": describe(manifest), "after": describe(manifest)},
        "counts": {"new_documents": 0, "duplicates": 0, "superseded_index_documents": 0},
        "original_run": entry,
    }
    fs = FileSystem(spark, output)
    root = fs.qualify(output).rstrip("/")
    first = _output_report(fs, root)
    if first is None and not fs.exists(root):  # a new output: a report saying so
        out = StagedOutput(spark, output, overwrite=False)
        out.write_json("report.json", report)
        out.commit()
    elif first is None:
        # An output without its report (a kill or a power cut between the datasets and
        # report.json on a store whose replace is not atomic): its datasets are the
        # batch's and cannot be made again, so nothing is deleted; the report is
        # rebuilt from the index's record of the batch, written only if still absent.
        rebuilt = dict(
            report,
            status="committed",
            message=f"report.json of batch {batch_id} rebuilt from index version "
            f"{entry['version']}; its datasets are those of the original run",
            counts={k: v for k, v in entry.items() if isinstance(v, int) and k != "version"},
        )
        text = json.dumps(rebuilt, indent=2, sort_keys=True) + "\n"
        if fs.create_exclusive(f"{root}/report.json", text.encode()):
            log.warning("%s/report.json was missing: rebuilt from the index", root)
    elif first.get("batch_id") == batch_id and first.get("status") == PENDING:
        _mark_committed(fs, root, first)  # killed before this
    return report


def _output_report(fs: FileSystem, root: str) -> dict[str, Any] | None:
    """The report of the output at ``root``, or None when it has none (a replace
    of it cut short on HDFS is finished first: :meth:`FileSystem.read_replaced`)."""
    path = f"{root}/report.json"
    text = fs.read_replaced(path)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise LshSparkError(
            f"--output: {path} is damaged (not JSON) next to the datasets of a committed "
            "batch; move it aside and run again to rebuild it from the index"
        ) from None


@dataclass
class _Batch:
    """One batch run: where it reads and writes, and the index version it makes."""

    spark: SparkSession
    path: str | DataFrame
    batch_id: str
    cfg: DedupConfig
    index: CrawlIndex
    parent: Manifest | None
    out: StagedOutput
    version: int
    segment: str
    timer: Timer
    attempt: int = 1
    committed: bool = False


def run_crawl_batch(
    spark: SparkSession,
    batch_path: str | DataFrame,
    index_root: str,
    output: str,
    cfg: DedupConfig,
    batch_id: str | None = None,
    keep: str = "oldest",
    max_retries: int = 3,
) -> dict[str, Any]:
    """Deduplicate one batch against itself and the index, then add it to the index.

    The steps: the core stages on the batch (:func:`_batch_stages`), look up and
    verify against the index (:func:`_cross_verify`), decide every cluster's
    keeper (:func:`_decide`), write the index segment (:func:`_write_segment`)
    and commit the index, then the output (:func:`_commit`).  A run that loses
    the index's compare-and-swap (:class:`IndexConflict`) starts again from the
    new version, at most ``max_retries`` times, as the same run: on an object
    store, where an output is written in place, the retry replaces the output
    its lost attempt committed, under the same owner record.

    ``batch_path``: a path, or the batch as a DataFrame (:class:`lsh_spark.api.CrawlIndex`),
    which needs a ``batch_id``.
    """
    _check_args(spark, batch_path, cfg, keep)
    if batch_id is None and isinstance(batch_path, DataFrame):
        raise ConfigError("--batch-id: required for a batch given as a DataFrame")
    batch_id = batch_id or default_batch_id(spark, batch_path)
    run_id = uuid.uuid4().hex[:12]
    for attempt in range(1, max_retries + 2):
        try:
            return _run_once(
                spark, batch_path, index_root, output, cfg, batch_id, keep, attempt, run_id
            )
        except IndexConflict as exc:
            if attempt > max_retries:
                raise IndexConflict(
                    f"{exc}; gave up after {attempt} attempts (--max-retries {max_retries})"
                ) from None
            log.warning("%s; running batch %s again (attempt %d)", exc, batch_id, attempt + 1)
    raise AssertionError("unreachable")


def _run_once(
    spark: SparkSession,
    batch_path: str | DataFrame,
    index_root: str,
    output: str,
    cfg: DedupConfig,
    batch_id: str,
    keep: str,
    attempt: int,
    run_id: str,
) -> dict[str, Any]:
    """One attempt of :func:`run_crawl_batch` from the index's current version."""
    started = time.perf_counter()
    index = CrawlIndex(spark, index_root)
    parent = index.current()
    if parent is not None:
        cfg = continued_config(parent, cfg)
        index.check_params(parent, cfg)
    applied = index.find_batch(parent, batch_id) if parent is not None else None
    if applied is not None:
        return already_applied(spark, output, parent, applied)
    # Prunes what the earlier commits left: manifests whose next readable version
    # is older than the retention period, then unnamed old segments.  Never
    # ``parent`` (the newest readable) nor the version another running batch
    # read: its successor was committed after that batch read it, so it is
    # younger than the retention period by construction (unless that batch has
    # run longer, and then it commits nothing).  Run here, before any work, so
    # that a failure to delete never fails a batch that committed.
    index.collect_garbage(RETENTION_HOURS * 3600, retire_manifests=True)
    version = index.head + 1
    run = _Batch(
        spark,
        batch_path,
        batch_id,
        cfg,
        index,
        parent,
        StagedOutput(spark, output, overwrite=True, run=run_id),
        version,
        index.new_segment_name(version),
        Timer(spark),
        attempt,
    )
    try:
        with ExitStack() as stack:
            sections, indexed = _batch_stages(run)
            found, lookup = _cross_verify(run, stack)
            new_ids, raw = _decide(run, found, keep)
            entry = _write_segment(run, new_ids, raw)
        report = _commit(run, sections, indexed, lookup, entry, keep, started)
    except BaseException:
        if not run.committed:  # a committed segment is the index's now
            index.discard([run.segment])
        release_crawl_input(batch_path, run.out)
        run.out.abort()
        raise
    return report


def _check_args(
    spark: SparkSession, batch_path: str | DataFrame, cfg: DedupConfig, keep: str
) -> None:
    """Raise :class:`ConfigError` for options a crawl batch cannot run with."""
    if keep not in CRAWL_KEEP_POLICIES:
        raise ConfigError(f"--keep: got {keep!r}; allowed: {' | '.join(CRAWL_KEEP_POLICIES)}")
    if cfg.keep_by is not None:
        raise ConfigError(
            f"--keep-by: got {cfg.keep_by!r}; allowed with crawl_dedup.py: unset (its "
            "--keep oldest | newest chooses by fetch time)"
        )
    if cfg.method != "minhash":
        raise ConfigError(
            f"--method: got {cfg.method!r}; allowed with crawl_dedup.py: minhash "
            "(the index holds MinHash band keys and shingle sets)"
        )
    if not isinstance(batch_path, DataFrame):
        input_files(spark, batch_path, flag="--batch")


def _batch_stages(run: _Batch) -> tuple[list[dict[str, Any]], int]:
    """The core pipeline's stages on the batch alone (extract, signatures,
    candidates, verify); batch records already in the index become rejects.
    Returns the stages' report sections and the number of those records."""
    spark, out, cfg = run.spark, run.out, run.cfg
    size_shuffle_partitions(spark, input_bytes(spark, run.path))
    sections = [
        extract_crawl_input(spark, run.path, out, cfg),
        stage_signatures(spark, run.path, out, cfg),
    ]
    with run.timer("index_ids"):
        indexed = _reject_indexed(out, run.index, run.parent) if run.parent else 0
    cands = stage_candidates(spark, out, cfg)
    sections += [
        cands,
        stage_verify(spark, out, cfg, block_members=cands["buckets"].get("block_members")),
    ]
    return sections, indexed


def _cross_verify(run: _Batch, stack: ExitStack) -> tuple[DataFrame | None, dict[str, Any]]:
    """Look up the batch's band keys in the index and verify the cross pairs
    (batch document, index document): writes ``cross_pairs/``.  Returns the
    index documents looked up (None for an empty index) and the lookup facts."""
    out, cfg = run.out, run.cfg
    found = None
    if run.parent is not None and run.parent.documents:
        with run.timer("lookup"):
            cands, found, lookup = _lookup(out, run.index, run.parent, cfg, stack)
    with run.timer("cross_verify"):
        if found is None:
            out.write(
                local_frame(run.spark, [], "id_a string, id_b string, jaccard double"),
                "cross_pairs",
            )
            return None, {"index_documents_looked_up": 0, "cross_verified_pairs": 0}
        involved = cands.select(F.col("id_a").alias("id")).distinct()
        needed = accepted_shingles(out).join(F.broadcast(involved), "id", "left_semi")
        shingles = needed.unionByName(found.select("id", "shingles"))
        size = found.agg(F.coalesce(F.sum(F.size("shingles")), F.lit(0))).first()[0]
        cross = verify_pairs(
            cands,
            shingles,
            cfg.threshold,
            broadcast=SHINGLE_BYTES * size <= BROADCAST_SHINGLE_BYTES,
        )
        out.write(cross, "cross_pairs")
        lookup["cross_verified_pairs"] = out.read("cross_pairs").count()
    return found, lookup


def _decide(run: _Batch, found: DataFrame | None, keep: str) -> tuple[DataFrame, DataFrame]:
    """Cluster the batch's pairs and the cross pairs and choose each cluster's
    keeper: writes ``decisions/``, ``duplicates/``, ``superseded/`` and
    ``deduped/``.  Returns the ids of the new documents and the batch's
    accepted input records."""
    out, cfg = run.out, run.cfg
    with run.timer("decide"):
        raw, facts = read_corpus(run.spark, run.path, cfg)
        raw = raw.filter(F.col("reject_reason").isNull())
        decided = _keepers(run, raw, found, keep)
        shingles = accepted_shingles(out)
        if found is not None:
            shingles = shingles.unionByName(found.select("id", "shingles"))
        dups = decided.filter(~F.col("in_index") & (F.col("id") != F.col("keeper")))
        dups = with_jaccard(
            dups.select("id", F.col("keeper").alias("duplicate_of"), "keeper_in_index"),
            shingles,
            "id",
            "duplicate_of",
        )
        out.write(
            dups.select(
                "id",
                "duplicate_of",
                "jaccard",
                F.when(F.col("keeper_in_index"), "index")
                .otherwise("batch")
                .alias("duplicate_of_source"),
            ),
            "duplicates",
        )
        gone = decided.filter(F.col("in_index") & ~F.col("keeper_in_index"))
        gone = with_jaccard(
            gone.select("id", F.col("keeper").alias("replaced_by")), shingles, "id", "replaced_by"
        )
        out.write(gone.select("id", "replaced_by", "jaccard"), "superseded")
        new_ids = decided.filter(~F.col("in_index") & (F.col("id") == F.col("keeper"))).select("id")
        deduped = raw.join(new_ids, "id").drop("reject_reason")
        out.write(restore_id_col(deduped, cfg, facts["derived_ids"]), "deduped")
    return new_ids, raw


def _keepers(run: _Batch, raw: DataFrame, found: DataFrame | None, keep: str) -> DataFrame:
    """``(id, in_index, keeper, keeper_in_index)`` of every batch document and every
    index document in a cross pair, written to ``decisions/`` and read back."""
    out = run.out
    sigs = out.read("signatures")
    cross = out.read("cross_pairs")
    batch_attrs = sigs.select("id").join(
        raw.select("id", _col_or_null(raw, "fetch_time", "timestamp").alias("fetch_time")), "id"
    )
    attrs = batch_attrs.select(
        "id",
        "fetch_time",
        F.lit(run.version).alias("added_version"),
        F.lit(False).alias("in_index"),
    )
    vertices = sigs.select("id")
    if found is not None:
        hit = cross.select(F.col("id_b").alias("id")).distinct()
        idx_attrs = found.join(hit, "id", "left_semi").select(
            "id", "fetch_time", "added_version", F.lit(True).alias("in_index")
        )
        attrs = attrs.unionByName(idx_attrs)
        vertices = vertices.unionByName(hit)
    edges = out.read("pairs").select("id_a", "id_b").unionByName(cross.select("id_a", "id_b"))
    clusters = connected_components(
        edges, vertices, run.cfg.max_cc_iterations, saved_rounds(checkpoint_dir(run.out, run.cfg))
    )
    ranked = clusters.join(attrs, "id").withColumn("rank", _keeper_rank(keep))
    keepers = (
        ranked.groupBy("cluster_id")
        .agg(F.min("rank").alias("k"))
        .select(
            "cluster_id",
            F.col("k.id").alias("keeper"),
            F.col("k.in_index").alias("keeper_in_index"),
        )
    )
    out.write(
        ranked.join(keepers, "cluster_id").select("id", "in_index", "keeper", "keeper_in_index"),
        "decisions",
    )
    return out.read("decisions")


def _write_segment(run: _Batch, new_ids: DataFrame, raw: DataFrame) -> dict[str, Any]:
    """Write the index segment: the new documents with their band keys and
    shingle sets, and tombstones of the superseded ones.  Returns its manifest entry."""
    out, cfg, parent = run.out, run.cfg, run.parent
    with run.timer("segment"):
        sigs = out.read("signatures")
        new_docs = (
            new_ids.join(sigs.select("id", "text_hash", "text_len", "num_shingles"), "id")
            .join(accepted_shingles(out), "id")
            .join(
                raw.select(
                    "id",
                    _col_or_null(raw, "url", "string").alias("url"),
                    _col_or_null(raw, "fetch_time", "timestamp").alias("fetch_time"),
                    _col_or_null(raw, "content_digest", "string").alias("content_digest"),
                ),
                "id",
            )
        )
        docs = new_docs.select(
            doc_key(F.col("id")).alias("doc"),
            "id",
            "url",
            "fetch_time",
            "content_digest",
            F.lit(run.batch_id).alias("batch_id"),
            F.lit(run.version).alias("added_version"),
            "text_hash",
            F.col("text_len").cast("int"),
            F.col("num_shingles").cast("int"),
            "shingles",
        )
        b, r = cfg.band_params()
        bands = explode_bands(sigs.join(new_ids, "id", "left_semi"), b, r).select(
            "bucket", doc_key(F.col("id")).alias("doc")
        )
        removed = out.read("superseded").select(doc_key(F.col("id")).alias("doc"), "id")
        per_doc = (
            parent.bytes / parent.documents
            if parent and parent.documents
            else FIRST_SEGMENT_BYTES_PER_DOC
        )
        stats = run.index.write_segment(
            run.segment, docs, bands, removed, new_ids.count() * per_doc
        )
    return segment_entry(stats, run.version, run.batch_id, "batch")


def _commit(
    run: _Batch,
    sections: list[dict[str, Any]],
    indexed: int,
    lookup: dict[str, Any],
    entry: dict[str, Any],
    keep: str,
    started: float,
) -> dict[str, Any]:
    """Commit the output, then the index, then mark the output committed; return
    the report.

    The output is committed first with ``"status": "pending_index"``; its
    report says ``committed`` only once the index holds the batch.  Killed
    before the index commit, a re-run does the batch again and replaces that
    output; killed after it, a re-run finds the batch in the index, marks the
    complete output committed and reports ``already_applied`` (nothing is added
    twice, nothing is lost).
    """
    parent, out = run.parent, run.out
    counts = _final_counts(out, indexed)
    new_manifest = Manifest(
        version=run.version,
        params=parent.params if parent else index_params(run.cfg),
        segments=(parent.segments if parent else []) + [entry],
        # The batches since the last compaction, and this one; the earlier ones
        # stay in the ledger the parent points to (carried forward unchanged).
        batches=(parent.batches if parent else [])
        + [
            {
                "batch_id": run.batch_id,
                "version": run.version,
                "input": input_name(run.path),
                "committed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                **counts,
            }
        ],
        folded_batches=parent.folded_batches if parent else None,
    )
    report = merge_reports(
        {
            "lsh_spark_version": __version__,
            "batch_id": run.batch_id,
            "status": "committed",
            "input_path": input_name(run.path),
            "index_path": run.index.root,
            "keep": keep,
            "parameters": run.cfg.to_dict(),
        },
        *sections,
        {
            "counts": counts,
            "lookup": lookup,
            "seconds": run.timer.seconds,
            "cpu_seconds": run.timer.cpu,
            "index": {
                "before": describe(parent),
                "after": describe(new_manifest),
                "segment": entry,
                "attempts": run.attempt,
                "damaged_manifests_skipped": run.index.skipped,
            },
        },
    )
    report["seconds"]["total"] = round(time.perf_counter() - started, 3)
    for name in SCRATCH_DATASETS:
        out.fs.delete(out.path(name))
    release_crawl_input(run.path, out)
    out.write_json("report.json", dict(report, status=PENDING))
    out.commit()
    run.index.commit(parent, new_manifest)
    run.committed = True
    maybe_die("index:after_manifest")
    _mark_committed(out.fs, out.output, report)
    return report


def _mark_committed(fs: FileSystem, output: str, report: dict[str, Any]) -> None:
    """Replace the committed output's report by ``report`` with status committed."""
    text = json.dumps(dict(report, status="committed"), indent=2, sort_keys=True) + "\n"
    fs.replace_text(f"{output}/report.json", text)


def _final_counts(out: StagedOutput, indexed: int) -> dict[str, int]:
    """The report's and the manifest's counts of the batch, from its outputs."""
    dup = (
        out.read("duplicates")
        .groupBy("duplicate_of_source")
        .agg(F.count(F.lit(1)).alias("n"))
        .collect()
    )
    by_source = {r["duplicate_of_source"]: int(r["n"]) for r in dup}
    rejects = out.read("rejects").count()
    new = out.read("deduped").count()
    return {
        "new_documents": new,
        "duplicates": sum(by_source.values()),
        "duplicates_of_index": by_source.get("index", 0),
        "duplicates_within_batch": by_source.get("batch", 0),
        "superseded_index_documents": out.read("superseded").count(),
        "rejected": rejects,
        "already_indexed": indexed,
    }
