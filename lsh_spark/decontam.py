"""Decontamination: remove from a corpus what overlaps reference collections.

A reference collection (benchmark test sets, an earlier release, a licensed
corpus) is never deduplicated itself and never added to anything: only pairs
of an input document and a reference item are looked at.  Two kinds of
overlap are found, each exactly:

* **containment** (``--mode containment``): the share of a reference item's
  distinct word n-grams (``--ngram``, 13 by default, as in the GPT-3 paper's
  contamination analysis) that occur in a document.  Both sides are normalized as the
  dedup job normalizes (NFKC, casefold, punctuation to spaces), so a question
  copied with other case or quotes still matches.  An n-gram is Spark's
  seeded XXH64 chain of its token hashes (:func:`lsh_spark.shingle.kgram_hashes`).
  A reference item of m < n words is one m-gram, matched against the
  documents' m-grams (each such m is counted in the report).  The documents'
  n-grams are first semi-joined with the set of reference n-grams, broadcast
  when it is small (:data:`BROADCAST_REFERENCE_NGRAMS`) and shuffled when not,
  then joined with the items that hold them and counted per (document, item).
* **near-duplicates** (``--mode jaccard``): MinHash signatures and LSH bands
  of both sides, as the dedup job computes them; candidate pairs come only
  from buckets shared by an input document and a reference item, and each is
  verified by the exact Jaccard similarity of the two shingle sets.

Every input record ends in exactly one of ``clean/``, ``removed/`` (matched by
at least one reference item) and ``rejects/``; ``matches/`` names the matching
reference item of every removal.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lsh_spark.banding import explode_bands
from lsh_spark.config import ConfigError, DecontamConfig, DedupConfig, option_values
from lsh_spark.normalize import prepare
from lsh_spark.outputs import StagedOutput
from lsh_spark.readers import check_unique_ids, input_bytes, input_name, read_corpus
from lsh_spark.session import size_shuffle_partitions
from lsh_spark.shingle import add_shingles, kgram_hashes, token_hashes
from lsh_spark.signature import minhash
from lsh_spark.stages.common import Timer, restore_id_col

# Distinct reference n-grams up to which their set is broadcast to every task
# (an estimated 30 bytes each in Spark's hash relation: 120 MB at the limit); above it
# the documents' n-grams are shuffled against them instead.
BROADCAST_REFERENCE_NGRAMS = 4_000_000
# Reference band rows up to which they are broadcast in the candidate join.
BROADCAST_REFERENCE_BANDS = 4_000_000
# Score histograms: bins of this width from 0 to 1.
HISTOGRAM_BIN = 0.05
MATCH_COLUMNS = (
    "id",
    "reference_id",
    "reference_source",
    "kind",
    "score",
    "matched_ngrams",
)
# Datasets written for the run's own use and deleted before the commit.
SCRATCH = ("_input", "_reference")


@dataclass
class _Run:
    spark: SparkSession
    input_path: str | DataFrame
    out: StagedOutput
    cfg: DedupConfig
    dc: DecontamConfig
    timer: Timer


def run_decontaminate(
    spark: SparkSession,
    input_path: str | DataFrame,
    references: Sequence[str] | Mapping[str, str | DataFrame],
    output: str,
    cfg: DedupConfig,
    dc: DecontamConfig,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Find the input's overlap with ``references`` and write ``output`` atomically:
    ``matches/``, ``clean/``, ``removed/``, ``rejects/``, ``reference_rejects/``
    and ``report.json``.  Returns the report.

    The input is a path or a DataFrame (:func:`lsh_spark.readers.read_corpus`); the
    references are paths, or a mapping of names (``reference_source`` in the
    outputs) to paths or DataFrames.
    """
    started = time.perf_counter()
    if not isinstance(references, Mapping):
        references = {path: path for path in references}
    out = StagedOutput(spark, output, overwrite)
    run = _Run(spark, input_path, out, cfg, dc, Timer(spark))
    try:
        size_shuffle_partitions(spark, input_bytes(spark, input_path))
        with run.timer("read"):
            facts = _prepare_input(run, input_path)
            ref_counts = _prepare_references(run, references)
        joins = _find_matches(run)
        counts = _write_split(run, facts)
        report = _report(run, list(references), counts, ref_counts, joins)
        report["seconds"]["total"] = round(time.perf_counter() - started, 3)
        for name in SCRATCH:
            out.fs.delete(out.path(name))
        out.write_json("report.json", report)
        out.commit()
    except BaseException:
        out.abort()
        raise
    return report


