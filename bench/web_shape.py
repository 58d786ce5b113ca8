"""Web-shaped duplicates against flat ones: does a run cost what its documents cost?

    python bench/web_shape.py --source ../shared/data/pan13 --work bench/out/web \\
        --sizes 1000000 --shapes web,flat
    python bench/web_shape.py --source ../shared/data/pan13 --work bench/out/web \\
        --sizes 100000,1000000,3000000 --shapes web

For every (size, shape) it builds the corpus with ``bench/make_corpus.py --shape``
(once; reused when present): ``web`` plants copies in groups of power-law sizes
(the largest 50,000 copies by default), ``flat`` the same number of copies of the
same kinds, one per original.  It runs ``spark-submit jobs/dedup.py`` on it as the
README does, with Spark's event log on, and measures

* wall time, CPU seconds of the whole process tree, the peak memory of the tree,
  of the JVM (driver and executor in local mode) and of the largest Python process;
* from the event log (bench/stage_volumes.py), per pipeline stage: bytes read (the
  input and the run's own datasets: Spark's input metrics do not say which) and
  shuffle bytes written, their totals divided by the input's bytes;
* rows of ``pairs/`` per document;
* quality against the planted copies: a copy whose exact Jaccard with its original
  (tests/reference.py word 5-shingles) is at least the threshold must be removed
  (recall); every edge of ``pairs/`` must have an exact Jaccard of at least the
  threshold (false edges, which would make removals wrong); removals in favour of a
  document of another group are counted (the source texts share passages).

Prints one table and the ratios web/flat at each size and between consecutive sizes,
and writes ``web_shape-<sizes>-<shapes>.json`` under ``--work``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from compare import measured_dedup  # noqa: E402
from make_corpus import build_once  # noqa: E402
from reference import word_shingles  # noqa: E402
from scaling import STAGES  # noqa: E402
from stage_volumes import event_log_args, parse_event_logs  # noqa: E402


def corpus(args: argparse.Namespace, n: int, shape: str) -> str:
    return build_once(
        os.path.join(args.work, f"corpus-{n}-{shape}"),
        *("--source", args.source, "--n", str(n), "--shape", shape),
        *("--copy-share", str(args.copy_share), "--exponent", str(args.exponent)),
        *("--largest", str(args.largest)),
    )


def read_texts(path: str) -> tuple[dict[str, str], dict[str, str]]:
    """Each document's text by id, and each group's original (its id) by group."""
    texts, originals = {}, {}
    with open(path, encoding="utf-8") as fh:
        for d in map(json.loads, fh):
            texts[d["id"]] = d["text"]
            if d.get("original"):
                originals[group(d["id"])] = d["id"]
    if not originals:
        raise SystemExit(
            f'{path}: no document is marked "original"; it was built by an earlier '
            "bench/make_corpus.py: delete its folder to build it again"
        )
    return texts, originals


def group(doc_id: str) -> str:
    return doc_id.partition("-")[0]


class Shingles:
    """Each document's word 5-shingles (tests/reference.py), computed once, kept as a
    sorted array of their hashes: about 1 KB a document instead of a set of strings."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts
        self.sets: dict[str, np.ndarray] = {}

    def __getitem__(self, doc_id: str) -> np.ndarray:
        got = self.sets.get(doc_id)
        if got is None:
            hashes = [hash(s) for s in word_shingles(self.texts[doc_id])]
            got = self.sets[doc_id] = np.unique(np.array(hashes, dtype=np.int64))
        return got

    def jaccard(self, a: str, b: str) -> float:
        x, y = self[a], self[b]
        inter = len(np.intersect1d(x, y, assume_unique=True))
        return inter / (len(x) + len(y) - inter)


def planted_copies(shingles: Shingles, originals: dict[str, str], threshold: float) -> set[str]:
    """Ids of the copies whose exact Jaccard with their group's original is >= threshold."""
    return {
        i
        for i in shingles.texts
        if group(i) in originals
        and i != originals[group(i)]
        and shingles.jaccard(i, originals[group(i)]) >= threshold
    }


