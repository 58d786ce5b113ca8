"""The dedup pipeline as four restartable stages, and the run that chains them.

Each stage reads what the previous one wrote (Parquet under ``--output``) and
the input corpus where it needs text, so a failed stage re-runs alone
(``jobs/signatures.py`` ... ``jobs/cluster.py``); ``jobs/dedup.py`` runs all
four into one staged directory that appears under its real name only when the
whole run succeeded.  The stages here only compose the pure DataFrame
functions of the other modules and time them; all I/O goes through
:mod:`lsh_spark.io`.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from itertools import combinations
from typing import Any, Iterator, Protocol

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from lsh_spark import __version__
from lsh_spark.banding import candidate_probability, explode_bands, s_curve
from lsh_spark.candidates import (
    bucket_members,
    bucket_summary,
    candidate_blocks,
    candidate_pairs,
    DuplicateGroups,
)
from lsh_spark.cluster import apply_keep_policy, connected_components
from lsh_spark.config import VECTOR_METHODS, DedupConfig
from lsh_spark.io import (
    FileSystem,
    InputError,
    StagedOutput,
    check_unique_ids,
    detect_format,
    input_files,
    read_corpus,
)
from lsh_spark.minhash import minhash
from lsh_spark.simhash import add_simhash, block_bounds, explode_tables, hamming
from lsh_spark.features import word_minhash_features
from lsh_spark.normalize import checked_texts, prepare
from lsh_spark.session import adaptive_enabled, in_background, size_shuffle_partitions
from lsh_spark.shingle import add_shingles, text_hash
from lsh_spark import verify as verify_module
from lsh_spark.verify import (
    block_groups,
    block_memberships,
    candidate_ids,
    drop_block_pairs,
    join_sides,
    verify_blocks,
    verify_pairs,
)
from lsh_spark.vectors import (
    add_vector_signatures,
    as_double_array,
    cosine,
    distance,
    vector_rejects,
)
from lsh_spark.warc import extract_warc, register_extracted, skipped_counts


# Candidate documents' shingles up to this size are broadcast to the verify tasks.
BROADCAST_SHINGLE_BYTES = 64 << 20
# Candidate id lists up to this many rows (about 100 MB) are broadcast to filter
# the shingle table where it is read.
BROADCAST_ID_ROWS = 2_000_000
# Writer options of ``shingles/``: 64-bit hashes do not compress (zstd kept
# 147 MB of 145 MB at 41k documents) and never repeat within a page, so the
# codec and the dictionary attempt only cost time (0.94 s instead of 1.31 s to
# write it, warm).
SCRATCH_PARQUET = {"compression": "none", "parquet.enable.dictionary": "false"}
# Writer options of ``signatures/``: every column but the shingle count is a
# unique id or a hash, so Parquet's dictionary attempt (a hash map of the first
# megabyte of values per column, then a fallback to plain encoding) only costs
# time: 0.27-0.29 s instead of 0.35-0.39 s to write the 41k signatures warm,
# 0.50 s instead of 1.18 s cold, the same 17.7 MB.
SIGNATURE_PARQUET = {"parquet.enable.dictionary": "false"}


class Output(Protocol):
    fs: FileSystem

    def path(self, name: str) -> str: ...
    def write(self, df: DataFrame, name: str, **options: str) -> None: ...
    def read(self, name: str) -> DataFrame: ...


def observed(df: DataFrame, **metrics: Column) -> tuple[DataFrame, Observation]:
    """``df`` plus aggregate ``metrics`` (named by keyword) computed while it is
    written, so a count for the report needs no job of its own.

    The caller must run exactly one action on the returned DataFrame (one
    write) before reading ``Observation.get``; place it on the last step of a
    plan (the writing stage), where Spark applies each task's metrics once even
    if the task is retried.  A small job costs 0.3 to 0.7 s on a 2-core
    machine, planning and scheduling included.
    """
    obs = Observation()
    return df.observe(obs, *[value.alias(name) for name, value in metrics.items()]), obs


def _job_group(stage: str) -> tuple[str, str]:
    """The job group id and description of pipeline stage ``stage``'s jobs."""
    return f"lsh-spark:{stage}", f"lsh-spark stage {stage}"


class Timer:
    """Wall-clock seconds per named stage, for the report.

    With a session, each section also names the Spark jobs it starts (job group
    ``lsh-spark:<name>``, kept until the next section), so the Spark UI and the
    event log attribute every job and its shuffle volume to a pipeline stage.
    """

    def __init__(self, spark: SparkSession | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.spark = spark

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self.spark is not None:
            self.spark.sparkContext.setJobGroup(*_job_group(name))
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 3)


def _read(spark: SparkSession, out: Output, name: str) -> DataFrame:
    return out.read(name)


def _restore_id_col(df: DataFrame, cfg: DedupConfig, derived: bool) -> DataFrame:
    """Give the user's id column its own name back in ``deduped/``."""
    if derived or cfg.id_col == "id":
        return df
    df = df.withColumnRenamed("id", cfg.id_col)
    return df.withColumnRenamed("_input_id", "id") if "_input_id" in df.columns else df


