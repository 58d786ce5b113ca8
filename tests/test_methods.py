"""dedup.py --method simhash | hyperplane | pstable against brute force."""

from __future__ import annotations

import json

import numpy as np
import pytest
from reference import reference_components

from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.pipeline import run_dedup


def _components(ids, pairs):
    """The partition of ``ids`` into connected components, as sorted lists."""
    groups = {}
    for v, (root, _) in reference_components(list(ids), pairs).items():
        groups.setdefault(root, []).append(v)
    return sorted(sorted(g) for g in groups.values())


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    """150 random 12-d vectors, every third with a planted neighbour, plus bad rows."""
    rng = np.random.default_rng(11)
    base = rng.standard_normal((150, 12))
    rows = [{"id": f"v{i:03d}", "vector": base[i].tolist()} for i in range(150)]
    for i in range(0, 150, 3):
        rows.append(
            {"id": f"v{i:03d}n", "vector": (base[i] + 0.04 * rng.standard_normal(12)).tolist()}
        )
    rows.append({"id": "v000copy", "vector": base[0].tolist()})
    rows += [
        {"id": "short", "vector": [1.0, 2.0]},
        {"id": "null", "vector": None},
        {"id": "zero", "vector": [0.0] * 12},
    ]
    path = tmp_path_factory.mktemp("vec") / "v.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    good = [r for r in rows if r["vector"] and len(r["vector"]) == 12]
    return path, [r["id"] for r in good], np.array([r["vector"] for r in good])


@pytest.mark.heavy
@pytest.mark.parametrize(
    "method,kw", [("hyperplane", {"threshold": 0.97}), ("pstable", {"max_distance": 0.6})]
)
def test_vector_methods_find_what_brute_force_finds(spark, tmp_path, vectors, method, kw):
    path, ids, x = vectors
    out = tmp_path / "out"
    report = run_dedup(spark, str(path), str(out), DedupConfig(method=method, **kw))
    norms = np.linalg.norm(x, axis=1)
    truth = set()
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            if method == "hyperplane":
                ok = (
                    norms[i] > 0
                    and norms[j] > 0
                    and x[i] @ x[j] / (norms[i] * norms[j]) >= kw["threshold"]
                )
            else:
                ok = np.linalg.norm(x[i] - x[j]) <= kw["max_distance"]
            if ok:
                truth.add((ids[i], ids[j]))
    measure = "cosine" if method == "hyperplane" else "distance"
    rows = spark.read.parquet(str(out / "pairs")).collect()
    assert set(spark.read.parquet(str(out / "pairs")).columns) == {"id_a", "id_b", measure}
    by_id = dict(zip(ids, x, strict=False))
    for r in rows:  # every reported value is the exact one
        a, b = by_id[r["id_a"]], by_id[r["id_b"]]
        exact = (
            a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
            if method == "hyperplane"
            else np.linalg.norm(a - b)
        )
        assert r[measure] == pytest.approx(exact, abs=1e-9)
    kept = {i for i in ids if method == "pstable" or i != "zero"}
    assert _components(kept, [(r["id_a"], r["id_b"]) for r in rows]) == _components(
        kept, [p for p in truth if set(p) <= kept]
    )
    assert len(truth) >= 50  # the planted neighbours are there to be found
    # The histogram comes with the write of pairs/: 20 bins of the measure.
    bins = {}
    for r in rows:
        if method == "hyperplane":
            b = min(int(np.floor(r[measure] * 20)), 19)
            start = round(b / 20, 6)
        else:
            step = kw["max_distance"] / 20
            b = min(int(np.floor(r[measure] / step)), 19)
            start = round(b / (1 / step), 6)
        bins[start] = bins.get(start, 0) + 1
    assert {b["from"]: b["pairs"] for b in report[f"{measure}_histogram"]} == bins
    reasons = report["rejects_by_reason"]
    assert reasons["wrong_dimension"] == 1 and reasons["missing_vector"] == 1
    assert reasons.get("zero_vector", 0) == (1 if method == "hyperplane" else 0)
    assert report["input"]["dimension"] == 12
    assert report["banding"]["candidate_probability_at_threshold"] >= 0.99


