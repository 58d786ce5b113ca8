"""End to end on planted near-duplicates of real text, checked against brute force."""

import json
import random
from itertools import combinations

import pytest
from reference import jaccard, word_shingles

from lsh_spark.config import DedupConfig
from lsh_spark.pipeline import run_dedup
from lsh_spark.synth import mutate

THRESHOLD = 0.8

# Pipeline runs on a planted corpus of hundreds of documents: the full suite's.
pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def planted(tmp_path_factory, sample_path):
    with open(sample_path, encoding="utf-8") as fh:
        base = [json.loads(line) for line in fh if "~" not in json.loads(line)["id"]]
    rng = random.Random(2024)
    vocab = sorted({w for d in base for w in d["text"].split()})
    docs = []
    for i, d in enumerate(base[:160]):
        docs.append({"id": d["id"], "text": d["text"]})
        if i % 8 == 0:
            # An exact copy up to case: it must get every pair its original has.
            docs.append({"id": f"{d['id']}~x", "text": d["text"].upper()})
        for n in range(rng.randint(1, 3)):
            rate = rng.uniform(0.0, 0.05)
            docs.append({"id": f"{d['id']}~m{n}", "text": mutate(d["text"], rate, rng, vocab)})
    path = tmp_path_factory.mktemp("planted") / "planted.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps(d, ensure_ascii=False) + "\n")
    shingles = {d["id"]: word_shingles(d["text"]) for d in docs}
    # Brute force over every pair of the corpus, not only the planted ones.
    truth = {}
    for a, b in combinations(sorted(shingles), 2):
        j = jaccard(shingles[a], shingles[b])
        if j >= 0.5:
            truth[(a, b)] = j
    return str(path), docs, truth


@pytest.fixture(scope="module")
def result(spark, planted, tmp_path_factory):
    path, _, _ = planted
    out = str(tmp_path_factory.mktemp("run") / "out")
    # Every verified pair, to check against brute force (tests/test_edges.py
    # checks that the default edges give the same clusters).
    report = run_dedup(spark, path, out, DedupConfig(threshold=THRESHOLD, pairs="all"))
    pairs = {(r.id_a, r.id_b): r.jaccard for r in spark.read.parquet(out + "/pairs").collect()}
    clusters = {r.id: r for r in spark.read.parquet(out + "/clusters").collect()}
    return report, pairs, clusters, out


def test_enough_planted_pairs_span_the_threshold(planted):
    _, _, truth = planted
    above = [j for j in truth.values() if j >= THRESHOLD + 0.05]
    near = [j for j in truth.values() if THRESHOLD - 0.1 <= j < THRESHOLD]
    assert len(above) >= 150 and len(near) >= 20


def test_recall_at_threshold_plus_margin(planted, result):
    _, _, truth = planted
    _, pairs, _, _ = result
    wanted = [p for p, j in truth.items() if j >= THRESHOLD + 0.05]
    found = sum(p in pairs for p in wanted)
    assert found / len(wanted) >= 0.99, (found, len(wanted))


def test_no_pair_below_threshold_and_jaccard_is_exact(planted, result):
    _, _, truth = planted
    _, pairs, _, _ = result
    assert pairs, "no pairs found"
    for p, j in pairs.items():
        assert p[0] < p[1]
        assert j >= THRESHOLD
        assert j == pytest.approx(truth[p], abs=1e-12), p


def test_every_document_clustered_once_and_one_kept_per_cluster(planted, result):
    _, docs, truth = planted
    report, pairs, clusters, out = result
    assert set(clusters) == {d["id"] for d in docs}
    for a, b in pairs:
        assert clusters[a].cluster_id == clusters[b].cluster_id
    by_cluster = {}
    for r in clusters.values():
        by_cluster.setdefault(r.cluster_id, []).append(r)
    for cid, members in by_cluster.items():
        assert cid == min(m.id for m in members)
        assert all(m.cluster_size == len(members) for m in members)
        assert sum(m.keep for m in members) == 1
    assert report["counts"]["deduped_documents"] == len(by_cluster)
    assert report["counts"]["rejected"] == 0


def test_report_describes_the_run(planted, result):
    report, pairs, _, out = result
    b, r = report["banding"]["bands"], report["banding"]["rows"]
    assert report["banding"]["candidate_probability_at_threshold"] >= 0.99
    assert b * r <= report["parameters"]["num_perm"]
    assert report["counts"]["verified_pairs"] == len(pairs)
    # Candidates join one representative per group of identical texts; the
    # copies' pairs are expanded from the representative's.
    copies = {d["id"] for d in planted[1] if d["id"].endswith("~x")}
    among_reps = [p for p in pairs if not copies & set(p)]
    assert report["counts"]["candidate_pairs"] >= len(among_reps)
    assert report["exact_duplicates"]["groups"] == len(copies)
    assert report["exact_duplicates"]["expanded_documents"] == 2 * len(copies)
    for stage in ("signatures", "candidates", "verify", "cluster", "deduped", "total"):
        assert report["seconds"][stage] >= 0
    with open(out + "/report.json", encoding="utf-8") as fh:
        assert json.load(fh)["counts"] == report["counts"]


