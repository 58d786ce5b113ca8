"""p-stable LSH side by side with Spark MLlib's BucketedRandomProjectionLSH.

    python bench/vectors_compare.py --work bench/out/vectors [--n 20000 --dim 32]

Generates ``--n`` Gaussian vectors (scale 1 per coordinate) of ``--dim``
dimensions; every fifth gets a planted neighbour at a distance drawn uniformly
from [0, 1.5 x --max-distance].  The truth is exact: all pairs within
``--max-distance``, by brute force (numpy, in blocks).  Both systems run in one
``local[2]`` session on the same Parquet file:

* lsh-spark: ``run_dedup`` with ``--method pstable`` (what ``jobs/dedup.py`` runs),
  default (b, r) and bucket width;
* MLlib: ``BucketedRandomProjectionLSH`` + ``approxSimilarityJoin`` at the same
  distance.  MLlib ORs single-projection tables (no AND within a table), so for
  each bucket length w in {1, 2, 4} x max-distance the script takes the fewest
  tables with P(max-distance) >= 0.99, and runs the w with the fewest expected
  candidate pairs (from the p-stable formula over the sampled distance
  distribution).

Prints time, candidate and verified pairs, recall and false pairs for each, and
writes ``vectors.json`` under ``--work``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from lsh_spark.config import DedupConfig, pstable_probability  # noqa: E402
from lsh_spark.pipeline import run_dedup  # noqa: E402


def brute_force(x: np.ndarray, radius: float, block: int = 2048) -> set[tuple[int, int]]:
    sq = (x * x).sum(axis=1)
    pairs = set()
    for s in range(0, len(x), block):
        d2 = sq[s : s + block, None] + sq[None, :] - 2 * x[s : s + block] @ x.T
        ii, jj = np.nonzero(d2 <= radius * radius * (1 + 1e-9))
        for i, j in zip(ii + s, jj, strict=False):
            if i < j and np.linalg.norm(x[i] - x[j]) <= radius:
                pairs.add((int(i), int(j)))
    return pairs


def mllib_choice(x: np.ndarray, radius: float, rng) -> dict:
    """Bucket length and tables for MLlib with P(radius) >= 0.99 at the least cost."""
    idx = rng.integers(0, len(x), size=(20000, 2))
    dists = np.linalg.norm(x[idx[:, 0]] - x[idx[:, 1]], axis=1)
    best = None
    for mult in (1, 2, 4):
        w = mult * radius
        p = pstable_probability(radius, w)
        tables = max(1, math.ceil(math.log(0.01) / math.log(1 - p)))
        frac = np.mean([1 - (1 - pstable_probability(d, w)) ** tables for d in dists])
        cost = frac * len(x) * (len(x) - 1) / 2
        if best is None or cost < best["expected_candidates"]:
            best = {
                "bucket_length": w,
                "tables": tables,
                "expected_candidates": float(cost),
                "p_at_radius": p,
            }
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True)
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--max-distance", type=float, default=1.0)
    p.add_argument("--skip-mllib", action="store_true")
    args = p.parse_args()
    from pyspark.ml.feature import BucketedRandomProjectionLSH
    from pyspark.ml.linalg import Vectors
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    rng = np.random.default_rng(42)
    x = rng.standard_normal((args.n, args.dim))
    for i in range(0, args.n - 1, 5):
        d = rng.standard_normal(args.dim)
        x[i + 1] = x[i] + d / np.linalg.norm(d) * rng.uniform(0, 1.5 * args.max_distance)
    t0 = time.perf_counter()
    truth = brute_force(x, args.max_distance)
    print(
        f"{len(truth)} true pairs within {args.max_distance} (brute force "
        f"{time.perf_counter() - t0:.1f} s)",
        flush=True,
    )

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench vectors")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    data = os.path.join(args.work, "vectors.parquet")
    spark.createDataFrame(
        [(f"{i:07d}", Vectors.dense(v.tolist())) for i, v in enumerate(x)], ["id", "features"]
    ).write.parquet(data)
    result = {
        "n": args.n,
        "dim": args.dim,
        "max_distance": args.max_distance,
        "true_pairs": len(truth),
    }

    def score(found: set[tuple[int, int]]) -> dict:
        return {
            "verified_pairs": len(found),
            "recall": round(len(found & truth) / len(truth), 4),
            "false_pairs": len(found - truth),
        }

    t0 = time.perf_counter()
    cfg = DedupConfig(method="pstable", max_distance=args.max_distance, vector_col="features")
    report = run_dedup(spark, data, os.path.join(args.work, "lsh-spark"), cfg)
    secs = time.perf_counter() - t0
    ours = {
        tuple(sorted((int(r["id_a"]), int(r["id_b"]))))
        for r in spark.read.parquet(os.path.join(args.work, "lsh-spark", "pairs")).collect()
    }
    result["lsh_spark"] = dict(
        score(ours),
        seconds=round(secs, 1),
        candidate_pairs=report["counts"]["candidate_pairs"],
        bands=report["banding"]["bands"],
        rows=report["banding"]["rows"],
        bucket_width=report["banding"]["bucket_width"],
    )
    print("lsh-spark", json.dumps(result["lsh_spark"]), flush=True)

    if not args.skip_mllib:
        choice = mllib_choice(x, args.max_distance, rng)
        print("MLlib parameters", json.dumps(choice), flush=True)
        df = spark.read.parquet(data)
        t0 = time.perf_counter()
        model = BucketedRandomProjectionLSH(
            inputCol="features",
            outputCol="hashes",
            bucketLength=choice["bucket_length"],
            numHashTables=choice["tables"],
            seed=7,
        ).fit(df)
        joined = (
            model.approxSimilarityJoin(df, df, args.max_distance, distCol="distance")
            .select(F.col("datasetA.id").alias("a"), F.col("datasetB.id").alias("b"))
            .filter(F.col("a") < F.col("b"))
        )
        rows = joined.collect()
        secs = time.perf_counter() - t0
        theirs = {(int(r["a"]), int(r["b"])) for r in rows}
        result["mllib"] = dict(score(theirs), seconds=round(secs, 1), **choice)
        print("MLlib", json.dumps(result["mllib"]), flush=True)
    spark.stop()
    print(
        "\n| system | seconds | candidate pairs | verified pairs | recall | false pairs |"
        "\n|---|---|---|---|---|---|"
    )
    for name in ("lsh_spark", "mllib"):
        if name in result:
            r = result[name]
            cands = r.get("candidate_pairs", round(r.get("expected_candidates", 0)))
            print(
                f"| {name} | {r['seconds']} | {cands:,} | {r['verified_pairs']:,} | "
                f"{r['recall']} | {r['false_pairs']} |"
            )
    with open(os.path.join(args.work, "vectors.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
