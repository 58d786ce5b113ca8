"""Stage 1, signatures: read, validate, normalize, shingle and fingerprint every record.

Writes ``shingles/`` (the vector methods: ``vectors/``), ``signatures/`` and
``rejects/``.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lsh_spark.banding import buckets_column
from lsh_spark.config import VECTOR_METHODS, DedupConfig
from lsh_spark.features import word_minhash_features
from lsh_spark.normalize import checked_texts, prepare
from lsh_spark.readers import InputError, check_unique_ids, read_corpus
from lsh_spark.session import in_background, job_tag, tagged
from lsh_spark.shingle import add_shingles, text_hash
from lsh_spark.signature import minhash
from lsh_spark.simhash import add_simhash
from lsh_spark.stages.common import (
    SCRATCH_PARQUET,
    SIGNATURE_PARQUET,
    Observed,
    Output,
    Timer,
    longest_id,
    observed,
)
from lsh_spark.vectors import add_vector_signatures, as_double_array, vector_rejects

SIGNATURE_COLUMNS = ("id", "signature", "num_shingles", "text_hash", "text_len")


def stage_signatures(
    spark: SparkSession,
    input_path: str | DataFrame,
    out: Output,
    cfg: DedupConfig,
    packed: bool = False,
    check_ids: bool = True,
) -> dict[str, Any]:
    """Read, validate, normalize, shingle, MinHash (or SimHash; vectors: project).

    Writes ``shingles/`` (vectors: ``vectors/``), ``signatures/`` and ``rejects/``.

    Parameters
    ----------
    packed : MinHash on word shingles writes each shingle set to ``shingles/``
        as one ``binary`` value (:func:`lsh_spark.shingle.pack_shingles`)
        instead of ``array<bigint>``; for a run that deletes ``shingles/``
        after verifying (:func:`lsh_spark.pipeline.run_dedup`).
    check_ids : False (not for the vector methods, which always check the ids
        of ``vectors/`` here): the ids are not checked here; the caller starts
        :func:`start_id_check` itself and aborts the whole output if it fails.
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
        # The fused pass also counts the accepted documents' shingles: an upper
        # bound of what verification reads (see lsh_spark.stages.verify_plan).
        features, seen = _record_counts(_features(raw, cfg, packed), shingles=fused)
        out.write(features, "shingles", **SCRATCH_PARQUET)
        feats = out.read("shingles")
        # The ids are checked on the written Parquet, beside the two writes
        # below; if they repeat, all three datasets are deleted.
        ids_checked = start_id_check(spark, feats) if check_ids else None
        try:
            _write_signatures(feats, out, cfg)
        finally:
            # Waited for even when a write failed: no job of this stage is
            # left running behind the error.
            _await_id_check(ids_checked, out, ("shingles", "signatures", "rejects"))
    with tagged(spark, "signatures"):
        section = _signature_counts(out, facts, seen.result(out, "shingles"))
    return dict(section, seconds=timer.seconds, cpu_seconds=timer.cpu)


def _features(raw: DataFrame, cfg: DedupConfig, packed: bool) -> DataFrame:
    """Every record's ``id``, ``reason`` (null when accepted), text facts and shingles;
    MinHash on word shingles also its ``signature`` (one fused Python pass)."""
    if cfg.method == "minhash" and cfg.shingle == "word":
        texts = checked_texts(raw, cfg.text_col, cfg.max_text_chars, binary=False, passed_len=False)
        return word_minhash_features(
            texts,
            cfg.shingle_k,
            cfg.seed,
            cfg.num_perm,
            packed=packed,
            tokens=cfg.token_mode,
            bands=cfg.band_params(),
        )
    prepared = prepare(raw, cfg.text_col, cfg.max_text_chars, cfg.token_mode)
    ok = F.col("reason").isNull()
    tf = cfg.method == "simhash" and cfg.simhash.simhash_weight == "tf"
    return add_shingles(
        prepared.select(
            "id",
            "text_len",
            "reason",
            F.when(ok, text_hash(F.col("norm"), cfg.seed)).alias("text_hash"),
            F.when(ok, F.col("norm")).alias("norm"),
        ),
        cfg.shingle,
        cfg.shingle_k,
        cfg.seed,
        all_out="shingle_list" if tf else None,
    ).drop("norm")


def _write_signatures(feats: DataFrame, out: Output, cfg: DedupConfig) -> None:
    """``signatures/`` of the accepted records of ``feats`` and ``rejects/`` of the others."""
    ok = F.col("reason").isNull()
    accepted = feats.filter(ok)
    if cfg.method == "minhash" and cfg.shingle == "word":
        # The fused pass wrote each document's bucket keys, not its signature.
        keys = buckets_column(*cfg.band_params())
        sigs = accepted.select(*(keys if c == "signature" else c for c in SIGNATURE_COLUMNS))
    elif cfg.method == "simhash":
        weighted = "shingle_list" if cfg.simhash.simhash_weight == "tf" else "shingles"
        sigs = add_simhash(
            accepted.select(
                "id", weighted, F.size("shingles").alias("num_shingles"), "text_hash", "text_len"
            ),
            weighted,
        )
    else:
        sigs = minhash(
            accepted.drop("reason").select("id", "text_len", "text_hash", "shingles"),
            cfg.num_perm,
            cfg.seed,
        )
        sigs = sigs.select(*SIGNATURE_COLUMNS)
    out.write(sigs, "signatures", **SIGNATURE_PARQUET)
    out.write(feats.filter(~ok).select("id", "reason"), "rejects")