def stage_signatures(spark: SparkSession, input_path: str, out: Output, cfg: DedupConfig,
                     packed: bool = False, check_ids: bool = True) -> dict[str, Any]:
    """Read, validate, normalize, shingle, MinHash (or SimHash; vectors: project).

    Writes ``shingles/`` (vectors: ``vectors/``), ``signatures/`` and ``rejects/``.
    ``packed``: MinHash on word shingles writes each
    shingle set to ``shingles/`` as one ``binary`` value
    (:func:`lsh_spark.shingle.pack_shingles`) instead of ``array<bigint>``; for
    a run that deletes ``shingles/`` after verifying (:func:`run_dedup`).
    ``check_ids=False`` (not for the vector methods, which always check the
    ids of ``vectors/`` here): the ids are not checked here; the caller starts
    :func:`start_id_check` itself and aborts the whole output if it fails
    (:func:`run_dedup`, which runs it beside the candidate stage).
    """
    if cfg.method in VECTOR_METHODS:
        return stage_vector_signatures(spark, input_path, out, cfg)
    timer = Timer(spark)
    # One pass over the input writes every record's features (rejected ones
    # with a reason and null shingles); signatures and rejects are derived
    # from that Parquet, and verification reads the shingle sets from it
    # instead of re-reading and re-normalizing the input.
    fused = cfg.method == "minhash" and cfg.shingle == "word"
    with timer("read"):
        raw, facts = read_corpus(spark, input_path, cfg)
    with timer("signatures"):
        if fused:
            # Normalize, shingle, fingerprint and MinHash in one Python pass.
            features = word_minhash_features(
                checked_texts(raw, cfg.text_col, cfg.max_text_chars, binary=False,
                              passed_len=False),
                cfg.shingle_k, cfg.seed, cfg.num_perm, packed=packed)
        else:
            prepared = prepare(raw, cfg.text_col, cfg.max_text_chars)
            ok = F.col("reason").isNull()
            tf = cfg.method == "simhash" and cfg.simhash.simhash_weight == "tf"
            features = add_shingles(prepared.select(
                "id", "text_len", "reason",
                F.when(ok, text_hash(F.col("norm"), cfg.seed)).alias("text_hash"),
                F.when(ok, F.col("norm")).alias("norm"),
            ), cfg.shingle, cfg.shingle_k, cfg.seed,
                all_out="shingle_list" if tf else None).drop("norm")
        # The fused pass also counts the accepted documents' shingles: an upper
        # bound of what verification reads (see stage_verify).
        features, seen = _record_counts(features, shingles=fused)
        out.write(features, "shingles", **SCRATCH_PARQUET)
        feats = _read(spark, out, "shingles")
        # The ids are checked on the written Parquet, beside the two writes
        # below; if they repeat, all three datasets are deleted.
        ids_checked = start_id_check(spark, feats) if check_ids else None
        ok = F.col("reason").isNull()
        try:
            if fused:
                out.write(feats.filter(ok).select(
                    "id", "signature", "num_shingles", "text_hash", "text_len"), "signatures",
                    **SIGNATURE_PARQUET)
            elif cfg.method == "simhash":
                sigs = add_simhash(feats.filter(ok).select(
                    "id", "shingle_list" if tf else "shingles",
                    F.size("shingles").alias("num_shingles"), "text_hash", "text_len"),
                    "shingle_list" if tf else "shingles")
                out.write(sigs, "signatures", **SIGNATURE_PARQUET)
            else:
                sigs = minhash(feats.filter(ok).drop("reason").select(
                    "id", "text_len", "text_hash", "shingles"), cfg.num_perm, cfg.seed)
                out.write(sigs.select("id", "signature", "num_shingles", "text_hash",
                                      "text_len"), "signatures", **SIGNATURE_PARQUET)
            out.write(feats.filter(~ok).select("id", "reason"), "rejects")
        finally:
            # Waited for even when a write failed: no job of this stage is
            # left running behind the error.
            try:
                if ids_checked is not None:
                    ids_checked.result()
            except InputError:
                for name in ("shingles", "signatures", "rejects"):
                    out.fs.delete(out.path(name))
                raise
    return dict(_signature_counts(spark, out, facts, seen.get), seconds=timer.seconds)


def start_id_check(spark: SparkSession, records: DataFrame) -> Future[None]:
    """Check in a background job that the ids of ``records`` (``shingles/`` as
    read back: every record read, rejected ones included) are unique; the
    future raises :class:`InputError` naming repeated ones."""
    return in_background(spark, "lsh-spark-id-check", *_job_group("signatures"),
                         lambda: check_unique_ids(records))


def _checked_ids(spark: SparkSession, out: Output, name: str) -> DataFrame:
    """Read back the first dataset of a run and check its ids are unique.

    Ids are checked on the written Parquet (one column) rather than by a
    separate parse of the input; the dataset is deleted, and nothing is
    committed, if they repeat.
    """
    df = _read(spark, out, name)
    try:
        check_unique_ids(df)
    except InputError:
        out.fs.delete(out.path(name))
        raise
    return df