def quality(run: str, texts: dict[str, str], originals: dict[str, str], threshold: float) -> dict:
    """Recall of the planted copies (the share in one cluster with their original),
    and the checks that make every removal right.

    The source texts repeat passages (PAN13 is a text-reuse corpus), so documents of
    different groups can be true near-duplicates: a removal across groups is counted,
    not assumed wrong.  What would make a removal wrong is an edge of ``pairs/`` whose
    exact Jaccard (reference shingling) is below the threshold: ``false_edges``.
    """
    shingles = Shingles(texts)
    planted = planted_copies(shingles, originals, threshold)
    clusters = ds.dataset(os.path.join(run, "clusters"), format="parquet").to_table(
        columns=["id", "cluster_id", "keep"]
    )
    ids, cluster_ids, keeps = (clusters.column(n).to_pylist() for n in clusters.column_names)
    kept = {c: i for i, c, k in zip(ids, cluster_ids, keeps, strict=True) if k}
    # A planted copy is found when it shares a cluster with its original: one of the
    # two is then removed (whichever --keep keeps).
    cluster_of = dict(zip(ids, cluster_ids, strict=True))
    found = sum(cluster_of[i] == cluster_of[originals[group(i)]] for i in planted)
    removed = clusters.filter(~pc.field("keep"))
    removed_ids = removed.column("id").to_pylist()
    across = sum(
        group(i) != group(kept[c])
        for i, c in zip(removed_ids, removed.column("cluster_id").to_pylist(), strict=True)
    )
    pairs = ds.dataset(os.path.join(run, "pairs"), format="parquet").to_table(
        columns=["id_a", "id_b"]
    )
    false_edges = sum(
        shingles.jaccard(a, b) < threshold - 1e-9
        for a, b in zip(
            pairs.column("id_a").to_pylist(), pairs.column("id_b").to_pylist(), strict=True
        )
    )
    return {
        "planted_copies": len(planted),
        "removed": len(removed_ids),
        "recall": round(found / max(1, len(planted)), 4),
        "removals_across_groups": across,
        "false_edges": false_edges,
    }


def run_one(args: argparse.Namespace, n: int, shape: str) -> dict:
    path = corpus(args, n, shape)
    out = os.path.join(args.work, f"run-{n}-{shape}")
    events = os.path.join(args.work, f"events-{n}-{shape}")
    subprocess.run(["rm", "-rf", events], check=True)
    os.makedirs(events)
    print(f"running n={n} shape={shape} ...", flush=True)
    m, report = measured_dedup(args, path, out, spark_args=tuple(event_log_args(events)))
    docs = report["counts"]["input_records"]
    in_bytes = os.path.getsize(path)
    volumes = parse_event_logs(events)
    shuffle = {s: v.get("shuffle_write_bytes", 0) for s, v in volumes.items()}
    reads = {s: v.get("input_bytes", 0) for s, v in volumes.items()}
    read = sum(reads.values())
    pairs = ds.dataset(os.path.join(out, "pairs"), format="parquet").count_rows()
    row = {
        "documents": docs,
        "shape": shape,
        "input_bytes": in_bytes,
        "wall_seconds": m["seconds"],
        "cpu_seconds": m["cpu_seconds"],
        "stage_seconds": {s: report["seconds"].get(s) for s in STAGES},
        "pairs_rows": pairs,
        "pairs_per_document": round(pairs / docs, 3),
        "pairs_per_removed_document": round(
            pairs / max(1, report["counts"]["removed_documents"]), 3
        ),
        # report.json's CPU seconds by stage and process (driver, JVM, Python workers).
        "stage_cpu_seconds": {s: report.get("cpu_seconds", {}).get(s) for s in STAGES},
        "input_bytes_read_per_input_byte": round(read / in_bytes, 2),
        "shuffle_bytes_per_input_byte": round(sum(shuffle.values()) / in_bytes, 2),
        "shuffle_bytes_by_stage": shuffle,
        "read_bytes_by_stage": reads,
        "peak_tree_mib": m["peak_mem_mib"],
        "peak_jvm_mib": m["peak_jvm_mib"],
        "peak_python_process_mib": m["peak_python_process_mib"],
        **quality(out, *read_texts(path), args.threshold),
    }
    print(json.dumps(row), flush=True)
    return row


