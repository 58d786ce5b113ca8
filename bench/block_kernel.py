"""Time the block-verification kernel on the largest block group of a staged run.

    spark-submit jobs/signatures.py --input CORPUS --output DIR
    spark-submit jobs/candidates.py --output DIR
    spark-submit --master 'local[2]' bench/block_kernel.py --run DIR

Extracts the largest block group (members, shingle sets, block keys) with
Spark, then runs ``lsh_spark.blocks._verify_block`` on every share of it, one
after the other in this process, the way the verification tasks do; prints
the kernel's seconds, the pairs and the time per pair.
"""

from __future__ import annotations

import argparse
import json
import time

import pyarrow as pa
import pyarrow.compute as pc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="output folder of the stage jobs")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--max-group-size", type=int, default=5000)
    ap.add_argument(
        "--max-family-size",
        type=int,
        default=None,
        help="families above it are written as spanning forests, as in "
        "dedup.py (default: none; every pair is computed and emitted)",
    )
    args = ap.parse_args()

    from pyspark.sql import functions as F

    from lsh_spark import blocks as V
    from lsh_spark.session import build_session

    spark = build_session("lsh-spark bench block kernel")
    blocks = spark.read.parquet(f"{args.run}/blocks")
    shingles = (
        spark.read.parquet(f"{args.run}/shingles")
        .filter(F.col("shingles").isNotNull())
        .select("id", "shingles")
    )
    memberships = V.block_memberships(blocks).persist()
    groups = V.block_groups(
        blocks, memberships, args.max_group_size, max_family_size=args.max_family_size
    ).persist()
    # The largest group and its number of shares, as the verification tasks get them.
    top = V.block_tasks(groups).filter(F.col("part") == 0).orderBy(F.desc("n")).first()
    if top is None:
        raise SystemExit(f"no blocks in {args.run}/blocks")
    # One group of at most --max-group-size members: small enough to collect.
    table = pa.Table.from_pandas(
        groups.filter(F.col("group") == top["group"])
        .join(memberships, "id")
        .join(shingles, "id")
        .select("group", "merged", "bounded", "id", "shingles", "in_blocks")
        .toPandas(),
        preserve_index=False,
    )
    spark.stop()

    n, parts = table.num_rows, int(top["parts"])
    start = time.perf_counter()
    pairs = 0
    for part in range(parts):
        share = table.append_column("part", pa.array([part] * n, pa.int32())).append_column(
            "parts", pa.array([parts] * n, pa.int32())
        )
        pairs += V._verify_block(share, args.threshold).num_rows
    seconds = time.perf_counter() - start
    values = int(pc.sum(pc.list_value_length(table.column("shingles"))).as_py())
    print(
        json.dumps(
            {
                "members": n,
                "shingles": values,
                "shares": parts,
                "pairs": pairs,
                "kernel_seconds": round(seconds, 2),
                "ns_per_pair": round(seconds / max(pairs, 1) * 1e9, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