def _record_counts(features: DataFrame, shingles: bool = False
                   ) -> tuple[DataFrame, Observation]:
    """Every input record's features (rejected ones with a ``reason``), observed:
    ``records`` and ``rejected`` come with the write (see :func:`observed`);
    ``shingles``: also the total ``num_shingles`` of the accepted records."""
    metrics = {"records": F.count(F.lit(1)), "rejected": F.count("reason")}
    if shingles:
        metrics["shingles"] = F.sum(F.when(F.col("reason").isNull(), F.col("num_shingles")))
    return observed(features, **metrics)


def _signature_counts(spark: SparkSession, out: Output, facts: dict[str, Any],
                      seen: dict[str, int]) -> dict[str, Any]:
    """The report's counts, from ``seen`` (:func:`_record_counts`) and, when some
    records were rejected, one small aggregation of ``rejects/`` by reason code."""
    rejected = int(seen["rejected"])
    by_reason: dict[str, int] = {}
    if rejected:
        codes = (_read(spark, out, "rejects")
                 .select(F.split("reason", ":").getItem(0).alias("code"))
                 .groupBy("code").agg(F.count(F.lit(1)).alias("n")).collect())
        by_reason = {r["code"]: r["n"] for r in codes}
    accepted = int(seen["records"]) - rejected
    counts = {"input_records": accepted + rejected, "accepted": accepted, "rejected": rejected}
    if "shingles" in seen:
        counts["accepted_shingles"] = int(seen["shingles"] or 0)
    return {
        "input": dict(facts, records=accepted + rejected),
        "counts": counts,
        "rejects_by_reason": by_reason,
    }


def stage_vector_signatures(spark: SparkSession, input_path: str, out: Output,
                            cfg: DedupConfig) -> dict[str, Any]:
    """Vectors: validate, project (hyperplane bits or p-stable buckets).

    Writes ``vectors/`` (``id``, ``vector`` as ``array<double>``, ``reason``),
    ``signatures/`` and ``rejects/``.  The dimension is the most common vector
    length of the input; vectors of another length are rejected.
    """
    timer = Timer(spark)
    with timer("read"):
        raw, facts = read_corpus(spark, input_path, cfg)
    with timer("signatures"):
        v = as_double_array(F.col(cfg.vectors.vector_col),
                            raw.schema[cfg.vectors.vector_col].dataType)
        vecs = raw.select("id", v.alias("vector"), "reject_reason")
        top = (vecs.filter(F.col("vector").isNotNull()).groupBy(F.size("vector").alias("n"))
               .count().orderBy(F.col("count").desc(), "n").first())
        dim = int(top["n"]) if top else 1
        reason = F.coalesce(F.col("reject_reason"),
                            vector_rejects(F.col("vector"), dim, cfg.method == "hyperplane"))
        vectors, seen = _record_counts(vecs.select("id", "vector", reason.alias("reason")))
        out.write(vectors, "vectors")
        vecs = _checked_ids(spark, out, "vectors")
        ok = vecs.filter(F.col("reason").isNull())
        sigs = add_vector_signatures(ok, cfg.method, dim, cfg.num_perm, cfg.seed, cfg.vectors.width)
        # Identical vectors share a 32-byte digest: the exact-duplicate key.
        digest = F.unhex(F.sha2(F.concat_ws(",", F.col("vector").cast("array<string>")), 256))
        out.write(sigs.join(ok.select("id", digest.alias("text_hash"),
                                      F.lit(cfg.num_perm).alias("num_shingles"),
                                      F.lit(None).cast("int").alias("text_len")), "id"),
                  "signatures", **SIGNATURE_PARQUET)
        out.write(vecs.filter(F.col("reason").isNotNull()).select("id", "reason"), "rejects")
    section = _signature_counts(spark, out, dict(facts, dimension=dim), seen.get)
    return dict(section, seconds=timer.seconds)