# -- reading -------------------------------------------------------------------
def _prepare_input(run: _Run, path: str | DataFrame) -> dict[str, Any]:
    """``_input/``: every input record's ``id``, ``norm`` and reject ``reason``."""
    raw, facts = read_corpus(run.spark, path, run.cfg)
    check_unique_ids(raw)
    run.out.write(
        prepare(raw, run.cfg.text_col, run.cfg.max_text_chars, run.cfg.token_mode), "_input"
    )
    return facts


def _reference_config(cfg: DedupConfig, dc: DecontamConfig) -> DedupConfig:
    """How the references are read: the input's settings with the reference columns."""
    return DedupConfig(
        **{
            **cfg.flat(),
            "format": dc.reference_format,
            "id_col": dc.reference_id_col,
            "text_col": dc.reference_text_col,
            "schema": None,  # the references' own columns, inferred
        }
    )


def _prepare_references(
    run: _Run, sources: Mapping[str, str | DataFrame]
) -> dict[str, dict[str, int]]:
    """``_reference/``: ``(reference_source, reference_id, norm, words, reason)`` of every
    reference record, and ``reference_rejects/``; the counts per source name."""
    ref_cfg = _reference_config(run.cfg, run.dc)
    parts = []
    for name, source in sources.items():
        try:
            raw, _ = read_corpus(run.spark, source, ref_cfg)
        except ConfigError as exc:
            raise ConfigError(
                f"--reference {name}: {exc} (the references' columns and format are "
                "--reference-id-col, --reference-text-col, --reference-format)"
            ) from None
        prepared = prepare(raw, ref_cfg.text_col, ref_cfg.max_text_chars, ref_cfg.token_mode)
        parts.append(
            prepared.select(
                F.lit(name).alias("reference_source"),
                F.col("id").cast("string").alias("id"),
                "norm",
                "reason",
            )
        )
    refs = parts[0]
    for part in parts[1:]:
        refs = refs.unionByName(part)
    # An id must name one item of its source: repeated ids are all rejected.
    same_id = Window.partitionBy("reference_source", "id")
    repeats = F.count(F.lit(1)).over(same_id)
    reason = F.coalesce(
        F.col("reason"),
        F.when(
            F.col("id").isNotNull() & (repeats > 1),
            F.concat(F.lit("duplicate_id: "), repeats.cast("string"), F.lit(" records")),
        ),
    )
    refs = refs.select(
        "reference_source",
        F.col("id").alias("reference_id"),
        "norm",
        F.size(F.split("norm", " ")).alias("words"),
        reason.alias("reason"),
    )
    run.out.write(refs, "_reference")
    refs = run.out.read("_reference")
    rejected = refs.filter(F.col("reason").isNotNull())
    run.out.write(
        rejected.select("reference_source", "reference_id", "reason"), "reference_rejects"
    )
    n = run.dc.ngram
    rows = refs.groupBy("reference_source").agg(
        F.count(F.lit(1)).alias("records"),
        F.count("reason").alias("rejected"),
        F.count(F.when(F.col("reason").isNull() & (F.col("words") < n), 1)).alias("short_items"),
    )
    counts = {r["reference_source"]: r.asDict() for r in rows.collect()}
    return {n: counts.get(n, {"records": 0, "rejected": 0, "short_items": 0}) for n in sources}


def _accepted_references(run: _Run) -> DataFrame:
    return run.out.read("_reference").filter(F.col("reason").isNull()).drop("reason")


def _accepted_input(run: _Run) -> DataFrame:
    return run.out.read("_input").filter(F.col("reason").isNull()).select("id", "norm")


# -- matching ------------------------------------------------------------------
def _find_matches(run: _Run) -> dict[str, Any]:
    """Write ``matches/`` (containment and/or Jaccard); the join strategies chosen."""
    found, choices = [], {}
    if run.dc.mode in ("containment", "both"):
        with run.timer("containment"):
            matches, choices["containment"] = containment_matches(
                _accepted_input(run),
                _accepted_references(run),
                run.dc.ngram,
                run.dc.min_containment,
                run.cfg.seed,
            )
            found.append(matches)
    if run.dc.mode in ("jaccard", "both"):
        with run.timer("jaccard"):
            matches, choices["jaccard"] = jaccard_matches(
                _accepted_input(run), _accepted_references(run), run.cfg
            )
            found.append(matches)
    union = found[0]
    for more in found[1:]:
        union = union.unionByName(more)
    with run.timer("matches"):
        run.out.write(union.select(*MATCH_COLUMNS), "matches")
    return choices