def start_id_check(spark: SparkSession, records: DataFrame) -> Future[None]:
    """Check in a background job that the ids of ``records`` (``shingles/`` as
    read back: every record read, rejected ones included) are unique; the
    future raises :class:`InputError` naming repeated ones."""
    return in_background(
        spark, "lsh-spark-id-check", job_tag("signatures"), lambda: check_unique_ids(records)
    )


def _await_id_check(
    ids_checked: Future[None] | None, out: Output, written: tuple[str, ...]
) -> None:
    """Wait for :func:`start_id_check`; if the ids repeat, delete ``written`` and raise."""
    if ids_checked is None:
        return
    try:
        ids_checked.result()
    except InputError:
        for name in written:
            out.fs.delete(out.path(name))
        raise


def _checked_ids(out: Output, name: str) -> DataFrame:
    """Read back the first dataset of a run and check its ids are unique.

    Ids are checked on the written Parquet (one column) rather than by a
    separate parse of the input; the dataset is deleted, and nothing is
    committed, if they repeat.
    """
    df = out.read(name)
    try:
        check_unique_ids(df)
    except InputError:
        out.fs.delete(out.path(name))
        raise
    return df


def _record_counts(features: DataFrame, shingles: bool = False) -> tuple[DataFrame, Observed]:
    """Every input record's features (rejected ones with a ``reason``), observed:
    ``records``, ``rejected`` and ``longest_id`` (UTF-8 bytes) come with the
    write (see :func:`observed`);
    ``shingles``: also the total ``num_shingles`` of the accepted records."""
    metrics = {
        "records": F.count(F.lit(1)),
        "rejected": F.count("reason"),
        "longest_id": longest_id(),
    }
    if shingles:
        metrics["shingles"] = F.sum(F.when(F.col("reason").isNull(), F.col("num_shingles")))
    return observed(features, **metrics)


def _signature_counts(out: Output, facts: dict[str, Any], seen: dict[str, int]) -> dict[str, Any]:
    """The report's counts, from ``seen`` (:func:`_record_counts`) and, when some
    records were rejected, one small aggregation of ``rejects/`` by reason code."""
    rejected = int(seen["rejected"])
    by_reason: dict[str, int] = {}
    if rejected:
        codes = (
            out.read("rejects")
            .select(F.split("reason", ":").getItem(0).alias("code"))
            .groupBy("code")
            .agg(F.count(F.lit(1)).alias("n"))
            .collect()
        )
        by_reason = {r["code"]: r["n"] for r in codes}
    accepted = int(seen["records"]) - rejected
    counts = {"input_records": accepted + rejected, "accepted": accepted, "rejected": rejected}
    if "shingles" in seen:
        counts["accepted_shingles"] = int(seen["shingles"] or 0)
    # The longest id in UTF-8 bytes: bounds the rows of the candidate stage.
    counts["longest_id_bytes"] = int(seen["longest_id"] or 0)
    return {
        "input": dict(facts, records=accepted + rejected),
        "counts": counts,
        "rejects_by_reason": by_reason,
    }


def stage_vector_signatures(
    spark: SparkSession, input_path: str | DataFrame, out: Output, cfg: DedupConfig
) -> dict[str, Any]:
    """Vectors: validate, project (hyperplane bits or p-stable buckets).

    Writes ``vectors/`` (``id``, ``vector`` as ``array<double>``, ``reason``),
    ``signatures/`` and ``rejects/``.  The dimension is the most common vector
    length of the input; vectors of another length are rejected.
    """
    timer = Timer(spark)
    with timer("read"):
        raw, facts = read_corpus(spark, input_path, cfg)
    with timer("signatures"):
        v = as_double_array(
            F.col(cfg.vectors.vector_col), raw.schema[cfg.vectors.vector_col].dataType
        )
        vecs = raw.select("id", v.alias("vector"), "reject_reason")
        top = (
            vecs.filter(F.col("vector").isNotNull())
            .groupBy(F.size("vector").alias("n"))
            .count()
            .orderBy(F.col("count").desc(), "n")
            .first()
        )
        dim = int(top["n"]) if top else 1
        reason = F.coalesce(
            F.col("reject_reason"), vector_rejects(F.col("vector"), dim, cfg.method == "hyperplane")
        )
        vectors, seen = _record_counts(vecs.select("id", "vector", reason.alias("reason")))
        out.write(vectors, "vectors")
        vecs = _checked_ids(out, "vectors")
        ok = vecs.filter(F.col("reason").isNull())
        sigs = add_vector_signatures(ok, cfg.method, dim, cfg.num_perm, cfg.seed, cfg.vectors.width)
        # Identical vectors share a 32-byte digest: the exact-duplicate key.
        digest = F.unhex(F.sha2(F.concat_ws(",", F.col("vector").cast("array<string>")), 256))
        out.write(
            sigs.join(
                ok.select(
                    "id",
                    digest.alias("text_hash"),
                    F.lit(cfg.num_perm).alias("num_shingles"),
                    F.lit(None).cast("int").alias("text_len"),
                ),
                "id",
            ),
            "signatures",
            **SIGNATURE_PARQUET,
        )
        out.write(vecs.filter(F.col("reason").isNotNull()).select("id", "reason"), "rejects")
    with tagged(spark, "signatures"):
        section = _signature_counts(out, dict(facts, dimension=dim), seen.result(out, "vectors"))
    return dict(section, seconds=timer.seconds, cpu_seconds=timer.cpu)