def test_template_family_is_bounded_and_reported(spark, sample_path, tmp_path):
    """A family larger than --max-bucket-size costs n-1 pairs per bucket, not n^2/2."""
    with open(sample_path, encoding="utf-8") as fh:
        texts = [json.loads(line)["text"] for line in fh][:40]
    template = texts[0]
    rng = random.Random(5)
    docs = [
        {"id": f"t{i:02d}", "text": template + " " + " ".join(rng.sample(texts[1].split(), 3))}
        for i in range(24)
    ]
    docs += [{"id": f"o{i:02d}", "text": t} for i, t in enumerate(texts[2:30])]
    path = tmp_path / "family.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    out = str(tmp_path / "out")
    report = run_dedup(spark, str(path), out, DedupConfig(max_bucket_size=8))
    buckets = report["buckets"]
    assert buckets["bounded_buckets"] >= 1 and buckets["max_bucket_size_seen"] > 8
    assert buckets["pairs_avoided_by_bounding"] > 0
    family = buckets["bounded_families"][0]
    assert family["cluster_id"] == "t00" and family["cluster_size"] == 24
    clusters = {r.id: r.cluster_id for r in spark.read.parquet(out + "/clusters").collect()}
    assert all(clusters[f"t{i:02d}"] == "t00" for i in range(24))
    # Fewer pairs than the family's 276, every one verified above the threshold.
    pairs = spark.read.parquet(out + "/pairs").collect()
    assert 23 <= len(pairs) < 24 * 23 // 2
    assert all(p.jaccard >= 0.8 for p in pairs)


@pytest.mark.heavy
@pytest.mark.parametrize("pairs_per_task", [None, 3])
def test_block_verification_gives_the_same_pairs(
    spark, planted, result, tmp_path, monkeypatch, pairs_per_task
):
    """Every bucket of 2+ verified as a block: pairs/ identical to the default run.

    With 3 pairs per task, every group of 4 or more members is shared among tasks.
    """
    import lsh_spark.blocks as V

    if pairs_per_task:
        monkeypatch.setattr(V, "PAIRS_PER_TASK", pairs_per_task)
    path, _, _ = planted
    _, pairs, _, _ = result
    out = str(tmp_path / "blocks")
    report = run_dedup(
        spark, path, out, DedupConfig(threshold=THRESHOLD, block_min_size=2, pairs="all")
    )
    assert report["buckets"]["blocks"] > 100
    got = {(r.id_a, r.id_b): r.jaccard for r in spark.read.parquet(out + "/pairs").collect()}
    assert got == pairs
    assert report["counts"]["verified_pairs"] == len(pairs)
    work = report["block_verification"]
    assert work["groups"] > 50 and work["largest_group"] >= 4
    # Every group not split is one task; the split ones account for the rest.
    assert work["split_tasks"] == work["tasks"] - (work["groups"] - work["split_groups"])
    if pairs_per_task:
        assert work["split_groups"] > 0 and work["tasks"] > work["groups"]
    else:
        assert work["split_groups"] == 0 and work["tasks"] == work["groups"]


@pytest.mark.heavy
def test_families_above_the_bound_keep_their_clusters(spark, planted, result, tmp_path):
    """--max-family-size: pairs/ holds a spanning forest of each larger family;
    clusters/ is the same as when every pair is written."""
    path, _, _ = planted
    _, pairs, clusters, _ = result
    out = str(tmp_path / "forest")
    report = run_dedup(
        spark,
        path,
        out,
        DedupConfig(threshold=THRESHOLD, block_min_size=2, max_family_size=2, pairs="all"),
    )
    got = {(r.id_a, r.id_b): r.jaccard for r in spark.read.parquet(out + "/pairs").collect()}
    assert set(got) < set(pairs) and all(pairs[p] == v for p, v in got.items())
    assert report["counts"]["verified_pairs"] == len(got)
    work = report["block_verification"]
    assert work["max_family_size"] == 2 and work["forest_families"] > 20
    assert work["forest_family_documents"] >= 3 * work["forest_families"]
    sizes = [f["size"] for f in work["largest_forest_families"]]
    assert sizes == sorted(sizes, reverse=True) and len(sizes) == 10 and sizes[-1] >= 3
    assert {r.id: r for r in spark.read.parquet(out + "/clusters").collect()} == clusters
    # The same forests whatever the partitioning (a re-run gives identical pairs/).
    old = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "7")
    try:
        run_dedup(
            spark,
            path,
            out + "-again",
            DedupConfig(threshold=THRESHOLD, block_min_size=2, max_family_size=2, pairs="all"),
        )
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", old)
    again = {
        (r.id_a, r.id_b): r.jaccard for r in spark.read.parquet(out + "-again/pairs").collect()
    }
    assert again == got
