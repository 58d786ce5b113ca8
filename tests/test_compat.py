"""Outputs of lsh-spark 0.2.0 (tests/data/v0.2.0) read by this release.

0.2.0 cut words at separators only (``--tokens space``); this release sets every
character of a script without spaces apart by default.  A crawl index of 0.2.0
must go on with its own words (never a batch shingled one way looked up against
documents shingled the other), or be refused with one line saying what to run;
``--tokens space`` must give 0.2.0's signatures, clusters and matches exactly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from lsh_spark import commands
from lsh_spark.banding import explode_bands
from lsh_spark.config import DedupConfig
from lsh_spark.crawl import run_crawl_batch
from lsh_spark.index import CrawlIndex, IndexError, doc_key, index_params

V020 = Path(__file__).resolve().parent / "data" / "v0.2.0"
# Documents of the corpus written in scripts without spaces.
SPLIT = {"ja-1", "ja-2", "ja-3", "zh-1", "zh-2", "th-1", "th-2", "mixed-1", "short-ja"}


def rows(spark, path, *cols):
    return sorted(tuple(r[c] for c in cols) for r in spark.read.parquet(str(path)).collect())


def bucket_keys_by_id(spark, path) -> dict[str, list[int]]:
    """Every document's bucket key of each band: the ``buckets`` this release
    writes to ``signatures/``, or those :func:`explode_bands` makes of the
    ``signature`` 0.2.0 wrote (the keys its crawl index holds), with the bands
    of the fixture run (16 of 6 rows)."""
    df = spark.read.parquet(str(path))
    keys: dict[str, list[int]] = {}
    for r in explode_bands(df, 16, 6).collect():
        keys.setdefault(r.id, [0] * 16)[r.band] = r.bucket
    return keys


def texts() -> dict[str, str]:
    lines = (V020 / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    return {d["id"]: d["text"] for d in map(json.loads, lines)}


@pytest.fixture(scope="module")
def dedup_runs(spark, tmp_path_factory):
    """The fixture corpus deduplicated by this release, with ``--tokens space`` and
    with the defaults."""
    root = tmp_path_factory.mktemp("compat")
    corpus = str(V020 / "corpus.jsonl")
    runs = {}
    for name, extra in (("space", ["--tokens", "space"]), ("default", [])):
        out = str(root / name)
        assert commands.dedup(["--input", corpus, "--output", out, *extra], spark) == 0
        runs[name] = out
    return runs


def test_the_fixtures_were_written_by_0_2_0():
    assert (V020 / "VERSION").read_text().strip() == "0.2.0"
    report = json.loads((V020 / "dedup" / "report.json").read_text())
    assert report["lsh_spark_version"] == "0.2.0" and "tokens" not in report["parameters"]


@pytest.mark.heavy
def test_space_tokens_give_the_signatures_clusters_and_pairs_of_0_2_0(spark, dedup_runs):
    out = dedup_runs["space"]
    # The signature pass now writes each document's bucket keys, not its
    # signature: they must be the keys 0.2.0's signatures give.
    new_keys = bucket_keys_by_id(spark, f"{out}/signatures")
    assert "signature" not in spark.read.parquet(f"{out}/signatures").columns
    assert len(new_keys) == 15 and new_keys == bucket_keys_by_id(
        spark, V020 / "dedup" / "signatures"
    )
    for table, cols in (
        ("signatures", ("id", "num_shingles", "text_hash")),
        ("clusters", ("id", "cluster_id", "cluster_size", "keep")),
        ("pairs", ("id_a", "id_b", "jaccard")),
    ):
        assert rows(spark, f"{out}/{table}", *cols) == rows(spark, V020 / "dedup" / table, *cols)
    report = json.loads(Path(out, "report.json").read_text())
    assert report["parameters"]["tokens"] == "space"


@pytest.mark.heavy
def test_script_tokens_change_only_the_signatures_of_scripts_without_spaces(spark, dedup_runs):
    old = bucket_keys_by_id(spark, V020 / "dedup" / "signatures")
    new = bucket_keys_by_id(spark, f"{dedup_runs['default']}/signatures")
    assert {i for i in old if old[i] != new[i]} == SPLIT
    report = json.loads(Path(dedup_runs["default"], "report.json").read_text())
    assert report["parameters"]["tokens"] == "script"


@pytest.mark.heavy
def test_script_tokens_find_the_near_copies_0_2_0_missed(spark, dedup_runs):
    old = dict(rows(spark, V020 / "dedup" / "clusters", "id", "cluster_id"))
    new = dict(rows(spark, f"{dedup_runs['default']}/clusters", "id", "cluster_id"))
    # 0.2.0 left each of these alone: one edited character changed a whole clause.
    for copy, original in (("ja-2", "ja-1"), ("zh-2", "zh-1"), ("th-2", "th-1")):
        assert old[copy] == copy and new[copy] == original
    # Nothing else moved.
    moved = {i for i in old if old[i] != new[i]}
    assert moved == {"ja-2", "zh-2", "th-2"}


@pytest.fixture
def index_020(tmp_path):
    """A copy of the crawl index 0.2.0 wrote (batches 1 and 2), and a third batch:
    a copy of an indexed Japanese page, a near copy of an indexed Russian one and a
    new page."""
    index = tmp_path / "index"
    shutil.copytree(V020 / "crawl-index", index)
    t = texts()
    batch = tmp_path / "batch-3.jsonl"
    docs = [("b3-ja", t["ja-1"]), ("b3-ru", t["ru-2"]), ("b3-new", "an entirely new page " * 9)]
    batch.write_text(
        "".join(json.dumps({"id": i, "text": x}, ensure_ascii=False) + "\n" for i, x in docs),
        encoding="utf-8",
    )
    return index, batch


def test_a_0_2_0_index_goes_on_with_its_own_words(spark, tmp_path, index_020):
    index, batch = index_020
    before = json.loads((index / "_manifests" / "v00000002.json").read_text())["params"]
    report = run_crawl_batch(spark, str(batch), str(index), str(tmp_path / "out"), DedupConfig())
    assert report["status"] == "committed" and report["parameters"]["tokens"] == "space"
    dups = rows(spark, tmp_path / "out" / "duplicates", "id", "duplicate_of", "duplicate_of_source")
    # The copy of ja-1 is found only if it is shingled as the index's ja-1 was: with
    # script tokens its text hash and every shingle would differ.
    assert dups == [("b3-ja", "ja-1", "index"), ("b3-ru", "ru-1", "index")]
    jaccard = {
        r["id"]: r["jaccard"]
        for r in spark.read.parquet(str(tmp_path / "out" / "duplicates")).collect()
    }
    assert jaccard == {"b3-ja": 1.0, "b3-ru": pytest.approx(0.836066, abs=1e-6)}
    # The index still says how it was shingled: as 0.2.0 did (no "tokens" is "space").
    after = CrawlIndex(spark, str(index)).current()
    assert after.version == 3 and after.params == before


def test_a_0_2_0_index_refuses_other_tokens_in_one_line(spark, tmp_path, index_020):
    index, batch = index_020
    with pytest.raises(IndexError) as caught:
        run_crawl_batch(
            spark, str(batch), str(index), str(tmp_path / "out"), DedupConfig(tokens="script")
        )
    assert str(caught.value) == (
        f"--tokens: got 'script' but the index at file:{index} was built with 'space'; "
        "allowed: 'space' (leave --tokens out to continue it with its own, or start a new index)"
    )
    assert CrawlIndex(spark, str(index)).current().version == 2


def test_doc_keys_of_the_0_2_0_index_are_pinned(spark):
    docs = spark.read.parquet(str(V020 / "crawl-index" / "segments" / "*" / "docs"))
    keyed = docs.select("id", "doc", doc_key(F.col("id")).alias("now")).collect()
    assert len(keyed) == 9 and all(r["doc"] == r["now"] for r in keyed)
    assert {r["id"]: r["doc"] for r in keyed}["mixed-1"] == 3247021964817173578


def test_a_new_index_records_its_tokens():
    assert index_params(DedupConfig())["tokens"] == "script"
    assert index_params(DedupConfig(shingle="char"))["tokens"] == "space"


@pytest.mark.heavy
def test_a_0_2_0_output_is_inspected_with_its_own_words(spark, tmp_path):
    from lsh_spark.inspection import inspect_output, recorded_config

    report = json.loads((V020 / "dedup" / "report.json").read_text())
    assert recorded_config(report).token_mode == "space"
    assert recorded_config({"parameters": DedupConfig().to_dict()}).token_mode == "script"
    out = tmp_path / "dedup"
    shutil.copytree(V020 / "dedup", out)
    shown = inspect_output(spark, str(out), str(V020 / "corpus.jsonl"))
    # en-2, en-3, ja-3 and ru-2 were removed; each is shown beside its kept document.
    assert shown["removed_shown"] == 4
    page = Path(shown["html"]).read_text(encoding="utf-8")
    assert "0.836" in page and "0.875" in page


@pytest.mark.heavy
def test_space_tokens_give_the_decontamination_matches_of_0_2_0(spark, tmp_path):
    out = tmp_path / "decontam"
    argv = [
        "--input", str(V020 / "corpus.jsonl"), "--reference", str(V020 / "reference.jsonl"),
        "--output", str(out), "--tokens", "space",
    ]  # fmt: skip
    assert commands.decontaminate(argv, spark) == 0
    cols = ("id", "reference_id", "kind", "score")
    assert rows(spark, out / "matches", *cols) == rows(spark, V020 / "decontam" / "matches", *cols)
