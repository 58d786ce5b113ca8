"""The parameter advisor: its predictions against measured recall."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from lsh_spark.advisor import advise, s_curve_png
from lsh_spark.block_matrix import block_pairs
from lsh_spark.config import DedupConfig
from lsh_spark.pipeline import run_dedup
from lsh_spark.synth import mutate


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, sample_path):
    """The sample's 411 texts plus 300 mutated copies at edit rates 0.01-0.12, so
    true pairs spread over Jaccard 0.5-1.0."""
    rng = random.Random(5)
    with open(sample_path, encoding="utf-8") as fh:
        docs = [json.loads(line) for line in fh]
    vocab = " ".join(d["text"] for d in docs).split()[:5000]
    base = [d for d in docs if "~" not in d["id"] and len(d["text"].split()) > 60]
    rows = [{"id": d["id"], "text": d["text"]} for d in docs]
    for n, d in enumerate(rng.sample(base, min(300, len(base)))):
        rows.append(
            {
                "id": f"{d['id']}~m{n}",
                "text": mutate(d["text"], rng.uniform(0.01, 0.12), rng, vocab),
            }
        )
    path = tmp_path_factory.mktemp("advise") / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _truth(spark, shingles_path, threshold):
    """Exact all-pairs Jaccard over the run's own shingle sets (brute force)."""
    sh = spark.read.parquet(shingles_path).filter("shingles is not null").collect()
    ids = [r["id"] for r in sh]
    values = np.concatenate([np.array(r["shingles"], dtype=np.int64) for r in sh])
    lengths = np.array([len(r["shingles"]) for r in sh])
    i, j, _ = block_pairs(values, lengths, threshold)
    return {tuple(sorted((ids[a], ids[b]))) for a, b in zip(i, j, strict=False)}


@pytest.mark.heavy
def test_predicted_recall_matches_a_real_run(spark, tmp_path, corpus):
    from lsh_spark.outputs import StagedOutput
    from lsh_spark.pipeline import stage_candidates, stage_signatures, stage_verify

    given = DedupConfig(num_perm=32, bands=4, rows=8)  # P(0.8) = 0.52: much to predict
    advice = advise(spark, str(corpus), given, sample=400)
    predicted = advice["given"]["predicted_recall"]
    assert advice["sample_documents"] == 400 and advice["corpus_documents"] > 600
    out = StagedOutput(spark, str(tmp_path / "run"))
    stage_signatures(spark, str(corpus), out, given)
    stage_candidates(spark, out, given)
    stage_verify(spark, out, given)
    # The stages read their datasets back with the schemas recorded at write
    # time: each is the one Spark infers from the files.
    assert {"shingles", "signatures", "rejects", "candidates", "blocks", "pairs"} <= set(
        out.schemas
    )
    for name, schema in out.schemas.items():
        assert schema == spark.read.parquet(out.path(name)).schema, name
    truth = _truth(spark, out.path("shingles"), 0.8)
    found = {
        tuple(sorted((r["id_a"], r["id_b"])))
        for r in spark.read.parquet(out.path("pairs")).collect()
    }
    measured = len(found & truth) / len(truth)
    assert len(truth) >= 100, len(truth)
    assert abs(predicted - measured) < 0.1, (predicted, measured)
    assert predicted < 0.9  # a weak configuration is predicted weak
    out.abort()


@pytest.mark.heavy
def test_recommendation_reaches_the_target_and_is_checked_on_the_sample(spark, corpus):
    advice = advise(spark, str(corpus), DedupConfig(threshold=0.8, target_recall=0.99), sample=500)
    rec = advice["recommended"]
    assert rec["predicted_recall"] >= 0.99
    assert rec["candidate_probability_at_threshold"] >= 0.99
    assert rec["measured_on_sample"]["recall"] >= 0.95
    assert (
        rec["flags"] == f"--num-perm {rec['num_perm']} --bands {rec['bands']} --rows {rec['rows']}"
    )
    # cheaper options (fewer hashes) are listed with lower predicted recall
    by_perm = {o["num_perm"]: o for o in advice["options"]}
    assert by_perm[32]["predicted_recall"] <= by_perm[256]["predicted_recall"]
    assert sum(b["pairs"] for b in advice["similarity_histogram"]) == 500 * 499 // 2
    png = s_curve_png(DedupConfig(), np.array([0.1, 0.5, 0.9]))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


@pytest.mark.heavy
def test_vector_advice_predicts_hyperplane_recall(spark, tmp_path):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((300, 8))
    near = x[:150] + rng.uniform(0.05, 0.5, (150, 1)) * rng.standard_normal((150, 8)) / 3
    rows = [{"id": f"a{i}", "vector": v.tolist()} for i, v in enumerate(x)]
    rows += [{"id": f"b{i}", "vector": v.tolist()} for i, v in enumerate(near)]
    path = tmp_path / "v.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = DedupConfig(method="hyperplane", threshold=0.95, num_perm=24, bands=3, rows=8)
    advice = advise(spark, str(path), cfg, sample=450)
    report = run_dedup(spark, str(path), str(tmp_path / "out"), cfg)
    allv = np.concatenate([x, near])
    ids = [r["id"] for r in rows]
    u = allv / np.linalg.norm(allv, axis=1)[:, None]
    cos = u @ u.T
    truth = {
        (ids[i], ids[j])
        for i in range(len(ids))
        for j in range(i + 1, len(ids))
        if cos[i, j] >= 0.95
    }
    found = {
        (r["id_a"], r["id_b"])
        for r in spark.read.parquet(str(tmp_path / "out" / "pairs")).collect()
    }
    found = {tuple(sorted(p, key=ids.index)) for p in found}
    measured = len(found & truth) / len(truth)
    assert abs(advice["given"]["predicted_recall"] - measured) < 0.12
    assert report["banding"]["bands"] == 3


@pytest.mark.heavy
def test_simhash_advice_predicts_the_share_of_jaccard_pairs_found(spark, tmp_path, corpus):
    cfg = DedupConfig(method="simhash", threshold=0.8, target_recall=0.9)
    advice = advise(spark, str(corpus), cfg, sample=500)
    rec = advice["recommended"]
    k, blocks = rec["max_hamming"], rec["blocks"]
    assert rec["flags"] == f"--method simhash --max-hamming {k} --simhash-blocks {blocks}"
    recalls = [o["jaccard_recall"] for o in advice["by_max_hamming"]]
    assert recalls == sorted(recalls)  # a wider k never finds fewer pairs
    out = tmp_path / "out"
    run_dedup(
        spark,
        str(corpus),
        str(out),
        DedupConfig(method="simhash", max_hamming=k, simhash_blocks=blocks),
    )
    # the run's Jaccard truth from a MinHash run's shingle sets of the same corpus
    from lsh_spark.outputs import StagedOutput
    from lsh_spark.pipeline import stage_signatures

    staged = StagedOutput(spark, str(tmp_path / "sh"))
    stage_signatures(spark, str(corpus), staged, DedupConfig())
    truth = _truth(spark, staged.path("shingles"), 0.8)
    staged.abort()
    clusters = {}
    for r in spark.read.parquet(str(out / "clusters")).collect():
        clusters[r["id"]] = r["cluster_id"]
    together = sum(clusters[a] == clusters[b] for a, b in truth) / len(truth)
    # pairs within k are all found, so the pipeline keeps at least the predicted share
    # of the Jaccard pairs together (clusters also join pairs through chains)
    assert together >= rec["jaccard_recall"] - 0.1, (together, rec["jaccard_recall"])
