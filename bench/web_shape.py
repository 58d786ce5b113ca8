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

import pyarrow.dataset as ds

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from compare import measured_dedup  # noqa: E402
from make_corpus import build_once  # noqa: E402
from planted import quality, read_texts, sampled_edges  # noqa: E402
from scaling import STAGES  # noqa: E402
from stage_volumes import event_log_args, parse_event_logs  # noqa: E402


def corpus(args: argparse.Namespace, n: int, shape: str) -> str:
    return build_once(
        os.path.join(args.work, f"corpus-{n}-{shape}"),
        *("--source", args.source, "--n", str(n), "--shape", shape),
        *("--copy-share", str(args.copy_share), "--exponent", str(args.exponent)),
        *("--largest", str(args.largest)),
    )


def _quality(args: argparse.Namespace, out: str, path: str) -> dict:
    """:func:`planted.quality` of the run, on a sample of ``--quality-share`` of the
    groups and of the edges when it is below 1."""
    share = args.quality_share
    if share >= 1.0:
        return quality(out, *read_texts(path), args.threshold)
    edges = sampled_edges(out, share)
    also = {i for edge in edges for i in edge}
    return quality(out, *read_texts(path, share, also), args.threshold, share, edges)


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
        **_quality(args, out, path),
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
    p.add_argument(
        "--quality-share",
        type=float,
        default=1.0,
        help="score recall on this share of the copy groups and false edges on this share "
        "of pairs/ (a CRC-32 sample, the same on every run); below 1 for 10M documents, "
        "whose full scoring in pure Python takes most of an hour",
    )
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