def _ngrams(df: DataFrame, k: int, seed: int, key: tuple[str, ...]) -> DataFrame:
    """``key + (k, gram)``: one row per distinct word k-gram of ``norm``."""
    tokens = df.select(*key, token_hashes(F.col("norm"), seed).alias("_t"))
    grams = F.array_distinct(kgram_hashes(F.col("_t"), k, seed))
    return tokens.select(*key, F.lit(k).alias("k"), F.explode(grams).alias("gram"))


def containment_matches(
    docs: DataFrame, refs: DataFrame, n: int, min_containment: float, seed: int
) -> tuple[DataFrame, dict[str, Any]]:
    """``(id, norm)`` documents x ``(reference_source, reference_id, norm, words)``
    items -> the pairs where the document holds at least ``min_containment`` of the
    item's distinct word n-grams (an item of m < n words: its one m-gram), as
    :data:`MATCH_COLUMNS`; and how the n-grams were joined."""
    ref_key = ("reference_source", "reference_id")
    lengths = [n] + [
        r["words"] for r in refs.filter(F.col("words") < n).select("words").distinct().collect()
    ]
    ref_grams = None
    doc_grams = None
    for k in sorted(set(lengths)):
        sized = refs.filter(F.col("words") >= n) if k == n else refs.filter(F.col("words") == k)
        part = _ngrams(sized, k, seed, ref_key)
        ref_grams = part if ref_grams is None else ref_grams.unionByName(part)
        doc_part = _ngrams(docs, k, seed, ("id",))
        doc_grams = doc_part if doc_grams is None else doc_grams.unionByName(doc_part)
    ref_grams = ref_grams.localCheckpoint()
    distinct = ref_grams.select("k", "gram").distinct().localCheckpoint()
    n_grams = distinct.count()
    broadcast = n_grams <= BROADCAST_REFERENCE_NGRAMS
    present = doc_grams.join(
        F.broadcast(distinct) if broadcast else distinct, ["k", "gram"], "left_semi"
    )
    totals = ref_grams.groupBy(*ref_key).agg(F.count(F.lit(1)).alias("total"))
    counted = (
        present.join(ref_grams, ["k", "gram"])
        .groupBy("id", *ref_key)
        .agg(F.count(F.lit(1)).alias("matched_ngrams"))
        .join(totals, list(ref_key))
        .withColumn("score", F.col("matched_ngrams") / F.col("total"))
        .filter(F.col("score") >= F.lit(min_containment))
    )
    matches = counted.select(
        "id",
        "reference_id",
        "reference_source",
        F.lit("containment").alias("kind"),
        "score",
        "matched_ngrams",
    )
    choice = {
        "reference_ngrams": n_grams,
        "strategy": "broadcast" if broadcast else "shuffle",
        "broadcast_limit": BROADCAST_REFERENCE_NGRAMS,
        "ngram_lengths": sorted(set(lengths)),
    }
    return matches, choice


def jaccard_matches(
    docs: DataFrame, refs: DataFrame, cfg: DedupConfig
) -> tuple[DataFrame, dict[str, Any]]:
    """Input documents x reference items whose shingle sets have Jaccard >=
    ``cfg.threshold``: candidates from shared LSH buckets (input x reference
    only), each verified exactly; as :data:`MATCH_COLUMNS`, and the join used."""
    b, r = cfg.band_params()
    k, seed = cfg.shingle_k, cfg.seed
    doc_sets = add_shingles(docs, cfg.shingle, k, seed).select("id", "shingles").localCheckpoint()
    ref_sets = (
        add_shingles(refs, cfg.shingle, k, seed)
        .select("reference_source", "reference_id", "shingles")
        .localCheckpoint()
    )
    doc_bands = explode_bands(minhash(doc_sets, cfg.num_perm, seed), b, r)
    ref_sigs = minhash(ref_sets.withColumnRenamed("reference_id", "id"), cfg.num_perm, seed)
    ref_bands = (
        explode_bands(ref_sigs, b, r, "reference_source")
        .withColumnRenamed("id", "reference_id")
        .localCheckpoint()
    )
    n_bands = ref_bands.count()
    broadcast = n_bands <= BROADCAST_REFERENCE_BANDS
    candidates = (
        doc_bands.join(F.broadcast(ref_bands) if broadcast else ref_bands, ["band", "bucket"])
        .select("id", "reference_source", "reference_id")
        .distinct()
    )
    a, c = F.col("a.shingles"), F.col("c.shingles")
    shared = F.size(F.array_intersect(a, c))
    verified = (
        candidates.join(doc_sets.alias("a"), "id")
        .join(ref_sets.alias("c"), ["reference_source", "reference_id"])
        .select(
            "id",
            "reference_source",
            "reference_id",
            shared.alias("matched_ngrams"),
            (shared / (F.size(a) + F.size(c) - shared)).alias("score"),
        )
        .filter(F.col("score") >= F.lit(cfg.threshold))
    )
    matches = verified.select(
        "id",
        "reference_id",
        "reference_source",
        F.lit("jaccard").alias("kind"),
        "score",
        F.col("matched_ngrams").cast("long"),
    )
    return matches, {
        "reference_band_rows": n_bands,
        "strategy": "broadcast" if broadcast else "shuffle",
        "broadcast_limit": BROADCAST_REFERENCE_BANDS,
        "bands": b,
        "rows": r,
    }


