"""The notebook user's whole path, from a DataFrame built in memory (with rejects)
to the deduplicated DataFrame: a config from conf/local.yaml, ``find_duplicates``,
``removals`` checked against Jaccard computed by Python sets from the texts,
the inspection page, ``remove``, ``advise``, anchored clusters, the crawl index
and the building blocks' input checks."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re

import pytest
import yaml
from pyspark.sql import functions as F
from reference import jaccard, word_shingles

import lsh_spark
from lsh_spark.cli import build_parser, parse
from lsh_spark.commands import inspect
from lsh_spark.config import DedupConfig, choose_bands

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCAL_YAML = os.path.join(ROOT, "conf", "local.yaml")
SCHEMA = "id long, text string, quality double"
WORDS = 200
# Words changed from the family's first member to its second, then to its third:
# J(m0, m1) = J(m1, m2) = 181/211 (0.858) but J(m0, m2) = 166/226 (0.735), a chain.
FIRST_EDIT, SECOND_EDIT = (30, 90, 150), (60, 120, 180)


def family(f: int) -> list[str]:
    m0 = [f"f{f}w{j}" for j in range(WORDS)]
    m1 = [f"f{f}x{j}" if j in FIRST_EDIT else w for j, w in enumerate(m0)]
    m2 = [f"f{f}y{j}" if j in SECOND_EDIT else w for j, w in enumerate(m1)]
    texts = [" ".join(m) for m in (m0, m1, m2)]
    if f % 2 == 0:  # an exact copy but for case and punctuation
        texts.append(", ".join(m0).upper() + "!")
    return texts


def corpus() -> list[tuple]:
    rows = []
    for f in range(4):
        for m, text in enumerate(family(f)):
            # Family 1 keeps its second member (highest quality), the others the first.
            rows.append((f * 10 + m + 1, text, 0.9 if (f, m) == (1, 1) else 0.5))
    rows += [(100 + i, " ".join(f"u{i}w{j}" for j in range(40)), 0.5) for i in range(10)]
    rows += [
        (200, "", 0.5),  # empty_text
        (201, "\x00\x01\x02\x03\x04\x05 abc", 0.5),  # binary_content
        (202, "big " * 900, 0.5),  # too_large (3,600 characters; max_text_chars 3000)
        (203, "!!! ??? ...", 0.5),  # no_text_content
        (204, None, 0.5),  # missing_text
    ]
    return rows


REJECTS = {200: "empty_text", 201: "binary_content", 202: "too_large", 203: "no_text_content"}
REJECTS[204] = "missing_text"
FAMILY_SIZES = {1: 4, 11: 3, 21: 4, 31: 3}  # by first member's id
REMOVED = sum(FAMILY_SIZES.values()) - len(FAMILY_SIZES)


@pytest.fixture(scope="module")
def docs(spark):
    return spark.createDataFrame(corpus(), SCHEMA)


@pytest.fixture(scope="module")
def config():
    return DedupConfig.from_yaml(LOCAL_YAML)


@pytest.fixture(scope="module")
def dups(docs, config, tmp_path_factory):
    where = str(tmp_path_factory.mktemp("notebook") / "work")
    return lsh_spark.find_duplicates(
        docs, config=config, max_text_chars=3000, keep_by="quality desc", workdir=where
    )


@pytest.mark.heavy  # about a minute: a run, removals, the page, advise
def test_from_a_dataframe_to_the_deduplicated_dataframe(spark, docs, dups, tmp_path):
    texts = {r[0]: r[1] for r in corpus()}
    assert dups.config.threshold == 0.8 and dups.config.max_text_chars == 3000
    assert dups.config.block_min_size == 32  # from conf/local.yaml
    reasons = {r.id: r.reason.split(":")[0] for r in dups.rejects.collect()}
    assert reasons == REJECTS

    clusters = {r.id: r for r in dups.clusters.collect()}
    kept = {r.cluster_id: r.id for r in clusters.values() if r.keep and r.cluster_size > 1}
    assert sorted(kept.values()) == [1, 12, 21, 31]  # keep_by quality desc, then min-id
    assert {cid: clusters[k].cluster_size for cid, k in kept.items()} == FAMILY_SIZES

    # removals: every removed document once, with the kept one of its cluster and
    # their exact Jaccard, as Python sets compute it from the texts.
    removals = dups.removals.collect()
    assert sorted(r.id for r in removals) == sorted(i for i, c in clusters.items() if not c.keep)
    assert len(removals) == REMOVED == dups.report["counts"]["removed_documents"]
    for r in removals:
        assert clusters[r.kept_id].keep
        assert clusters[r.kept_id].cluster_id == clusters[r.id].cluster_id
        want = jaccard(word_shingles(texts[r.id]), word_shingles(texts[r.kept_id]))
        assert r.jaccard == pytest.approx(want, abs=1e-12), (r.id, r.kept_id)
    assert min(r.jaccard for r in removals) == pytest.approx(166 / 226)  # the chain

    # The inspection page, from memory: each removed document beside its kept one.
    page = dups.inspect(str(tmp_path / "page.html"))
    assert isinstance(page, str) and "<iframe srcdoc=" in page._repr_html_()
    assert (tmp_path / "page.html").read_text(encoding="utf-8") == page
    shown = re.findall(
        r"kept (\S+?)</p>.*?removed (\S+?) · Jaccard with the kept document "
        r"<b class='jaccard'>([\d.]+)</b>",
        page,
        re.S,
    )
    by_removed = {r.id: r for r in removals}
    assert len(shown) == REMOVED
    for kept_id, removed_id, score in shown:
        r = by_removed[int(removed_id)]
        assert int(kept_id) == r.kept_id and float(score) == pytest.approx(r.jaccard, abs=5e-4)

    # remove(): the duplicates only; the rejects with drop_rejects=True.
    left = dups.remove(docs)
    assert left.columns == docs.columns
    assert left.count() == len(corpus()) - REMOVED
    assert set(REJECTS) <= {r.id for r in left.select("id").collect()}
    strict = {r.id for r in dups.remove(docs, drop_rejects=True).collect()}
    assert strict == {i for i, c in clusters.items() if c.keep}

    advice = lsh_spark.advise(docs, config=dups.config)
    assert advice.recommended["num_perm"] in (32, 64, 128, 256)
    assert advice.config.num_perm == advice.recommended["num_perm"]
    b, r = advice.config.band_params()
    assert (advice.recommended["bands"], advice.recommended["rows"]) == (b, r)
    ps = [p["p"] for p in advice.s_curve]
    assert ps == sorted(ps) and ps[0] == 0 and ps[-1] == 1
    assert advice._repr_png_()[:4] == b"\x89PNG"


@pytest.mark.heavy
def test_anchored_clusters_release_what_is_not_close_to_the_kept_document(docs, config, tmp_path):
    anchored = lsh_spark.find_duplicates(
        docs,
        config=config,
        max_text_chars=3000,
        keep_by="quality desc",
        anchored=True,
        workdir=str(tmp_path / "w"),
    )
    clusters = {r.id: r for r in anchored.clusters.collect()}
    # The third member of families 0, 2 and 3 (J 0.735 with the kept first member)
    # is a cluster of its own; family 1 keeps its middle member, close to both others.
    for released in (3, 23, 33):
        assert (clusters[released].cluster_id, clusters[released].cluster_size) == (released, 1)
        assert clusters[released].keep
    sizes = [clusters[i].cluster_size for i in (1, 2, 4, 11, 12, 13, 31, 32)]
    assert sizes == [3, 3, 3, 3, 3, 3, 2, 2]
    removals = anchored.removals.collect()
    assert len(removals) == REMOVED - 3 == anchored.report["counts"]["removed_documents"]
    assert min(r.jaccard for r in removals) >= 0.8
    assert anchored.report["anchored"]["released"] == 3
    assert anchored.remove(docs).count() == len(corpus()) - REMOVED + 3


def test_a_config_from_yaml_is_the_command_lines(config, tmp_path):
    argv = ["--input", LOCAL_YAML, "--output", str(tmp_path / "o"), "--config", LOCAL_YAML]
    _, from_cli = parse(build_parser("dedup.py", ""), argv)
    assert config == from_cli
    assert DedupConfig.from_yaml(LOCAL_YAML, threshold=0.7).threshold == 0.7
    with pytest.raises(ValueError, match=r"overrides: unknown key 'num_perms'"):
        DedupConfig.from_yaml(LOCAL_YAML, num_perms=64)
    assert DedupConfig(keep_by=["quality desc", "fetch_time"]).keep_order == [
        ("quality", True),
        ("fetch_time", False),
    ]
    with pytest.raises(ValueError, match=r"^--keep-by: got 'a b c'; allowed: comma-sep"):
        DedupConfig(keep_by="a b c")


def test_options_as_a_yaml_file_writes_them_and_over_a_config(docs, config):
    with open(LOCAL_YAML, encoding="utf-8") as fh:
        values = yaml.safe_load(fh)
    assert "block-min-size" in values
    # The dashed keys are taken (the call used to fail with a TypeError on them);
    # the keywords are checked, and win over the config, before anything runs.
    with pytest.raises(ValueError, match=r"^threshold must be a number in \(0, 1\], got 1.5$"):
        lsh_spark.find_duplicates(docs, **{**values, "threshold": 1.5})
    with pytest.raises(ValueError, match=r"^keep_by: column 'score' not in input; columns: id, "):
        lsh_spark.find_duplicates(docs, config=config, keep_by="score desc")
    with pytest.raises(TypeError, match=r"config must be a DedupConfig, got dict"):
        lsh_spark.find_duplicates(docs, config=values)
    assert lsh_spark.DedupConfig is DedupConfig


def _signatures(spark, num_perm=64):
    texts = [
        "the quick brown fox jumps over the lazy dog near the river bank",
        "the quick brown fox jumps over the lazy dog near the river bank today",
        "completely unrelated words about baking bread with flour and water",
        "a third text on the history of the printing press in europe",
    ]
    df = spark.createDataFrame(list(enumerate(texts)), "id long, text string")
    return df.transform(lsh_spark.shingles, k=3).transform(lsh_spark.minhash, num_perm=num_perm)


def _shared_buckets(keys, id_col="id"):
    a, b = keys.alias("a"), keys.alias("b")
    return sorted(
        tuple(r)
        for r in a.join(b, ["band", "bucket"])
        .where(F.col(f"a.{id_col}") < F.col(f"b.{id_col}"))
        .select(f"a.{id_col}", f"b.{id_col}")
        .distinct()
        .collect()
    )


def test_band_keys_read_num_perm_from_the_signatures(spark):
    sigs = _signatures(spark, 64)
    keys = sigs.transform(lsh_spark.band_keys)
    bands = {r.band for r in keys.collect()}
    assert len(bands) == choose_bands(0.8, 64)[0] == 12
    # With 128 assumed, bands past the 64 values all hashed alike: every pair shared them.
    assert _shared_buckets(keys) == [(0, 1)]
    same = sigs.transform(lsh_spark.band_keys, num_perm=64)
    assert sorted(map(tuple, same.collect())) == sorted(map(tuple, keys.collect()))


def test_band_keys_refuse_null_and_wrong_length_signatures(spark):
    sigs = _signatures(spark, 64)
    nulled = sigs.withColumn(
        "signature", F.when(F.col("id") == 2, F.lit(None)).otherwise(F.col("signature"))
    )
    with pytest.raises(Exception, match=r"band_keys: null signature of id 2"):
        nulled.transform(lsh_spark.band_keys).count()
    with pytest.raises(Exception, match=r"signature of id \d has 64 values, expected 128"):
        sigs.transform(lsh_spark.band_keys, num_perm=128).count()
    with pytest.raises(ValueError, match=r"band_keys: column 'signature' not in input"):
        sigs.withColumnRenamed("signature", "sig").transform(lsh_spark.band_keys).count()


def test_band_keys_take_the_column_names(spark):
    sigs = _signatures(spark, 64).select(F.col("id").alias("doc"), F.col("signature").alias("mh"))
    keys = sigs.transform(lsh_spark.band_keys, id_col="doc", signature_col="mh")
    assert keys.columns == ["doc", "band", "bucket"]
    assert _shared_buckets(keys, "doc") == [(0, 1)]


def _printed(fn, argv, spark) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert fn(argv, spark=spark) == 0
    return json.loads(out.getvalue().strip().splitlines()[-1])


@pytest.mark.heavy
def test_inspect_reads_a_table_input(spark, docs, tmp_path):
    from lsh_spark.pipeline import run_dedup

    docs.createOrReplaceTempView("notebook_docs")
    out = str(tmp_path / "out")
    cfg = DedupConfig.from_yaml(LOCAL_YAML, max_text_chars=3000)
    run_dedup(spark, spark.table("notebook_docs"), out, cfg)
    page = tmp_path / "page.html"
    shown = _printed(inspect, [out, "--input-table", "notebook_docs", "--html", str(page)], spark)
    assert shown["removed_shown"] == REMOVED and shown["largest_clusters"] == 4
    markup = page.read_text(encoding="utf-8")
    kept = set(re.findall(r"kept (\S+?)</p>", markup))
    assert kept == {"1", "11", "21", "31"}  # min-id: no keep_by here


@pytest.mark.heavy
def test_crawl_index_takes_dataframes_and_inspect_reads_its_output(spark, tmp_path):
    first = [(f"a{i}", " ".join(f"a{i}w{j}" for j in range(30))) for i in range(4)]
    second = [("b0", first[0][1] + " again"), ("b1", " ".join(f"b1w{j}" for j in range(30)))]
    schema = "id string, text string"
    index = lsh_spark.CrawlIndex.open(str(tmp_path / "index"), spark)
    one = index.dedup_batch(
        spark.createDataFrame(first, schema), batch_id="one", output=str(tmp_path / "one")
    )
    assert one.report["status"] == "committed" and one.deduped.count() == 4
    batch = spark.createDataFrame(second, schema)
    two = index.dedup_batch(batch, batch_id="two", output=str(tmp_path / "two"))
    dup = two.duplicates.collect()
    assert [(d.id, d.duplicate_of, d.duplicate_of_source) for d in dup] == [("b0", "a0", "index")]
    assert dup[0].jaccard == pytest.approx(
        jaccard(word_shingles(first[0][1]), word_shingles(second[0][1]))
    )
    assert index.describe()["documents"] == 5 and index.describe()["version"] == 2
    again = index.dedup_batch(batch, batch_id="two", output=str(tmp_path / "again"))
    assert again.report["status"] == "already_applied"
    assert index.describe()["documents"] == 5

    batch.createOrReplaceTempView("crawl_batch_two")
    page = tmp_path / "crawl.html"
    argv = [str(tmp_path / "two"), "--input-table", "crawl_batch_two", "--html", str(page)]
    assert _printed(inspect, argv, spark)["removed_shown"] == 1
    markup = page.read_text(encoding="utf-8")
    assert "kept a0" in markup and "removed b0" in markup
    assert "the index keeps no text" in markup


@pytest.mark.heavy
def test_inspect_reads_a_decontamination_output(spark, tmp_path):
    question = "what is the boiling point of water at sea level in degrees celsius"
    pages = spark.createDataFrame(
        [(1, f"Quiz night! Q: {question}? A: 100."), (2, "Roses need sun and water.")],
        "id long, text string",
    )
    tests = spark.createDataFrame([("q17", question)], "id string, text string")
    where = str(tmp_path / "decon")
    lsh_spark.decontaminate(pages, {"science-qa": tests}, ngram=8, workdir=where)
    page = tmp_path / "decon.html"
    assert _printed(inspect, [where, "--html", str(page)], spark)["removed_shown"] == 1
    markup = page.read_text(encoding="utf-8")
    assert "reference science-qa: q17 (containment)" in markup and "removed 1 " in markup
