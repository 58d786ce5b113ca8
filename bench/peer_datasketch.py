"""Peer: datasketch MinHashLSH in one process, with exact verification of candidates.

    python bench/peer_datasketch.py --corpus C.jsonl --out DIR [--threshold 0.8] [--num-perm 128] \\
        [--id-col id] [--text-col text]

Reads the corpus as the ground truth does (``quality.load``: the same records,
normalization and word 5-grams, from tests/reference.py),
``MinHash.bulk`` for the signatures, ``MinHashLSH(threshold, num_perm)`` with its
default false-positive/false-negative weights (0.5, 0.5) for the banding, one
query per document, exact Jaccard of every candidate with Python sets.
Writes ``pairs.jsonl`` and prints a JSON line.
"""

import argparse
import json
import os
import sys
import time

from datasketch import MinHash, MinHashLSH

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import corpus_arguments, load  # noqa: E402


def main() -> None:
    p = corpus_arguments(argparse.ArgumentParser())
    p.add_argument("--out", required=True)
    p.add_argument("--num-perm", type=int, default=128)
    args = p.parse_args()
    start = time.perf_counter()
    # The records the ground truth reads, shingled as it shingles them.
    docs = load(args.corpus, args.id_col, args.text_col, 5)
    ids, sets = list(docs), list(docs.values())
    sigs = MinHash.bulk(
        [[s.encode("utf-8") for s in sh] for sh in sets], num_perm=args.num_perm, seed=1
    )
    lsh = MinHashLSH(threshold=args.threshold, num_perm=args.num_perm)
    for i, m in enumerate(sigs):
        lsh.insert(i, m)
    cands = set()
    for i, m in enumerate(sigs):
        for j in lsh.query(m):
            if j != i:
                cands.add((min(i, j), max(i, j)))
    os.makedirs(args.out, exist_ok=True)
    n = 0
    with open(os.path.join(args.out, "pairs.jsonl"), "w") as out:
        for i, j in cands:
            inter = len(sets[i] & sets[j])
            jac = inter / (len(sets[i]) + len(sets[j]) - inter)
            if jac >= args.threshold:
                a, b = sorted((ids[i], ids[j]))
                out.write(json.dumps({"id_a": a, "id_b": b, "jaccard": jac}) + "\n")
                n += 1
    print(
        json.dumps(
            {
                "system": "datasketch",
                "bands_rows": list(lsh.b_r) if hasattr(lsh, "b_r") else [lsh.b, lsh.r],
                "candidate_pairs": len(cands),
                "verified_pairs": n,
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