@pytest.mark.heavy
def test_mllib_vectors_are_accepted(spark, tmp_path, vectors):
    from pyspark.ml.linalg import Vectors

    _, ids, x = vectors
    df = spark.createDataFrame(
        [(i, Vectors.dense(v.tolist())) for i, v in zip(ids, x, strict=False)], ["id", "features"]
    )
    df.write.parquet(str(tmp_path / "in"))
    report = run_dedup(
        spark,
        str(tmp_path / "in"),
        str(tmp_path / "out"),
        DedupConfig(method="hyperplane", threshold=0.97, vector_col="features"),
    )
    assert report["counts"]["verified_pairs"] >= 51  # 50 planted + the exact copy
    assert report["rejects_by_reason"] == {"zero_vector": 1}


@pytest.mark.heavy
def test_simhash_clusters_equal_brute_force_over_the_fingerprints(spark, tmp_path, sample_path):
    out = tmp_path / "out"
    cfg = DedupConfig(method="simhash", max_hamming=4, simhash_blocks=7)
    report = run_dedup(spark, sample_path, str(out), cfg)
    assert report["banding"]["tables"] == 35
    sigs = {
        r["id"]: r["simhash"] & (2**64 - 1)
        for r in spark.read.parquet(str(out / "signatures")).collect()
    }
    ids = sorted(sigs)
    truth = [
        (a, b)
        for i, a in enumerate(ids)
        for b in ids[i + 1 :]
        if bin(sigs[a] ^ sigs[b]).count("1") <= 4
    ]
    pairs = spark.read.parquet(str(out / "pairs")).collect()
    for r in pairs:
        assert r["hamming"] == bin(sigs[r["id_a"]] ^ sigs[r["id_b"]]).count("1") <= 4
    by_distance = {}
    for r in pairs:
        by_distance[r["hamming"]] = by_distance.get(r["hamming"], 0) + 1
    assert {b["from"]: b["pairs"] for b in report["hamming_histogram"]} == by_distance
    clusters = {}
    for r in spark.read.parquet(str(out / "clusters")).collect():
        clusters.setdefault(r["cluster_id"], set()).add(r["id"])
    assert sorted(sorted(g) for g in clusters.values()) == _components(ids, truth)
    assert len(truth) > 5


def test_simhash_verify_jaccard_adds_the_exact_jaccard(spark, tmp_path, sample_path):
    out = tmp_path / "out"
    run_dedup(
        spark,
        sample_path,
        str(out),
        DedupConfig(
            method="simhash",
            max_hamming=8,
            simhash_blocks=10,
            verify_jaccard=True,
            simhash_weight="uniform",
        ),
    )
    pairs = spark.read.parquet(str(out / "pairs"))
    assert set(pairs.columns) == {"id_a", "id_b", "hamming", "jaccard"}
    rows = pairs.collect()
    assert rows and all(r["jaccard"] >= 0.8 and r["hamming"] <= 8 for r in rows)


def test_method_options_are_validated():
    with pytest.raises(ConfigError, match="--max-distance: required with --method pstable"):
        DedupConfig(method="pstable")
    with pytest.raises(ConfigError, match="--method: got 'lsh'"):
        DedupConfig(method="lsh")
    with pytest.raises(ConfigError, match=r"--simhash-blocks: got 3; allowed: an integer from"):
        DedupConfig(method="simhash", max_hamming=3, simhash_blocks=3)
    with pytest.raises(ConfigError, match="--bucket-width: got -1"):
        DedupConfig(method="pstable", max_distance=1.0, bucket_width=-1)


def test_vector_column_of_the_wrong_type_is_named(spark, tmp_path, sample_path):
    with pytest.raises(ConfigError, match="--vector-col: column 'text' has type string"):
        run_dedup(
            spark,
            sample_path,
            str(tmp_path / "o"),
            DedupConfig(method="hyperplane", vector_col="text"),
        )
    with pytest.raises(ConfigError, match="--vector-col: column 'vector' not in input"):
        run_dedup(spark, sample_path, str(tmp_path / "o"), DedupConfig(method="hyperplane"))