def stage_candidates(spark: SparkSession, out: Output, cfg: DedupConfig,
                     documents: int | None = None) -> dict[str, Any]:
    """Band keys and bucket grouping: writes ``candidates/`` (pairs) and ``blocks/``.

    ``documents``: the number of rows of ``signatures/`` when the caller knows
    it (counted here otherwise).
    """
    timer = Timer(spark)
    b, r = cfg.band_params()
    sigs = _read(spark, out, "signatures")
    # Block verification is a Jaccard matrix product: MinHash only.
    block_min = cfg.block_min_size if cfg.method == "minhash" else None
    with timer("candidates"):
        if cfg.method == "simhash":
            rows = explode_tables(sigs, cfg.simhash.max_hamming, cfg.simhash.blocks, "text_hash")
            b = math.comb(cfg.simhash.blocks, cfg.simhash.max_hamming)
        else:
            rows = explode_bands(sigs, b, r, "text_hash")
        buckets = bucket_members(rows).persist()
        try:
            pairs, seen_pairs = observed(
                candidate_pairs(buckets, cfg.max_bucket_size, block_min), pairs=F.count(F.lit(1)))
            out.write(pairs, "candidates")
            size = F.col("size").cast("long")
            blocks, seen_blocks = observed(
                candidate_blocks(buckets, cfg.max_bucket_size, block_min),
                blocks=F.count(F.lit(1)), members=F.sum(size),
                pairs=F.sum(size * (size - 1) / 2))
            # The report's bucket counts: a small job over the cached buckets,
            # beside the blocks' write.
            summarized = in_background(
                spark, "lsh-spark-bucket-summary", *_job_group("candidates"),
                lambda: bucket_summary(buckets, cfg.max_bucket_size))
            try:
                out.write(blocks, "blocks")
            finally:
                summary = summarized.result()
        finally:
            buckets.unpersist()
    n_cands, blk = seen_pairs.get["pairs"], seen_blocks.get
    if documents is None:
        documents = sigs.count()
    summary.update({
        "block_min_size": cfg.block_min_size,
        "blocks": int(blk["blocks"] or 0),
        "block_members": int(blk["members"] or 0),
        "block_pairs": int(blk["pairs"] or 0),
    })
    return {
        "banding": banding_section(cfg),
        "buckets": summary,
        # Candidate pairs: pair rows plus every pair inside a block (a pair in
        # several blocks counted once per block).  A family written as a
        # spanning forest computes fewer of them (see block_forest).
        "counts": {"band_rows": documents * b,
                   "candidate_pairs": n_cands + int(blk["pairs"] or 0)},
        "seconds": timer.seconds,
    }


def banding_section(cfg: DedupConfig) -> dict[str, Any]:
    """The report's description of how candidates are formed, with the S-curve:
    the probability that a pair becomes a candidate, by similarity (or distance)."""
    if cfg.method == "simhash":
        bounds = block_bounds(cfg.simhash.blocks)
        return {
            "method": "simhash", "max_hamming": cfg.simhash.max_hamming,
            "blocks": cfg.simhash.blocks,
            "tables": math.comb(cfg.simhash.blocks, cfg.simhash.max_hamming),
            "key_bits": sorted({sum(w for _, w in c) for c in
                                combinations(bounds,
                                             cfg.simhash.blocks - cfg.simhash.max_hamming)}),
            "guarantee": f"every pair within Hamming distance {cfg.simhash.max_hamming} "
                         "shares a key",
        }
    b, r = cfg.band_params()
    section = {
        "method": cfg.method, "bands": b, "rows": r, "num_perm": cfg.num_perm,
        "chosen_by": "user" if cfg.bands or cfg.rows else
        f"recall-biased default: P(threshold) >= {cfg.target_recall}",
        "row_probability_at_threshold": cfg.row_probability(),
        "candidate_probability_at_threshold": candidate_probability(cfg.row_probability(), b, r),
    }
    if cfg.method == "minhash":
        section["s_curve"] = s_curve(b, r)
    elif cfg.method == "hyperplane":
        section["s_curve"] = [{"cosine": p["s"], "p": candidate_probability(
            cfg.row_probability(p["s"]), b, r)} for p in s_curve(b, r)]
    else:
        top = 3 * float(cfg.vectors.max_distance)
        section["bucket_width"] = cfg.vectors.width
        section["s_curve"] = [{"distance": round(top * i / 20, 6), "p": candidate_probability(
            cfg.row_probability(top * i / 20), b, r)} for i in range(21)]
    return section


def _only(shingles: DataFrame, ids: DataFrame, n_ids: int | None = None) -> DataFrame:
    """``shingles`` of the documents in ``ids`` (a persisted id list of ``n_ids``
    rows, counted here when not given).

    Up to ``BROADCAST_ID_ROWS`` ids are broadcast, so the shingle table is
    filtered where it is read instead of shuffled whole to meet them; a longer
    id list (a corpus of hundreds of millions) takes the shuffle join.
    """
    if (ids.count() if n_ids is None else n_ids) <= BROADCAST_ID_ROWS:
        ids = F.broadcast(ids)
    return shingles.join(ids, "id", "left_semi")


