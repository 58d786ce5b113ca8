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
   the tombstones become one index segment; the output is committed, then the
   index (see :mod:`lsh_spark.index`).  A batch id already in the index is
   reported and nothing is written.
"""

from __future__ import annotations

import hashlib
import posixpath
import time
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lsh_spark import __version__
from lsh_spark.banding import explode_bands
from lsh_spark.cluster import connected_components
from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.index import (
    CrawlIndex,
    Manifest,
    describe,
    doc_key,
    index_params,
    segment_entry,
)
from lsh_spark.io import FileSystem, StagedOutput, read_corpus
from lsh_spark.pipeline import (
    BROADCAST_ID_ROWS,
    BROADCAST_SHINGLE_BYTES,
    Timer,
    _read,
    _restore_id_col,
    extract_crawl_input,
    merge_reports,
    release_crawl_input,
    stage_candidates,
    stage_signatures,
    stage_verify,
)
from lsh_spark.session import size_shuffle_partitions
from lsh_spark.verify import jaccard, join_sides, verify_pairs

CRAWL_KEEP = ("oldest", "newest")
# Bytes per index document assumed for the first batch's segment (files sizing).
FIRST_SEGMENT_BYTES_PER_DOC = 1_500


def default_batch_id(spark: SparkSession, path: str) -> str:
    """``b-`` + 16 hex digits of SHA-256 over the input's name and its files'
    relative names and sizes: the same input gives the same id on every run."""
    fs = FileSystem(spark, path)
    root = fs.qualify(path).rstrip("/")
    h = hashlib.sha256(posixpath.basename(root).encode())
    for name, length, _ in fs.fingerprint(path) if fs.is_dir(path) else ((root, 0, 0),):
        rel = name[len(root):] if name.startswith(root) else posixpath.basename(name)
        h.update(f"\n{rel}\t{length}".encode())
    if not fs.is_dir(path):
        h.update(f"\t{fs.size_bytes(path)}".encode())
    return "b-" + h.hexdigest()[:16]


def _col_or_null(df: DataFrame, name: str, dtype: str):
    return F.col(name).cast(dtype) if name in df.columns else F.lit(None).cast(dtype)


def _small(df: DataFrame, rows: int) -> DataFrame:
    return F.broadcast(df) if rows <= BROADCAST_ID_ROWS else df


def _reject_indexed(spark: SparkSession, out: StagedOutput, index: CrawlIndex,
                    parent: Manifest) -> int:
    """Move batch records whose id is already in the index to ``rejects/``."""
    sigs = _read(spark, out, "signatures")
    keys = sigs.select("id", doc_key(F.col("id")).alias("doc"))
    n = keys.count()
    docs, _ = index.lookup(parent, "docs", "doc", _small(keys.select("doc"), n), n)
    hits = (docs.select("doc", "id", "batch_id").join(_small(keys, n), ["doc", "id"])
            .persist(StorageLevel.MEMORY_AND_DISK))
    try:
        found = hits.count()
        if found:
            reason = F.concat(F.lit("already_indexed: this WARC-Record-ID/id is in the "
                                    "index since batch "), F.col("batch_id"))
            rejects = _read(spark, out, "rejects").unionByName(
                hits.select("id", reason.alias("reason")))
            out.replace(rejects, "rejects")
            out.replace(sigs.join(F.broadcast(hits.select("id")), "id", "left_anti"),
                        "signatures")
    finally:
        hits.unpersist()
    return found


def _lookup(spark: SparkSession, out: StagedOutput, index: CrawlIndex, parent: Manifest,
            cfg: DedupConfig) -> tuple[DataFrame, DataFrame, dict[str, Any]]:
    """``(cross candidate pairs (id_a batch, id_b index), index documents found, facts)``."""
    b, r = cfg.band_params()
    rows = explode_bands(_read(spark, out, "signatures"), b, r).select("id", "bucket")
    keys = rows.select("bucket").distinct().persist(StorageLevel.MEMORY_AND_DISK)
    n_keys = keys.count()
    # The one read of the index's band table: only rows in the batch's buckets
    # survive it, and they are kept.
    matched, band_read = index.lookup(parent, "bands", "bucket", _small(keys, n_keys), n_keys)
    matched = matched.persist(StorageLevel.MEMORY_AND_DISK)
    per_bucket = matched.groupBy("bucket").agg(F.count(F.lit(1)).alias("n"),
                                               F.min("doc").alias("first")).persist(
        StorageLevel.MEMORY_AND_DISK)
    # An index bucket shared by more than max_bucket_size kept documents (they
    # are not near-duplicates of each other, so this is rare: templates) pairs a
    # batch document with its smallest doc only, as the core pipeline's star.
    kept = (matched.join(per_bucket, "bucket")
            .filter((F.col("n") <= cfg.max_bucket_size) | (F.col("doc") == F.col("first")))
            .select("bucket", "doc"))
    cross = rows.join(kept, "bucket").select("id", "doc").distinct().persist(
        StorageLevel.MEMORY_AND_DISK)
    try:
        buckets = per_bucket.agg(F.coalesce(F.sum("n"), F.lit(0)).alias("rows"),
                                 F.count(F.when(F.col("n") > cfg.max_bucket_size, 1))
                                 .alias("bounded")).first()
        wanted = cross.select("doc").distinct()
        n_docs = wanted.count()
        found, doc_read = index.lookup(parent, "docs", "doc", _small(wanted, n_docs), n_docs)
        # Written out once and read back: later stages use these documents several
        # times, and a cached plan would not keep the pushed-down keys at the scan.
        out.write(found.select("doc", "id", "url", "fetch_time", "added_version", "text_len",
                               "shingles"), "index_documents")
        found = _read(spark, out, "index_documents")
        pairs = (cross.join(found.select("doc", F.col("id").alias("id_b")), "doc")
                 .select(F.col("id").alias("id_a"), "id_b"))
        facts = {
            "batch_band_keys": n_keys,
            "index_band_rows_matched": int(buckets["rows"]),
            "bounded_index_buckets": int(buckets["bounded"]),
            "cross_candidate_pairs": cross.count(),
            "index_documents_looked_up": found.count(),
            "band_table_read": band_read,
            "document_table_read": doc_read,
        }
    finally:
        keys.unpersist()
        per_bucket.unpersist()
        matched.unpersist()
    return pairs, found, facts


def _keeper_rank(keep: str):
    """Sort key whose minimum is a cluster's keeper (nulls of fetch_time sort last)."""
    ts = F.unix_micros(F.col("fetch_time"))
    version = F.col("added_version")
    if keep == "newest":
        ts, version = -ts, -version
    return F.struct(F.col("fetch_time").isNull().alias("no_time"), ts.alias("t"),
                    version.alias("v"), F.col("id").alias("id"), F.col("in_index"))


