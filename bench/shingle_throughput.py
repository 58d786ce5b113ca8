"""Word shingling of the signature pass, compiled kernels next to the numpy path.

    python bench/shingle_throughput.py --corpus CORPUS.jsonl [--k 5] [--repeat 5]

Reads the ``text`` field of a JSON-lines corpus, normalizes it in batches of
2,048 texts (Spark's Arrow batch size in the jobs) and times
``lsh_spark.shingle.word_shingles_arrow`` over all batches with each kernel
(``compiled``: numba loops for the token hashes and the k-gram chain;
``numpy``: the same arithmetic vectorized), on one core, best of ``--repeat``
after one untimed pass each (which also loads or compiles the kernels).  Both
must give the same shingle sets; the script stops if they differ.  Prints one
table and a JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lsh_spark.kernels import KERNELS  # noqa: E402
from lsh_spark.normalize import normalize_array  # noqa: E402
from lsh_spark.shingle import word_shingles_arrow  # noqa: E402

BATCH = 2048


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True, help="JSON lines with a 'text' field")
    p.add_argument("--k", type=int, default=5, help="words per shingle (default 5)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeat", type=int, default=5, help="timed passes per kernel")
    args = p.parse_args()
    table = pj.read_json(args.corpus, read_options=pj.ReadOptions(block_size=1 << 26))
    texts = table.column("text").combine_chunks()
    norms = [normalize_array(texts.slice(i, BATCH)) for i in range(0, len(texts), BATCH)]
    tokens = sum(
        int(
            pa.compute.sum(pa.compute.list_value_length(pa.compute.split_pattern(n, " "))).as_py()
            or 0
        )
        for n in norms
    )
    best, sets = {}, {}
    for kernel in KERNELS:
        sets[kernel] = [word_shingles_arrow(n, args.k, args.seed, kernel) for n in norms]
    if not all(a.equals(b) for a, b in zip(*sets.values(), strict=False)):
        raise SystemExit("the kernels gave different shingle sets")
    shingles = sum(len(s.values) for s in sets[KERNELS[0]])
    for _ in range(args.repeat):
        for kernel in KERNELS:  # alternated, so drift hits both alike
            start = time.perf_counter()
            for n in norms:
                word_shingles_arrow(n, args.k, args.seed, kernel)
            best[kernel] = min(best.get(kernel, np.inf), time.perf_counter() - start)
    print(
        f"{len(texts):,} texts, {tokens:,} tokens, {shingles:,} distinct shingles "
        f"(k={args.k}), batches of {BATCH}, one core, best of {args.repeat}"
    )
    print(f"{'kernel':<10} {'seconds':>8} {'tokens/s':>14}")
    for kernel in KERNELS:
        print(f"{kernel:<10} {best[kernel]:8.3f} {tokens / best[kernel]:14,.0f}")
    print(
        json.dumps(
            {
                "texts": len(texts),
                "tokens": tokens,
                "shingles": shingles,
                "k": args.k,
                "seconds": {k: round(v, 3) for k, v in best.items()},
                "speedup": round(best["numpy"] / best["compiled"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