def stage_verify(spark: SparkSession, out: Output, cfg: DedupConfig,
                 block_members: int | None = None, documents: int | None = None,
                 shingles: int | None = None) -> dict[str, Any]:
    """Exact Jaccard of every candidate, plus exact-duplicate edges: writes ``pairs/``.

    For the other methods, the method's exact measure (:func:`stage_verify_measure`).
    ``block_members``: the total of the block sizes in ``blocks/`` when the
    caller knows it (the candidate stage's ``buckets.block_members``); the
    block groups are then planned before the sizing job, which also computes
    how their verification is shared out, instead of a second small job.
    ``documents`` and ``shingles``: the accepted documents and their shingles
    when the caller knows them (the signature stage's ``counts``).  With all
    three given and the shingles of every document small enough to broadcast
    (:func:`_sized_by_bounds`), no sizing job runs at all: see there.
    """
    if cfg.method != "minhash":
        return stage_verify_measure(spark, out, cfg)
    timer = Timer(spark)
    cands = _read(spark, out, "candidates")
    blocks = _read(spark, out, "blocks")
    sigs = _read(spark, out, "signatures")
    all_shingles = _read(spark, out, "shingles").filter(F.col("shingles").isNotNull())
    by_bounds = _sized_by_bounds(block_members, documents, shingles)
    with timer("verify"):
        memberships = block_memberships(blocks).persist(StorageLevel.MEMORY_AND_DISK)
        # Read twice below (its ids, then the pairs themselves): computed once.
        cands = drop_block_pairs(cands, memberships).persist(StorageLevel.MEMORY_AND_DISK)
        pair_ids = candidate_ids(cands).persist(StorageLevel.MEMORY_AND_DISK)
        groups = None
        block_work = verify_module.block_work(None)
        # Read by the sizing job, the pair expansion, the block tasks' copies
        # and the pairs of identical texts: computed once.
        dups = DuplicateGroups(sigs, cfg.max_bucket_size).persist()

        def plan_groups(n_edges: int) -> DataFrame:
            # Read twice (the number of tasks, then the tasks): computed once.
            return block_groups(blocks, memberships, cfg.max_bucket_size, n_edges=n_edges,
                                max_family_size=cfg.max_family_size).persist(
                StorageLevel.MEMORY_AND_DISK)

        if block_members:
            groups = plan_groups(block_members)
        if by_bounds:
            # Every count below is at most the accepted documents (shingles).
            assert documents is not None
            dups.plan_for(documents)
            sizes = {"pair_docs": documents, "block_docs": documents if block_members else 0}
            broadcast = True
        else:
            # One small job sizes everything below: the pair candidates'
            # documents and shingles (from signatures/), the block members
            # and memberships, the groups of identical texts and, with groups
            # planned, how their verification is shared out.
            sizing = (sigs.join(pair_ids, "id", "left_semi")
                      .agg(F.count(F.lit(1)).alias("pair_docs"),
                           F.sum("num_shingles").alias("pair_shingles"))
                      .crossJoin(memberships.agg(
                          F.count(F.lit(1)).alias("block_docs"),
                          F.sum(F.size("in_blocks")).alias("block_edges")))
                      .crossJoin(dups.stats_frame()))
            if groups is not None:
                sizing = sizing.crossJoin(verify_module.block_work_frame(groups))
            sizes = sizing.first()
            dups.stats(sizes)
            # Shingles of the pair candidates only, read once (both sides of
            # every pair need them) and broadcast when they are small.
            est_bytes = 8 * int(sizes["pair_shingles"] or 0) + 64 * int(sizes["pair_docs"])
            broadcast = est_bytes <= BROADCAST_SHINGLE_BYTES
        shingles_df = _only(all_shingles, pair_ids, int(sizes["pair_docs"])).select(
            "id", "shingles")
        if not broadcast:
            # Both sides of the shuffle joins read it: computed once.  A
            # broadcast reads it once anyway (both sides reuse its exchange),
            # and a cached copy would only add a second one to the heap.
            shingles_df = shingles_df.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            near = verify_pairs(cands, shingles_df, cfg.threshold, broadcast=broadcast)
            # Pairs of representatives; every copy of a text gets its
            # representative's pairs: near pairs by two joins, block pairs in
            # the block tasks (no join per block pair).
            found = dups.expand(near, BROADCAST_ID_ROWS)
            if sizes["block_docs"]:  # no blocks, no second read of shingles/
                share_partitions = None
                if groups is None:  # block_members not given: a second small job
                    groups = plan_groups(int(sizes["block_edges"]))
                    block_work = verify_module.block_work(groups)
                elif by_bounds:
                    # How many tasks the split groups take is counted after
                    # the write; their shares are spread over the shuffle
                    # partitions instead.
                    share_partitions = _shuffle_partitions(spark)
                else:
                    block_work = verify_module.block_work_of(sizes)
                member_shingles = _only(all_shingles, memberships.select("id"),
                                        int(sizes["block_docs"]))
                found = found.unionByName(verify_blocks(
                    blocks, memberships, member_shingles,
                    cfg.threshold, cfg.max_bucket_size, groups=groups,
                    work=None if share_partitions else block_work,
                    share_partitions=share_partitions,
                    copies=dups.copies(BROADCAST_ID_ROWS)))
            pairs, seen = observed(
                found.unionByName(dups.pairs()),
                **_histogram_metrics(_twentieth(F.col("jaccard")), 20,
                                     first=_twentieth_of(cfg.threshold)),
                exact=F.count(F.when(F.col("jaccard") >= 1.0, 1)))
            out.write(pairs, "pairs")
            if by_bounds:
                # The report's figures, from the tables the write cached.
                stats = dups.stats_frame()
                if groups is not None:
                    stats = stats.crossJoin(verify_module.block_work_frame(groups))
                row = stats.first()
                dups.stats(row)
                if groups is not None:
                    block_work = verify_module.block_work_of(row)
        finally:
            if groups is not None:
                groups.unpersist()
            dups.unpersist()
            shingles_df.unpersist()
            pair_ids.unpersist()
            cands.unpersist()
            memberships.unpersist()
    # The histogram bins also give the total.
    bins = _histogram(seen.get)
    return {
        "counts": {"verified_pairs": sum(n for _, n in bins),
                   "pairs_with_jaccard_1": int(seen.get["exact"])},
        "block_verification": {**block_work, "max_family_size": cfg.max_family_size},
        "exact_duplicates": dups.stats(),
        "jaccard_histogram": [{"from": round(b / 20, 2), "pairs": n} for b, n in bins],
        "verify_sizing": "bounds" if by_bounds else "job",
        "seconds": timer.seconds,
    }


