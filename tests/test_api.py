"""The Python API as a notebook uses it: a DataFrame built in memory,
``find_duplicates``, ``Duplicates.remove``, ``decontaminate`` and the building
blocks, checked against the job's output on the sample corpus.  (Over Spark
Connect: tests/test_connect.py.)"""

from __future__ import annotations

import json
import os

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

import lsh_spark
from lsh_spark.config import DedupConfig
from lsh_spark.pipeline import run_dedup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")
SCHEMA = "id string, source string, text string"


def sample_rows() -> list[tuple]:
    with open(SAMPLE, encoding="utf-8") as fh:
        return [(r["id"], r["source"], r["text"]) for r in map(json.loads, fh)]


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    """``jobs/dedup.py``'s output on the sample (its code, in this session)."""
    out = str(tmp_path_factory.mktemp("job") / "dedup")
    run_dedup(spark, SAMPLE, out, DedupConfig())
    return out


@pytest.fixture(scope="module")
def found(spark, job, tmp_path_factory):
    docs = spark.createDataFrame(sample_rows(), SCHEMA)
    where = str(tmp_path_factory.mktemp("api") / "work")
    return docs, lsh_spark.find_duplicates(docs, threshold=0.8, workdir=where)


@pytest.mark.heavy
def test_find_duplicates_equals_the_job(spark, job, found):
    docs, dups = found
    for name, got in (("pairs", dups.pairs), ("clusters", dups.clusters)):
        want = spark.read.parquet(f"{job}/{name}")
        assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    deduped = spark.read.parquet(f"{job}/deduped").drop("cluster_size")
    assert_df_equality(
        dups.remove(docs, drop_rejects=True),
        deduped.select(*docs.columns),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    with open(f"{job}/report.json", encoding="utf-8") as fh:
        counts = json.load(fh)["counts"]
    assert dups.report["counts"] == counts
    assert dups.report["input_path"] == "DataFrame"
    assert not os.path.exists(f"{dups.workdir}/deduped")  # removed on demand only


@pytest.mark.heavy
def test_the_callers_session_settings_are_left_as_they_were(spark, found, tmp_path):
    keys = (
        "spark.sql.shuffle.partitions",
        "spark.sql.adaptive.enabled",
        "spark.sql.parquet.compression.codec",
        "spark.lsh_spark.filledIn",
    )
    before = {k: spark.conf.get(k, None) for k in keys}
    docs, _ = found
    lsh_spark.find_duplicates(docs.limit(40), workdir=str(tmp_path / "w"))
    assert {k: spark.conf.get(k, None) for k in keys} == before


def test_option_errors_are_python_errors(spark):
    docs = spark.createDataFrame([("a", "some text here")], "doc string, text string")
    with pytest.raises(ValueError, match=r"^threshold must be a number in \(0, 1\], got 1.5$"):
        lsh_spark.find_duplicates(docs, id_col="doc", threshold=1.5)
    with pytest.raises(ValueError, match=r"^keep must be one of min-id \| longest, got 'x'$"):
        lsh_spark.find_duplicates(docs, id_col="doc", keep="x")
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'num_perms'"):
        lsh_spark.find_duplicates(docs, id_col="doc", num_perms=64)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'format'"):
        lsh_spark.find_duplicates(docs, id_col="doc", format="jsonl")
    with pytest.raises(ValueError, match=r"^id_col: column 'id' not in input; columns: doc, text"):
        lsh_spark.find_duplicates(docs)


@pytest.mark.heavy
def test_decontaminate_dataframes(spark, tmp_path):
    question = "what is the boiling point of water at sea level in degrees celsius exactly"
    docs = spark.createDataFrame(
        [(1, f"intro text. {question}? answer 100."), (2, "a page about gardening and roses")],
        "id long, text string",
    )
    refs = spark.createDataFrame([("q1", question)], "id string, text string")
    got = lsh_spark.decontaminate(docs, {"bench": refs}, ngram=8, workdir=str(tmp_path / "w"))
    assert [r.id for r in got.removed.collect()] == [1]
    assert [r.id for r in got.clean.collect()] == [2]
    match = got.matches.first()
    assert (match.reference_source, match.reference_id) == ("bench", "q1")
    assert got.report["counts"]["removed"] == 1


def test_building_blocks_compose_with_transform(spark):
    texts = ["the quick brown fox jumps over the lazy dog", "completely unrelated words here"]
    df = spark.createDataFrame(
        [(i, t) for i, t in enumerate(texts + texts[:1])], "id long, text string"
    )
    sigs = df.transform(lsh_spark.shingles, k=3).transform(lsh_spark.minhash, num_perm=64)
    keys = sigs.transform(lsh_spark.band_keys, num_perm=64, threshold=0.8)
    shared = (
        keys.alias("a")
        .join(keys.alias("b"), ["band", "bucket"])
        .where(F.col("a.id") < F.col("b.id"))
        .select(F.col("a.id").alias("id_a"), F.col("b.id").alias("id_b"))
        .distinct()
    )
    assert [tuple(r) for r in shared.collect()] == [(0, 2)]
    clusters = shared.transform(lsh_spark.connected_components, vertices=df.select("id"))
    got = {r.id: (r.cluster_id, r.cluster_size) for r in clusters.collect()}
    assert got == {0: (0, 2), 1: (1, 1), 2: (0, 2)}
