"""MinHash throughput inside Spark next to a plain numpy loop on the same arrays.

    spark-submit --master 'local[2]' bench/minhash_throughput.py \\
        --shingles OUT/shingles [--num-perm 128] [--repeat 3]

``OUT/shingles`` is the ``shingles/`` dataset a stage run leaves behind
(``jobs/signatures.py --input ... --output OUT``).  The script times

* **spark**: ``lsh_spark.minhash.minhash`` over that dataset (Parquet read,
  Arrow transfer to the Python workers, the kernel, Arrow back), forced with
  Spark's ``noop`` sink on every core of the master;
* **numpy**: the textbook loop over the same shingle arrays, loaded into one
  process: for each permutation ``np.minimum.reduceat((a*x + b) % p, offsets)``,
  on one core, after a warm-up; once over the whole array and once per batch
  of 2,048 documents (Spark's Arrow batch size here), whose temporaries stay in
  the CPU caches.

Throughput is shingles x permutations per second per core; the fraction is
spark's per-core figure over the faster numpy variant's.  Prints one table and a JSON line.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lsh_spark.minhash import MERSENNE_31, minhash, permutation_params  # noqa: E402
from lsh_spark.session import build_session  # noqa: E402


def numpy_loop(values: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray
               ) -> np.ndarray:
    """The plain per-permutation loop: one pass of numpy ufuncs per permutation."""
    x = values % MERSENNE_31
    out = np.empty((len(a), len(offsets) - 1), dtype=np.uint64)
    for i in range(len(a)):
        out[i] = np.minimum.reduceat((x * a[i] + b[i]) % MERSENNE_31, offsets[:-1])
    return out.T


def numpy_loop_batched(values: np.ndarray, offsets: np.ndarray, a: np.ndarray,
                       b: np.ndarray, docs: int = 2048) -> np.ndarray:
    parts = []
    for d0 in range(0, len(offsets) - 1, docs):
        d1 = min(d0 + docs, len(offsets) - 1)
        parts.append(numpy_loop(values[offsets[d0]:offsets[d1]], offsets[d0:d1 + 1] - offsets[d0],
                                a, b))
    return np.concatenate(parts)


def load_flat(path: str) -> tuple[np.ndarray, np.ndarray]:
    files = sorted(glob.glob(os.path.join(path, "*.parquet")))
    table = pq.read_table(files, columns=["shingles"])
    col = table.column("shingles").combine_chunks()
    col = col.filter(pc.is_valid(col))
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = pc.list_flatten(col).to_numpy(zero_copy_only=False).view(np.uint64)
    return values, offsets


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shingles", required=True, help="a shingles/ dataset (Parquet folder)")
    p.add_argument("--num-perm", type=int, default=128)
    p.add_argument("--repeat", type=int, default=3, help="timed runs of each; the best counts")
    args = p.parse_args()

    values, offsets = load_flat(args.shingles)
    n_shingles, n_docs = len(values), len(offsets) - 1
    a, b = permutation_params(args.num_perm, 1)
    work = n_shingles * args.num_perm

    numpy_loop(values[: offsets[min(n_docs, 500)]], offsets[: min(n_docs, 500) + 1], a, b)
    np_whole = min(_timed(lambda: numpy_loop(values, offsets, a, b)) for _ in range(args.repeat))
    np_batch = min(_timed(lambda: numpy_loop_batched(values, offsets, a, b))
                   for _ in range(args.repeat))
    np_best = min(np_whole, np_batch)

    spark = build_session("lsh-spark minhash throughput")
    cores = spark.sparkContext.defaultParallelism
    df = spark.read.parquet(args.shingles).filter("shingles is not null").select("id", "shingles")
    sigs = minhash(df, args.num_perm, 1)
    sigs.write.format("noop").mode("overwrite").save()  # warm-up: workers, JIT
    sp_best = min(_timed(lambda: sigs.write.format("noop").mode("overwrite").save())
                  for _ in range(args.repeat))
    spark.stop()

    spark_rate = work / sp_best / cores
    numpy_rate = work / np_best
    result = {
        "documents": n_docs, "shingles": n_shingles, "num_perm": args.num_perm,
        "cores": cores,
        "spark_seconds": round(sp_best, 3),
        "numpy_seconds_one_core_whole_array": round(np_whole, 3),
        "numpy_seconds_one_core_per_batch": round(np_batch, 3),
        "spark_per_core_M_per_s": round(spark_rate / 1e6, 1),
        "numpy_per_core_M_per_s": round(numpy_rate / 1e6, 1),
        "fraction_of_numpy": round(spark_rate / numpy_rate, 3),
    }
    print(f"{n_docs} documents, {n_shingles} shingles, {args.num_perm} permutations, "
          f"{cores} cores")
    print("| path | seconds | shingles x permutations / s / core |")
    print("|---|---|---|")
    print(f"| lsh-spark minhash (Spark, {cores} cores, Parquet to Arrow to numpy and back) "
          f"| {sp_best:.2f} | {spark_rate / 1e6:.1f} M |")
    print(f"| plain numpy loop, whole array (1 core) | {np_whole:.2f} "
          f"| {work / np_whole / 1e6:.1f} M |")
    print(f"| plain numpy loop, per 2,048-document batch (1 core) | {np_batch:.2f} "
          f"| {work / np_batch / 1e6:.1f} M |")
    print(f"fraction of the faster numpy loop: {spark_rate / numpy_rate:.2f}")
    print(json.dumps(result))


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