def _shuffle_partitions(spark: SparkSession) -> int:
    """The session's ``spark.sql.shuffle.partitions`` (as :func:`lsh_spark.session.
    size_shuffle_partitions` set it, or the user), or the default parallelism
    where it is not a number."""
    value = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        return max(1, int(value))
    except (TypeError, ValueError):
        return max(1, spark.sparkContext.defaultParallelism)


def _sized_by_bounds(block_members: int | None, documents: int | None,
                     shingles: int | None) -> bool:
    """Whether verification can be planned from the earlier stages' counts alone.

    The sizing job of :func:`stage_verify` counts what its plan depends on:
    the pair candidates' documents and shingles (broadcast or shuffled), the
    block members, the groups of identical texts and how many tasks the
    block groups take.  When the shingles of *every* accepted document would
    fit in a broadcast (``8 * shingles + 64 * documents`` bytes at most
    ``BROADCAST_SHINGLE_BYTES``, and at most ``BROADCAST_ID_ROWS`` documents),
    those counts are bounded by the signature stage's: the candidates'
    shingles are broadcast, the id lists too, the copies of identical texts
    are joined whether or not there are any, and the shares of split block
    groups are spread over the shuffle partitions.  The report's figures
    come from one small query after the write, over tables the write cached.
    On the 40,000-document corpus of the README the sizing query's five jobs
    before the write are gone, and the report's query takes two small ones.
    """
    if block_members is None or documents is None or shingles is None:
        return False
    return (8 * shingles + 64 * documents <= BROADCAST_SHINGLE_BYTES
            and documents <= BROADCAST_ID_ROWS)


def _twentieth(value: Column) -> Column:
    """The bin of a value in [0, 1] among 20 of width 0.05 (1.0 in the last)."""
    return F.least(F.floor(value * 20), F.lit(19))


def _twentieth_of(threshold: float) -> int:
    """The bin :func:`_twentieth` gives ``threshold`` (the same double arithmetic):
    no value at or above the threshold falls in a lower bin."""
    return max(0, min(math.floor(float(threshold) * 20), 19))


def _histogram_metrics(key: Column, bins: int, first: int = 0) -> dict[str, Column]:
    """Observation metrics ``bin<first> .. bin<bins-1>``: rows whose integer ``key``
    is each bin (the caller's key stays within ``first .. bins - 1``).

    Each metric is an aggregate evaluated on every written row, so bins that no
    row can reach (below the threshold's) are left out: 4 instead of 20 for
    Jaccard at 0.8, which matters when ``pairs/`` has tens of millions of rows.
    """
    return {f"bin{b}": F.count(F.when(key == b, 1)) for b in range(first, bins)}


def _histogram(metrics: dict[str, Any]) -> list[tuple[int, int]]:
    """``(bin, count)`` of the non-empty bins of :func:`_histogram_metrics`, in order."""
    counts = sorted((int(k[3:]), int(v)) for k, v in metrics.items() if k.startswith("bin"))
    return [(b, n) for b, n in counts if n]


