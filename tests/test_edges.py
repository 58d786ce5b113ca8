"""pairs/ as edges (--pairs edges, the default) against every pair (--pairs all).

A small planted corpus holds an identical-text group, a second group of copies
joined to the first by a verified pair of representatives, a template family
large enough to be verified as a block, and unrelated documents.  The edges
must give exactly the clusters that every pair gives.
"""

import json
import random

import pytest
from chispa import assert_df_equality

from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.pipeline import run_dedup
from lsh_spark.synth import mutate

# Two whole pipeline runs on a corpus of hundreds of documents, read by every test.
pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, sample_path):
    with open(sample_path, encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh if "~" not in json.loads(line)["id"]]
    texts = [t for t in texts if len(t.split()) > 150][:40]
    rng = random.Random(50)
    vocab = sorted({w for t in texts for w in t.split()})
    base, near = texts[0], mutate(texts[0], 0.02, rng, vocab)
    docs = [{"id": f"a{i}", "text": base.upper() if i % 2 else base} for i in range(4)]
    # A second identical-text group, a near copy of the first: one verified
    # pair of representatives joins the two groups.
    docs += [{"id": f"b{i}", "text": near.lower()} for i in range(3)]
    # A template family: verified as one block (block_min_size below).
    docs += [{"id": f"f{i:02d}", "text": mutate(texts[1], 0.02, rng, vocab)} for i in range(12)]
    docs += [{"id": f"o{i:02d}", "text": t} for i, t in enumerate(texts[2:30])]
    path = tmp_path_factory.mktemp("edges") / "corpus.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return str(path), docs


def _run(spark, path, out, **options):
    cfg = DedupConfig(threshold=0.8, block_min_size=6, **options)
    report = run_dedup(spark, path, str(out), cfg)
    return report, spark.read.parquet(f"{out}/pairs"), spark.read.parquet(f"{out}/clusters")


@pytest.fixture(scope="module")
def runs(spark, corpus, tmp_path_factory):
    path, _ = corpus
    root = tmp_path_factory.mktemp("runs")
    return {mode: _run(spark, path, root / mode, pairs=mode) for mode in ("edges", "all")}


def test_edges_give_the_clusters_of_all_pairs(runs):
    _, _, edge_clusters = runs["edges"]
    _, _, all_clusters = runs["all"]
    assert_df_equality(edge_clusters, all_clusters, ignore_row_order=True)
    sizes = {r.cluster_id: r.cluster_size for r in edge_clusters.collect()}
    # The two groups of copies are one cluster; the family another.
    assert sizes["a0"] == 7 and sizes["f00"] == 12


def test_edges_are_a_verified_forest_of_the_pairs(runs, corpus):
    report, edges, clusters = runs["edges"]
    _, everything, _ = runs["all"]
    every = {(r.id_a, r.id_b): r.jaccard for r in everything.collect()}
    got = {(r.id_a, r.id_b): r.jaccard for r in edges.collect()}
    # Each edge is one of the verified pairs, with the same exact Jaccard.
    assert got and all(every[p] == j for p, j in got.items())
    # One row per document beyond the first of its cluster: a spanning forest.
    n_clusters = clusters.select("cluster_id").distinct().count()
    assert len(got) == len(corpus[1]) - n_clusters < len(every)
    # Copies: one star edge each to their representative, Jaccard 1.
    assert {p: j for p, j in got.items() if p[0] == "a0" and p[1].startswith("a")} == {
        ("a0", f"a{i}"): 1.0 for i in (1, 2, 3)
    }
    assert sum(p[1].startswith("b") and p[0] == "b0" for p in got) == 2
    assert report["counts"]["verified_pairs"] == len(got)
    assert report["pairs_written"]["mode"] == "edges"


def test_all_pairs_lists_every_pair_within_its_estimate(runs):
    report, everything, _ = runs["all"]
    got = {(r.id_a, r.id_b) for r in everything.collect()}
    rows = len(got)
    # Every pair of the seven copies of a and b (their representatives' pair
    # expanded), and more than a forest of the family.
    copies = [f"a{i}" for i in range(4)] + [f"b{i}" for i in range(3)]
    assert {(x, y) for x in copies for y in copies if x < y} <= got
    assert sum(p[0].startswith("f") for p in got) > 11
    assert report["counts"]["verified_pairs"] == rows
    written = report["pairs_written"]
    assert written["mode"] == "all" and written["estimated_pairs"] >= rows


def test_all_pairs_refuses_above_its_bound(spark, corpus, tmp_path):
    path, _ = corpus
    with pytest.raises(
        ConfigError,
        match=r"--max-all-pairs 50\b.*estimated [\d,]+ pairs|"
        r"estimated [\d,]+ pairs.*--max-all-pairs 50\b",
    ):
        _run(spark, path, tmp_path / "out", pairs="all", max_all_pairs=50)
    # Nothing was committed.
    assert not (tmp_path / "out").exists()