def _pair_jaccard(pairs: DataFrame, shingles: DataFrame, left: str, right: str) -> DataFrame:
    """Add the exact ``jaccard`` of ``left`` and ``right`` ids (shingles: (id, shingles))."""
    return (join_sides(pairs, shingles, "shingles", left, right)
            .withColumn("jaccard", jaccard(F.col("shingles_a"), F.col("shingles_b")))
            .drop("shingles_a", "shingles_b"))


def already_applied(spark: SparkSession, output: str, manifest: Manifest, batch_id: str
                    ) -> dict[str, Any]:
    entry = manifest.batch(batch_id)
    report = {
        "lsh_spark_version": __version__, "batch_id": batch_id, "status": "already_applied",
        "message": f"batch {batch_id} was committed in index version {entry['version']}; "
                   "nothing was changed",
        "index": {"before": describe(manifest), "after": describe(manifest)},
        "counts": {"new_documents": 0, "duplicates": 0, "superseded_index_documents": 0},
        "original_run": entry,
    }
    fs = FileSystem(spark, output)
    if not fs.exists(output):  # the first run's output stands if it is there
        out = StagedOutput(spark, output)
        out.write_json("report.json", report)
        out.commit()
    return report


def run_crawl_batch(spark: SparkSession, batch_path: str, index_root: str, output: str,
                    cfg: DedupConfig, batch_id: str | None = None, keep: str = "oldest"
                    ) -> dict[str, Any]:
    """Deduplicate one batch against itself and the index, then add it to the index."""
    if keep not in CRAWL_KEEP:
        raise ConfigError(f"--keep: got {keep!r}; allowed: {' | '.join(CRAWL_KEEP)}")
    if cfg.method != "minhash":
        raise ConfigError(f"--method: got {cfg.method!r}; allowed with crawl_dedup.py: minhash "
                          "(the index holds MinHash band keys and shingle sets)")
    started = time.perf_counter()
    if not FileSystem(spark, batch_path).exists(batch_path):
        raise ConfigError(f"--batch: path does not exist: {batch_path}")
    index = CrawlIndex(spark, index_root)
    parent = index.current()
    if parent is not None:
        index.check_params(parent, cfg)
    batch_id = batch_id or default_batch_id(spark, batch_path)
    if parent is not None and parent.batch(batch_id) is not None:
        return already_applied(spark, output, parent, batch_id)

    version = (parent.version if parent else 0) + 1
    segment = index.new_segment_name(version)
    out = StagedOutput(spark, output, overwrite=True)
    timer = Timer(spark)
    try:
        size_shuffle_partitions(spark, FileSystem(spark, batch_path).size_bytes(batch_path))
        spark.sparkContext.setCheckpointDir(cfg.checkpoint_dir or out.path("_checkpoints"))
        crawl = extract_crawl_input(spark, batch_path, out, cfg)
        sections = [crawl, stage_signatures(spark, batch_path, out, cfg)]
        with timer("index_ids"):
            indexed = _reject_indexed(spark, out, index, parent) if parent else 0
        cands = stage_candidates(spark, out, cfg)
        sections += [cands, stage_verify(
            spark, out, cfg, block_members=cands["buckets"].get("block_members"))]

        sigs = _read(spark, out, "signatures")
        batch_shingles = (_read(spark, out, "shingles").filter(F.col("shingles").isNotNull())
                          .select("id", "shingles"))
        found = None
        if parent is not None and parent.documents:
            with timer("lookup"):
                cands, found, lookup = _lookup(spark, out, index, parent, cfg)
        with timer("cross_verify"):
            if found is not None:
                involved = cands.select(F.col("id_a").alias("id")).distinct()
                needed = batch_shingles.join(_small(involved, BROADCAST_ID_ROWS), "id",
                                             "left_semi")
                shingles = needed.unionByName(found.select("id", "shingles"))
                size = found.agg(F.coalesce(F.sum(F.size("shingles")), F.lit(0))).first()[0]
                cross = verify_pairs(cands, shingles, cfg.threshold,
                                     broadcast=8 * size <= BROADCAST_SHINGLE_BYTES)
                out.write(cross, "cross_pairs")
                lookup["cross_verified_pairs"] = _read(spark, out, "cross_pairs").count()
            else:
                lookup = {"index_documents_looked_up": 0, "cross_verified_pairs": 0}
                out.write(spark.createDataFrame([], "id_a string, id_b string, jaccard double"),
                          "cross_pairs")
        cross = _read(spark, out, "cross_pairs")

        with timer("decide"):
            raw, facts = read_corpus(spark, batch_path, cfg)
            raw = raw.filter(F.col("reject_reason").isNull())
            batch_attrs = sigs.select("id").join(raw.select(
                "id", _col_or_null(raw, "fetch_time", "timestamp").alias("fetch_time")), "id")
            attrs = batch_attrs.select("id", "fetch_time", F.lit(version).alias("added_version"),
                                       F.lit(False).alias("in_index"))
            vertices = sigs.select("id")
            if found is not None:
                hit = cross.select(F.col("id_b").alias("id")).distinct()
                idx_attrs = found.join(hit, "id", "left_semi").select(
                    "id", "fetch_time", "added_version", F.lit(True).alias("in_index"))
                attrs = attrs.unionByName(idx_attrs)
                vertices = vertices.unionByName(hit)
            edges = _read(spark, out, "pairs").select("id_a", "id_b").unionByName(
                cross.select("id_a", "id_b"))
            clusters = connected_components(edges, vertices, cfg.max_cc_iterations)
            ranked = clusters.join(attrs, "id").withColumn("rank", _keeper_rank(keep))
            keepers = ranked.groupBy("cluster_id").agg(F.min("rank").alias("k")).select(
                "cluster_id", F.col("k.id").alias("keeper"),
                F.col("k.in_index").alias("keeper_in_index"))
            decided = ranked.join(keepers, "cluster_id").select(
                "id", "in_index", "keeper", "keeper_in_index")
            out.write(decided, "decisions")
            decided = _read(spark, out, "decisions")

            shingles = batch_shingles
            if found is not None:
                shingles = shingles.unionByName(found.select("id", "shingles"))
            dups = decided.filter(~F.col("in_index") & (F.col("id") != F.col("keeper")))
            dups = _pair_jaccard(dups.select("id", F.col("keeper").alias("duplicate_of"),
                                             "keeper_in_index"), shingles, "id", "duplicate_of")
            out.write(dups.select(
                "id", "duplicate_of", "jaccard",
                F.when(F.col("keeper_in_index"), "index").otherwise("batch")
                .alias("duplicate_of_source")), "duplicates")
            gone = decided.filter(F.col("in_index") & ~F.col("keeper_in_index"))
            gone = _pair_jaccard(gone.select("id", F.col("keeper").alias("replaced_by")),
                                 shingles, "id", "replaced_by")
            out.write(gone.select("id", "replaced_by", "jaccard"), "superseded")
            new_ids = decided.filter(~F.col("in_index") & (F.col("id") == F.col("keeper"))
                                     ).select("id")
            deduped = raw.join(new_ids, "id").drop("reject_reason")
            out.write(_restore_id_col(deduped, cfg, facts["derived_ids"]), "deduped")

        with timer("segment"):
            new_docs = (new_ids.join(sigs.select("id", "text_hash", "text_len", "num_shingles"),
                                     "id")
                        .join(batch_shingles, "id")
                        .join(raw.select("id", _col_or_null(raw, "url", "string").alias("url"),
                                         _col_or_null(raw, "fetch_time", "timestamp")
                                         .alias("fetch_time"),
                                         _col_or_null(raw, "content_digest", "string")
                                         .alias("content_digest")), "id"))
            docs = new_docs.select(
                doc_key(F.col("id")).alias("doc"), "id", "url", "fetch_time", "content_digest",
                F.lit(batch_id).alias("batch_id"), F.lit(version).alias("added_version"),
                "text_hash", F.col("text_len").cast("int"), F.col("num_shingles").cast("int"),
                "shingles")
            b, r = cfg.band_params()
            bands = explode_bands(sigs.join(new_ids, "id", "left_semi"), b, r).select(
                "bucket", doc_key(F.col("id")).alias("doc"))
            removed = _read(spark, out, "superseded").select(
                doc_key(F.col("id")).alias("doc"), "id")
            per_doc = (parent.bytes / parent.documents if parent and parent.documents
                       else FIRST_SEGMENT_BYTES_PER_DOC)
            stats = index.write_segment(segment, docs, bands, removed,
                                        new_ids.count() * per_doc)
        entry = segment_entry(stats, version, batch_id, "batch")
        new_manifest = Manifest(
            version=version,
            params=parent.params if parent else index_params(cfg),
            segments=(parent.segments if parent else []) + [entry],
            batches=(parent.batches if parent else []),
        )

        counts = _final_counts(spark, out, indexed)
        new_manifest.batches = new_manifest.batches + [{
            "batch_id": batch_id, "version": version, "input": batch_path,
            "committed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **counts}]
        report = merge_reports(
            {"lsh_spark_version": __version__, "batch_id": batch_id, "status": "committed",
             "input_path": batch_path, "index_path": index.root, "keep": keep,
             "parameters": cfg.to_dict()},
            *sections,
            {"counts": counts, "lookup": lookup, "seconds": timer.seconds,
             "index": {"before": describe(parent), "after": describe(new_manifest),
                       "segment": entry}},
        )
        report["seconds"]["total"] = round(time.perf_counter() - started, 3)
        for name in ("shingles", "signatures", "candidates", "blocks", "decisions",
                     "index_documents", "_checkpoints"):
            out.fs.delete(out.path(name))
        release_crawl_input(batch_path, out)
        out.write_json("report.json", report)
        out.commit()
        index.commit(parent, new_manifest, [segment])
    except BaseException:
        index.discard([segment])
        release_crawl_input(batch_path, out)
        out.abort()
        raise
    return report


def _final_counts(spark: SparkSession, out: StagedOutput, indexed: int) -> dict[str, int]:
    dup = (_read(spark, out, "duplicates").groupBy("duplicate_of_source")
           .agg(F.count(F.lit(1)).alias("n")).collect())
    by_source = {r["duplicate_of_source"]: int(r["n"]) for r in dup}
    rejects = _read(spark, out, "rejects").count()
    new = _read(spark, out, "deduped").count()
    return {
        "new_documents": new,
        "duplicates": sum(by_source.values()),
        "duplicates_of_index": by_source.get("index", 0),
        "duplicates_within_batch": by_source.get("batch", 0),
        "superseded_index_documents": _read(spark, out, "superseded").count(),
        "rejected": rejects,
        "already_indexed": indexed,
    }