# -- the split and the report -----------------------------------------------------
def _write_split(run: _Run, facts: dict[str, Any]) -> dict[str, int]:
    """``clean/``, ``removed/`` (the input records as read) and ``rejects/``; their counts."""
    with run.timer("split"):
        raw, _ = read_corpus(run.spark, run.input_path, run.cfg)
        records = raw.drop("reject_reason")
        prepared = run.out.read("_input")
        matched = run.out.read("matches").select("id").distinct()
        keep = (
            prepared.filter(F.col("reason").isNull()).select("id").join(matched, "id", "left_anti")
        )
        for name, ids in (("clean", keep), ("removed", matched)):
            kept = records.join(ids, "id", "left_semi")
            run.out.write(restore_id_col(kept, run.cfg, facts["derived_ids"]), name)
        run.out.write(
            prepared.filter(F.col("reason").isNotNull()).select("id", "reason"), "rejects"
        )
        counts = {name: run.out.read(name).count() for name in ("clean", "removed", "rejects")}
        counts["input_records"] = prepared.count()
    if counts["clean"] + counts["removed"] + counts["rejects"] != counts["input_records"]:
        raise RuntimeError(
            f"accounting error: clean {counts['clean']} + removed {counts['removed']} + "
            f"rejects {counts['rejects']} != {counts['input_records']} input records"
        )
    return counts


def _histograms(matches: DataFrame) -> dict[str, list[dict[str, Any]]]:
    """Matches per score bin (:data:`HISTOGRAM_BIN` wide), by kind."""
    bins = F.least(F.floor(F.col("score") / HISTOGRAM_BIN), F.lit(round(1 / HISTOGRAM_BIN) - 1))
    rows = matches.groupBy("kind", bins.alias("bin")).count().orderBy("kind", "bin").collect()
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["kind"], []).append(
            {"from": round(row["bin"] * HISTOGRAM_BIN, 2), "matches": row["count"]}
        )
    return out


def _by_reference(
    matches: DataFrame, ref_counts: dict[str, dict[str, int]]
) -> dict[str, dict[str, Any]]:
    """Per reference source: its records, rejects, short items, matches by kind and
    the input documents it removed."""
    per_kind = matches.groupBy("reference_source", "kind").count().collect()
    removed = matches.groupBy("reference_source").agg(F.countDistinct("id").alias("docs")).collect()
    out = {
        source: {
            "records": c["records"],
            "rejected": c["rejected"],
            "short_items": c["short_items"],
            "matches": {},
            "removed_documents": 0,
        }
        for source, c in ref_counts.items()
    }
    for row in per_kind:
        out[row["reference_source"]]["matches"][row["kind"]] = row["count"]
    for row in removed:
        out[row["reference_source"]]["removed_documents"] = row["docs"]
    return out


def _report(
    run: _Run,
    references: list[str],
    counts: dict[str, int],
    ref_counts: dict[str, dict[str, int]],
    joins: dict[str, Any],
) -> dict[str, Any]:
    matches = run.out.read("matches")
    by_kind = {r["kind"]: r["count"] for r in matches.groupBy("kind").count().collect()}
    return {
        "input_path": input_name(run.input_path),
        "references": references,
        "parameters": {**option_values(run.dc), **run.cfg.to_dict()},
        "counts": {
            "input_records": counts["input_records"],
            "rejected": counts["rejects"],
            "clean": counts["clean"],
            "removed": counts["removed"],
            "matches": by_kind,
        },
        "by_reference": _by_reference(matches, ref_counts),
        "score_histograms": _histograms(matches),
        "joins": joins,
        "seconds": dict(run.timer.seconds),
        "cpu_seconds": dict(run.timer.cpu),
    }