def stage_verify_measure(spark: SparkSession, out: Output, cfg: DedupConfig
                         ) -> dict[str, Any]:
    """Exact Hamming distance (simhash), cosine (hyperplane) or Euclidean distance
    (pstable) of every candidate; pairs within the bound, plus exact duplicates
    (same text or same vector), go to ``pairs/`` (``id_a``, ``id_b``, measure)."""
    timer = Timer(spark)
    cands = _read(spark, out, "candidates")
    sigs = _read(spark, out, "signatures")
    measure = cfg.measure
    first = 0
    if cfg.method == "simhash":
        key, scale, n_bins = F.col(measure), 1.0, cfg.simhash.max_hamming + 1
    elif cfg.method == "hyperplane":
        key, scale, n_bins = _twentieth(F.col(measure)), 20.0, 20
        first = _twentieth_of(cfg.threshold)  # cosine >= threshold
    else:
        step = float(cfg.vectors.max_distance) / 20
        key, scale, n_bins = F.least(F.floor(F.col(measure) / F.lit(step)), F.lit(19)), 1 / step, 20

    def write_pairs(pairs: DataFrame) -> Observation:
        # The histogram of the measure comes with the write.
        pairs, seen = observed(pairs, **_histogram_metrics(key, n_bins, first))
        out.write(pairs, "pairs")
        return seen

    with timer("verify"):
        # Candidates join group representatives of identical texts (or vectors);
        # every copy gets its representative's pairs, and the copies their own.
        dups = DuplicateGroups(sigs, cfg.max_bucket_size).persist()
        try:
            def with_copies(near: DataFrame, **same: Any) -> DataFrame:
                copies = dups.pairs(measure, same.pop(measure))
                for name, value in same.items():
                    copies = copies.withColumn(name, F.lit(value))
                return dups.expand(near, BROADCAST_ID_ROWS).unionByName(copies)

            if cfg.method == "simhash":
                value = hamming(F.col("simhash_a"), F.col("simhash_b"))
                near = (join_sides(cands, sigs, "simhash")
                        .select("id_a", "id_b", value.alias(measure))
                        .filter(F.col(measure) <= cfg.simhash.max_hamming))
                if cfg.simhash.verify_jaccard:
                    ids = candidate_ids(near).persist(StorageLevel.MEMORY_AND_DISK)
                    try:
                        sh = _only(_read(spark, out, "shingles").filter(
                            F.col("shingles").isNotNull()), ids).select("id", "shingles")
                        near = verify_module.similar(join_sides(near, sh, "shingles"),
                                                     ["id_a", "id_b", measure], cfg.threshold)
                        seen = write_pairs(with_copies(near, **{measure: 0, "jaccard": 1.0}))
                    finally:
                        ids.unpersist()
                else:
                    seen = write_pairs(with_copies(near, **{measure: 0}))
            else:
                vec = _read(spark, out, "vectors").filter(F.col("reason").isNull())
                ids = candidate_ids(cands).persist(StorageLevel.MEMORY_AND_DISK)
                try:
                    needed = _only(vec, ids).select("id", "vector")
                    fn = cosine if cfg.method == "hyperplane" else distance
                    if cfg.method == "hyperplane":
                        def ok(v: Column) -> Column:
                            return v >= F.lit(float(cfg.threshold))
                    else:
                        def ok(v: Column) -> Column:
                            return v <= F.lit(float(cfg.vectors.max_distance))
                    near = verify_module.kept_where(
                        join_sides(cands, needed, "vector"), ["id_a", "id_b"],
                        fn(F.col("vector_a"), F.col("vector_b")), measure, ok)
                    same = 1.0 if cfg.method == "hyperplane" else 0.0
                    seen = write_pairs(with_copies(near, **{measure: same}))
                finally:
                    ids.unpersist()
        finally:
            dups.unpersist()
    bins = _histogram(seen.get)
    return {
        "counts": {"verified_pairs": sum(n for _, n in bins)},
        "exact_duplicates": dups.stats(),
        f"{measure}_histogram": [{"from": round(b / scale, 6), "pairs": n} for b, n in bins],
        "seconds": timer.seconds,
    }


def stage_cluster(spark: SparkSession, input_path: str, out: Output, cfg: DedupConfig,
                  n_pairs: int | None = None) -> dict[str, Any]:
    """Connected components and the keep policy: writes ``clusters/`` and ``deduped/``.

    ``n_pairs``: the number of rows of ``pairs/`` when the caller knows it.
    """
    timer = Timer(spark)
    pairs = _read(spark, out, "pairs")
    sigs = _read(spark, out, "signatures")
    with timer("cluster"):
        clusters = connected_components(pairs, sigs.select("id"), cfg.max_cc_iterations,
                                        n_edges=n_pairs)
        clusters = apply_keep_policy(clusters, sigs.select("id", "text_len"), cfg.keep)
        dup = F.col("cluster_size") > 1
        # Exactly one document of each cluster is kept: kept documents count clusters.
        clusters, seen = observed(
            clusters, docs=F.count(F.lit(1)), in_dup=F.count(F.when(dup, 1)),
            kept=F.count(F.when(F.col("keep"), 1)),
            largest=F.coalesce(F.max("cluster_size"), F.lit(0)),
            dup_clusters=F.count(F.when(dup & F.col("keep"), 1)))
        out.write(clusters, "clusters")
    clusters = _read(spark, out, "clusters")
    with timer("deduped"):
        raw, facts = read_corpus(spark, input_path, cfg)
        kept = clusters.filter("keep").select("id", "cluster_size")
        deduped = raw.join(kept, "id").drop("reject_reason")
        out.write(_restore_id_col(deduped, cfg, facts["derived_ids"]), "deduped")
    row = seen.get
    sizes = [
        {"cluster_size": r["cluster_size"], "clusters": r["n"]}
        for r in clusters.filter("keep").groupBy("cluster_size")
        .agg(F.count(F.lit(1)).alias("n")).orderBy("cluster_size").limit(50).collect()
    ]
    return {
        "counts": {
            "clustered_documents": row["docs"], "clusters": row["kept"],
            "duplicate_clusters": row["dup_clusters"],
            "documents_in_duplicate_clusters": row["in_dup"],
            "largest_cluster": row["largest"], "deduped_documents": row["kept"],
            "removed_documents": row["docs"] - row["kept"],
        },
        "cluster_size_histogram": sizes,
        "seconds": timer.seconds,
    }