def print_stage_cpu(rows: list[dict]) -> None:
    """CPU seconds per GB of input by stage: driver, JVM, Python workers (report.json)."""
    kinds = ("driver", "jvm", "python_workers")
    print("\nCPU seconds per GB of input, by stage: driver / JVM / Python workers (wall)")
    print("| documents | shape | " + " | ".join(STAGES) + " |")
    print("|" + "---|" * (len(STAGES) + 2))
    for r in rows:
        gb = r["input_bytes"] / 1e9
        cells = []
        for stage in STAGES:
            cpu = r["stage_cpu_seconds"].get(stage) or {}
            wall = (r["stage_seconds"].get(stage) or 0) / gb
            cells.append(
                " / ".join(f"{cpu.get(k, 0) / gb:.1f}" for k in kinds) + f" ({wall:.1f})"
                if cpu
                else "-"
            )
        print(f"| {r['documents']:,} | {r['shape']} | " + " | ".join(cells) + " |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", required=True, help="folder of .txt files (e.g. pan13)")
    p.add_argument("--work", required=True)
    p.add_argument("--sizes", default="1000000")
    p.add_argument("--shapes", default="web,flat")
    p.add_argument("--copy-share", type=float, default=0.3)
    p.add_argument("--exponent", type=float, default=1.8)
    p.add_argument("--largest", type=int, default=50000)
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="4g")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rows = [
        run_one(args, int(n), shape)
        for n in args.sizes.split(",")
        for shape in args.shapes.split(",")
    ]
    print(
        "| documents | shape | wall s | CPU s | "
        + " | ".join(STAGES)
        + " | pairs/doc | read B/B | shuffle B/B | recall | false edges | removals across groups "
        "| peak tree MiB | JVM MiB | largest Python MiB |"
    )
    print("|" + "---|" * (len(STAGES) + 13))
    for r in rows:
        st = " | ".join(f"{r['stage_seconds'][s] or 0:.1f}" for s in STAGES)
        print(
            f"| {r['documents']:,} | {r['shape']} | {r['wall_seconds']} | {r['cpu_seconds']} "
            f"| {st} | {r['pairs_per_document']} | {r['input_bytes_read_per_input_byte']} "
            f"| {r['shuffle_bytes_per_input_byte']} | {r['recall']} | {r['false_edges']} "
            f"| {r['removals_across_groups']} "
            f"| {r['peak_tree_mib']} | {r['peak_jvm_mib']} | {r['peak_python_process_mib']} |"
        )
    ratios = {}
    by = {(r["documents"], r["shape"]): r for r in rows}
    for (docs, shape), r in by.items():
        if shape == "web" and (docs, "flat") in by:
            ratios[f"time(web)/time(flat) at {docs:,}"] = round(
                r["wall_seconds"] / by[(docs, "flat")]["wall_seconds"], 2
            )
    for shape in args.shapes.split(","):
        rs = sorted((r for r in rows if r["shape"] == shape), key=lambda r: r["documents"])
        for a, b in zip(rs, rs[1:], strict=False):
            key = f"time({b['documents']:,})/time({a['documents']:,}) {shape}"
            ratios[key] = round(b["wall_seconds"] / a["wall_seconds"], 2)
    for k, v in ratios.items():
        print(f"{k}: {v}")
    print_stage_cpu(rows)
    name = f"web_shape-{args.sizes.replace(',', '_')}-{args.shapes.replace(',', '_')}.json"
    with open(os.path.join(args.work, name), "w", encoding="utf-8") as fh:
        json.dump({"rows": rows, "ratios": ratios}, fh, indent=2)


if __name__ == "__main__":
    main()
