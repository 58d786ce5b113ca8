"""Scaling and skew runs of jobs/dedup.py: time per stage and per document.

    python bench/scaling.py --source ../shared/data/pan13 --work bench/out/scaling \\
        --sizes 10000,100000,1000000 --template-shares 0
    python bench/scaling.py --source ../shared/data/pan13 --work bench/out/scaling \\
        --sizes 100000 --template-shares 0,0.05,0.2

For every (size, template share) it builds the corpus with bench/make_corpus.py
(once; reused when present), runs ``spark-submit jobs/dedup.py`` on it as the
README does (wall time and peak memory of the whole process tree measured as in
bench/compare.py) and reads the run's report.json.  Ground truth comes from the
planted families: the exact Jaccard of every pair inside each family
(tests/reference.py shingles), so recall and candidate pairs per true pair are
measured at every size without an all-pairs pass; the template family's own
pairs are left out of both (its members' clustering is reported instead).

Prints one table, the growth ratios between consecutive sizes, the skew ratios
against share 0 at the same size, and writes ``scaling.json`` under ``--work``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from itertools import combinations

import pyarrow.compute as pc
import pyarrow.dataset as ds

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from compare import ALL_PAIRS_BOUND, measured_dedup  # noqa: E402
from make_corpus import build_once  # noqa: E402
from reference import jaccard, word_shingles  # noqa: E402

STAGES = ("read", "signatures", "candidates", "verify", "cluster", "forest", "deduped")


def corpus(args: argparse.Namespace, n: int, share: float) -> str:
    return build_once(
        os.path.join(args.work, f"corpus-{n}-t{share:g}"),
        *("--source", args.source, "--n", str(n), "--template-share", str(share)),
    )


def planted_truth(path: str, threshold: float) -> tuple[set, int]:
    """Pairs inside planted families (not the template) with exact J >= threshold."""
    families: dict[str, list[tuple[str, str]]] = defaultdict(list)
    template = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            if d["family"] == "template":
                template += 1
            elif d["family"][0] in "fe":
                families[d["family"]].append((d["id"], d["text"]))
    truth = set()
    for members in families.values():
        sh = {i: word_shingles(t) for i, t in members}
        for a, b in combinations(sorted(sh), 2):
            if jaccard(sh[a], sh[b]) >= threshold:
                truth.add((a, b))
    return truth, template


def found(run: str, truth: set) -> int:
    ids = sorted({i for p in truth for i in p})
    pairs = ds.dataset(os.path.join(run, "pairs"), format="parquet").to_table(
        columns=["id_a", "id_b"], filter=pc.field("id_a").isin(ids)
    )
    got = set(zip(pairs.column("id_a").to_pylist(), pairs.column("id_b").to_pylist(), strict=False))
    return len(truth & got)


def template_clustering(run: str, n_template: int) -> float | None:
    if not n_template:
        return None
    t = ds.dataset(os.path.join(run, "clusters"), format="parquet").to_table(
        columns=["id", "cluster_id"], filter=pc.starts_with(pc.field("id"), "t")
    )
    counts = pc.value_counts(t.column("cluster_id")).field("counts").to_pylist()
    return max(counts) / n_template


def run_one(args: argparse.Namespace, n: int, share: float) -> dict:
    path = corpus(args, n, share)
    out = os.path.join(args.work, f"run-{n}-t{share:g}")
    print(f"running n={n} template-share={share:g} ...", flush=True)
    # found() scores pairs: every verified pair, not only the edges.
    m, report = measured_dedup(
        args, path, out, "--pairs", "all", "--max-all-pairs", str(ALL_PAIRS_BOUND)
    )
    truth, n_template = planted_truth(path, args.threshold)
    hit = found(out, truth)
    counts, buckets = report["counts"], report["buckets"]
    row = {
        "documents": counts["input_records"],
        "template_share": share,
        "wall_seconds": round(m["seconds"], 1),
        "stage_seconds": {s: report["seconds"].get(s) for s in STAGES},
        "ms_per_document": round(1000 * m["seconds"] / counts["input_records"], 3),
        "candidate_pairs": counts["candidate_pairs"],
        "verified_pairs": counts["verified_pairs"],
        "planted_true_pairs": len(truth),
        "planted_recall": round(hit / max(len(truth), 1), 4),
        "candidates_per_planted_true_pair": round(
            counts["candidate_pairs"] / max(len(truth), 1), 2
        ),
        "bounded_buckets": buckets["bounded_buckets"],
        "blocks": buckets.get("blocks"),
        "forest_families": report["block_verification"]["forest_families"],
        "forest_family_documents": report["block_verification"]["forest_family_documents"],
        "template_documents": n_template,
        "template_largest_cluster_share": template_clustering(out, n_template),
        "peak_mem_mib": m["peak_mem_mib"],
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", required=True, help="folder of .txt files (e.g. pan13)")
    p.add_argument("--work", required=True)
    p.add_argument("--sizes", default="10000,100000")
    p.add_argument("--template-shares", default="0")
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="4g")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rows = [
        run_one(args, int(n), float(s))
        for s in args.template_shares.split(",")
        for n in args.sizes.split(",")
    ]

    print(
        "| documents | template share | wall s | "
        + " | ".join(STAGES)
        + " | ms/doc | candidate pairs | verified pairs | planted recall "
        "| candidates per true pair | bounded buckets | families as forests (documents) "
        "| peak memory MiB |"
    )
    print("|" + "---|" * (len(STAGES) + 11))
    for r in rows:
        st = " | ".join(f"{r['stage_seconds'][s] or 0:.1f}" for s in STAGES)
        print(
            f"| {r['documents']} | {r['template_share']:g} | {r['wall_seconds']} | {st} "
            f"| {r['ms_per_document']} | {r['candidate_pairs']} | {r['verified_pairs']} "
            f"| {r['planted_recall']} | {r['candidates_per_planted_true_pair']} "
            f"| {r['bounded_buckets']} "
            f"| {r['forest_families']} ({r['forest_family_documents']}) "
            f"| {r['peak_mem_mib']} |"
        )
    ratios = {}
    by_share = defaultdict(list)
    for r in rows:
        by_share[r["template_share"]].append(r)
    for share, rs in by_share.items():
        rs.sort(key=lambda r: r["documents"])
        for a, b in zip(rs, rs[1:], strict=False):
            key = f"time({b['documents']})/time({a['documents']}) at share {share:g}"
            ratios[key] = round(b["wall_seconds"] / a["wall_seconds"], 2)
    base = {r["documents"]: r for r in rows if r["template_share"] == 0}
    for r in rows:
        if r["template_share"] and r["documents"] in base:
            key = f"skew cost at {r['documents']} docs, share {r['template_share']:g}"
            ratios[key] = round(r["wall_seconds"] / base[r["documents"]]["wall_seconds"], 2)
    for k, v in ratios.items():
        print(f"{k}: {v}")
    with open(os.path.join(args.work, "scaling.json"), "w", encoding="utf-8") as fh:
        json.dump({"rows": rows, "ratios": ratios}, fh, indent=2)


if __name__ == "__main__":
    main()
