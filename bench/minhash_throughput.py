"""MinHash throughput inside Spark next to a plain numpy loop on the same arrays.

    spark-submit --master 'local[2]' bench/minhash_throughput.py \\
        --shingles OUT/shingles [--num-perm 128] [--repeat 3]

``OUT/shingles`` is the ``shingles/`` dataset a stage run leaves behind
(``jobs/signatures.py --input ... --output OUT``).  The script times

* **spark**: ``lsh_spark.signature.minhash`` over that dataset (Parquet read,
  Arrow transfer to the Python workers, the kernel, Arrow back), forced with
  Spark's ``noop`` sink on every core of the master, once with each of
  lsh-spark's kernels (compiled and numpy, chosen in the workers by
  ``LSH_SPARK_KERNELS``);
* **kernels**: ``lsh_spark.signature.minhash_flat`` with each kernel over the
  same shingle arrays loaded into one process, on one core;
* **numpy**: the textbook loop over the same arrays, on one core, after a
  warm-up: for each permutation ``np.minimum.reduceat((a*x + b) % p, offsets)``,
  once over the whole array and once per batch of 2,048 documents (Spark's
  Arrow batch size here), whose temporaries stay in the CPU caches.

Throughput is shingles x permutations per second per core; the fraction is
spark's per-core figure (default kernel) over the faster numpy variant's.
Prints one table and a JSON line.
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

from lsh_spark.kernels import ENV, KERNELS  # noqa: E402
from lsh_spark.session import build_session  # noqa: E402
from lsh_spark.signature import MERSENNE_31, minhash, minhash_flat, permutation_params  # noqa: E402


def numpy_loop(values: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The plain per-permutation loop: one pass of numpy ufuncs per permutation."""
    x = values % MERSENNE_31
    out = np.empty((len(a), len(offsets) - 1), dtype=np.uint64)
    for i in range(len(a)):
        out[i] = np.minimum.reduceat((x * a[i] + b[i]) % MERSENNE_31, offsets[:-1])
    return out.T


def numpy_loop_batched(
    values: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray, docs: int = 2048
) -> np.ndarray:
    parts = []
    for d0 in range(0, len(offsets) - 1, docs):
        d1 = min(d0 + docs, len(offsets) - 1)
        parts.append(
            numpy_loop(values[offsets[d0] : offsets[d1]], offsets[d0 : d1 + 1] - offsets[d0], a, b)
        )
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
    np_whole = _best(args.repeat, numpy_loop, values, offsets, a, b)
    np_batch = _best(args.repeat, numpy_loop_batched, values, offsets, a, b)
    np_best = min(np_whole, np_batch)
    kernel_s = {}
    for kernel in KERNELS:
        minhash_flat(values[: offsets[1]], offsets[:2], a, b, kernel)  # compile / load
        kernel_s[kernel] = _best(args.repeat, minhash_flat, values, offsets, a, b, kernel)

    spark = build_session("lsh-spark minhash throughput")
    cores = spark.sparkContext.defaultParallelism
    spark_s = {}
    for kernel in KERNELS:
        # The Python workers' environment travels with the function.
        spark.sparkContext.environment[ENV] = kernel
        df = (
            spark.read.parquet(args.shingles)
            .filter("shingles is not null")
            .select("id", "shingles")
        )
        sigs = minhash(df, args.num_perm, 1)
        _noop(sigs)  # warm-up: workers, JIT
        spark_s[kernel] = _best(args.repeat, _noop, sigs)
    spark.stop()
    sp_best = spark_s["compiled"]

    spark_rate = work / sp_best / cores
    numpy_rate = work / np_best
    result = {
        "documents": n_docs,
        "shingles": n_shingles,
        "num_perm": args.num_perm,
        "cores": cores,
        "spark_seconds": round(sp_best, 3),
        "spark_seconds_numpy_kernel": round(spark_s["numpy"], 3),
        "kernel_seconds_one_core": {k: round(v, 3) for k, v in kernel_s.items()},
        "numpy_seconds_one_core_whole_array": round(np_whole, 3),
        "numpy_seconds_one_core_per_batch": round(np_batch, 3),
        "spark_per_core_M_per_s": round(spark_rate / 1e6, 1),
        "numpy_per_core_M_per_s": round(numpy_rate / 1e6, 1),
        "fraction_of_numpy": round(spark_rate / numpy_rate, 3),
    }
    print(f"{n_docs} documents, {n_shingles} shingles, {args.num_perm} permutations, {cores} cores")
    print("| path | seconds | shingles x permutations / s / core |")
    print("|---|---|---|")
    for kernel in KERNELS:
        print(
            f"| lsh-spark minhash, {kernel} kernel (Spark, {cores} cores, Parquet to Arrow "
            f"to the kernel and back) | {spark_s[kernel]:.2f} "
            f"| {work / spark_s[kernel] / cores / 1e6:.1f} M |"
        )
    for kernel in KERNELS:
        print(
            f"| lsh-spark {kernel} kernel alone, whole array (1 core) | {kernel_s[kernel]:.2f} "
            f"| {work / kernel_s[kernel] / 1e6:.1f} M |"
        )
    print(
        f"| plain numpy loop, whole array (1 core) | {np_whole:.2f} "
        f"| {work / np_whole / 1e6:.1f} M |"
    )
    print(
        f"| plain numpy loop, per 2,048-document batch (1 core) | {np_batch:.2f} "
        f"| {work / np_batch / 1e6:.1f} M |"
    )
    print(f"fraction of the faster numpy loop: {spark_rate / numpy_rate:.2f}")
    print(json.dumps(result))


def _noop(df) -> None:
    df.write.format("noop").mode("overwrite").save()


def _best(repeat: int, fn, *args) -> float:
    """The fastest of ``repeat`` timed calls of ``fn(*args)``."""
    return min(_timed(fn, *args) for _ in range(repeat))


def _timed(fn, *args) -> float:
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