def merge_reports(*sections: dict[str, Any]) -> dict[str, Any]:
    """Merge stage sections: dict values are merged key by key, others replaced."""
    merged: dict[str, Any] = {}
    for section in sections:
        for key, value in section.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return merged


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
        clusters = _read(spark, out, "clusters")
        rows = (clusters.filter(F.col("id").isin(centers))
                .select("cluster_id", "cluster_size").distinct()
                .orderBy(F.col("cluster_size").desc(), "cluster_id").collect())
    buckets["bounded_families"] = [
        {"cluster_id": r["cluster_id"], "cluster_size": r["cluster_size"],
         "note": "pairs/ holds the verified star edges of this family, not all its pairs"}
        for r in rows
    ]


def report_header(input_path: str, cfg: DedupConfig) -> dict[str, Any]:
    return {"lsh_spark_version": __version__, "input_path": input_path,
            "parameters": cfg.to_dict()}


def extract_crawl_input(spark: SparkSession, input_path: str, out: Output, cfg: DedupConfig
                        ) -> dict[str, Any]:
    """For WARC input, extract the pages once into ``extracted/`` of the output.

    Later reads of ``input_path`` in this process read that Parquet instead of
    parsing the crawl files again.  Returns the report's ``warc`` section
    (empty for other formats).
    """
    fmt = cfg.format or detect_format(input_files(spark, input_path))
    if fmt != "warc":
        return {}
    timer = Timer(spark)
    with timer("extract"):
        out.write(extract_warc(spark, input_path, cfg.text_col), "extracted")
        extracted = _read(spark, out, "extracted")
        register_extracted(input_path, out.path("extracted"))
        skipped = skipped_counts(extracted)
        records = extracted.count()
    return {"warc": {"records": records, "skipped": sum(skipped.values()),
                     "skipped_by_reason": skipped}, "seconds": timer.seconds}


def release_crawl_input(input_path: str, out: Output) -> None:
    register_extracted(input_path, None)
    out.fs.delete(out.path("extracted"))


def _s_curve_png(cfg: DedupConfig) -> bytes:
    from lsh_spark.advise import s_curve_png

    return s_curve_png(cfg)


def run_dedup(spark: SparkSession, input_path: str, output: str, cfg: DedupConfig,
              overwrite: bool = False) -> dict[str, Any]:
    """Run every stage into ``output`` atomically and return the report."""
    out = StagedOutput(spark, output, overwrite)
    started = time.perf_counter()
    # The S-curve depends on the configuration alone: it is drawn while the
    # driver waits on the first stages (SimHash's block tables have none).
    plotter = ThreadPoolExecutor(max_workers=1)
    s_curve = plotter.submit(_s_curve_png, cfg) if cfg.method != "simhash" else None
    plotter.shutdown(wait=False)
    try:
        partitions = size_shuffle_partitions(
            spark, FileSystem(spark, input_path).size_bytes(input_path))
        spark.sparkContext.setCheckpointDir(cfg.checkpoint_dir or out.path("_checkpoints"))
        crawl = extract_crawl_input(spark, input_path, out, cfg)
        # shingles/ is deleted before the commit: its sets travel packed.
        # The ids of shingles/ are checked beside the candidate stage, whose
        # planning leaves a core idle, instead of beside the signature stage's
        # writes, which it slowed; the output is aborted if they repeat.  (The
        # vector methods write vectors/ and check its ids in their own stage.)
        later = cfg.method not in VECTOR_METHODS
        signatures = stage_signatures(spark, input_path, out, cfg, packed=True,
                                      check_ids=not later)
        ids_checked = start_id_check(spark, _read(spark, out, "shingles")) if later else None
        try:
            candidates = stage_candidates(spark, out, cfg, signatures["counts"]["accepted"])
        finally:
            if ids_checked is not None:
                ids_checked.result()
        verified = stage_verify(spark, out, cfg,
                                block_members=candidates["buckets"].get("block_members"),
                                documents=signatures["counts"]["accepted"],
                                shingles=signatures["counts"].get("accepted_shingles"))
        report = merge_reports(
            report_header(input_path, cfg),
            crawl,
            signatures,
            candidates,
            verified,
            stage_cluster(spark, input_path, out, cfg, verified["counts"]["verified_pairs"]),
        )
        report["seconds"]["total"] = round(time.perf_counter() - started, 3)
        report["execution"] = {"shuffle_partitions": partitions,
                               "adaptive": adaptive_enabled(spark)}
        describe_bounded_families(spark, out, report)
        counts = report["counts"]
        if counts["clustered_documents"] + counts["rejected"] != counts["input_records"]:
            raise RuntimeError(
                "accounting error: clusters + rejects != input records "
                f"({counts['clustered_documents']} + {counts['rejected']} != "
                f"{counts['input_records']})")
        out.fs.delete(out.path("_checkpoints"))
        # Shingle sets are only needed up to verification; stage-by-stage runs
        # keep them (see the README).
        out.fs.delete(out.path("shingles"))
        release_crawl_input(input_path, out)
        out.write_json("report.json", report)
        if s_curve is not None:
            out.write_bytes("s_curve.png", s_curve.result())
        out.commit()
    except BaseException:
        register_extracted(input_path, None)
        out.abort()
        raise
    return report
