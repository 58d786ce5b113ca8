"""Bytes per document at each stage, measured from a real run's Spark event logs.

    python bench/stage_volumes.py --input bench/out/scaling/corpus-100000-t0/corpus.jsonl \\
        --work bench/out/volumes [--master 'local[2]']

Runs the four stage jobs (jobs/signatures.py, candidates.py, verify.py,
cluster.py) into ``--work/out`` with Spark's event log on, so every dataset stays
on disk (``dedup.py`` deletes ``shingles/``).  Then it reads

* the size on disk of every output dataset (``shingles/``, ``signatures/``,
  ``candidates/``, ``blocks/``, ``pairs/``, ``clusters/``, ``deduped/``), and
* from the event logs, per pipeline stage (the job tags ``lsh-spark:<stage>``
  that lsh_spark.pipeline sets): bytes read from input, shuffle bytes written,
  shuffle bytes read, bytes written to output, and task time,

and divides both by the number of input documents.  Prints two tables and writes
``volumes.json`` under ``--work``; the README's scale-out plan is computed from it.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from compare import spark_submit  # noqa: E402

from lsh_spark.session import job_tag, stage_of_job  # noqa: E402

JOBS = (("signatures", True), ("candidates", False), ("verify", False), ("cluster", True))
DATASETS = ("shingles", "signatures", "candidates", "blocks", "pairs", "clusters", "deduped")
METRICS = {
    "internal.metrics.input.bytesRead": "input_bytes",
    "internal.metrics.shuffle.write.bytesWritten": "shuffle_write_bytes",
    "internal.metrics.shuffle.read.remoteBytesRead": "shuffle_read_bytes",
    "internal.metrics.shuffle.read.localBytesRead": "shuffle_read_bytes",
    "internal.metrics.output.bytesWritten": "output_bytes",
    "internal.metrics.executorRunTime": "task_ms",
}


def du(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(
        os.path.getsize(f)
        for f in glob.glob(os.path.join(path, "**", "*"), recursive=True)
        if os.path.isfile(f)
    )


def stage_of(job_properties: dict[str, str]) -> str:
    """The pipeline stage of a Spark job: its ``lsh-spark:<stage>`` job tag (the
    event log lists a job's tags in ``spark.job.tags``, comma-separated) or its
    description."""
    tags = job_properties.get("spark.job.tags", "").split(",")
    stage = stage_of_job(tags, job_properties.get("spark.job.description"))
    return "other" if stage is None else job_tag(stage)


def event_log_args(folder: str) -> list[str]:
    """spark-submit arguments writing the application's event log into ``folder``:
    one plain JSON file (Spark 4 otherwise rolls and compresses it), which
    :func:`parse_event_logs` reads."""
    return [
        *("--conf", "spark.eventLog.enabled=true"),
        *("--conf", "spark.eventLog.rolling.enabled=false"),
        *("--conf", "spark.eventLog.compress=false"),
        *("--conf", f"spark.eventLog.dir=file://{os.path.abspath(folder)}"),
    ]


def parse_event_logs(folder: str) -> dict[str, dict[str, int]]:
    """Sum stage metrics per lsh-spark stage (job tag) over every event log in ``folder``."""
    per_group: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for path in sorted(glob.glob(os.path.join(folder, "**", "*"), recursive=True)):
        if not os.path.isfile(path) or os.path.basename(path).startswith("."):
            continue
        stage_group: dict[int, str] = {}
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                ev = json.loads(line)
                kind = ev.get("Event")
                if kind == "SparkListenerJobStart":
                    group = stage_of(ev.get("Properties") or {})
                    for sid in ev.get("Stage IDs", []):  # a stage runs in its first job
                        stage_group.setdefault(sid, group)
                elif kind == "SparkListenerStageCompleted":
                    info = ev["Stage Info"]
                    group = stage_group.get(info["Stage ID"], "other")
                    for acc in info.get("Accumulables", []):
                        key = METRICS.get(acc.get("Name"))
                        if key:
                            per_group[group][key] += int(acc.get("Value") or 0)
    return {g.removeprefix("lsh-spark:"): dict(m) for g, m in per_group.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="4g")
    args = p.parse_args()
    out = os.path.join(args.work, "out")
    events = os.path.join(args.work, "events")
    subprocess.run(["rm", "-rf", out, events], check=True)
    os.makedirs(events)
    for job, needs_input in JOBS:
        cmd = [
            spark_submit(),
            "--master",
            args.master,
            "--driver-memory",
            args.driver_memory,
            *event_log_args(events),
            "--driver-java-options",
            f"-Dlog4j2.configurationFile=file:{os.path.join(ROOT, 'conf', 'log4j2.properties')}",
            os.path.join(ROOT, "jobs", f"{job}.py"),
            "--output",
            out,
        ]
        if needs_input:
            cmd += ["--input", args.input]
        print(f"running {job} ...", flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "report.json"), encoding="utf-8") as fh:
        report = json.load(fh)
    docs = report["counts"]["input_records"]
    sizes = {d: du(os.path.join(out, d)) for d in DATASETS}
    stages = parse_event_logs(events)
    result = {
        "documents": docs,
        "input_bytes": du(args.input),
        "dataset_bytes": sizes,
        "dataset_bytes_per_document": {d: round(b / docs, 1) for d, b in sizes.items()},
        "stage_metrics": stages,
        "stage_metrics_per_document": {
            s: {k: round(v / docs, 1) for k, v in m.items()} for s, m in stages.items()
        },
        "counts": report["counts"],
    }
    print(f"{docs} documents, input {result['input_bytes'] / docs:.0f} bytes per document")
    print("| dataset | bytes on disk | bytes per document |\n|---|---|---|")
    for d in DATASETS:
        print(f"| `{d}/` | {sizes[d]:,} | {sizes[d] / docs:.1f} |")
    print(
        "| stage | input B/doc | shuffle write B/doc | shuffle read B/doc "
        "| output B/doc | task ms/doc |\n|---|---|---|---|---|---|"
    )
    for s, m in sorted(stages.items()):
        print(
            f"| {s} | "
            + " | ".join(
                f"{m.get(k, 0) / docs:.1f}"
                for k in (
                    "input_bytes",
                    "shuffle_write_bytes",
                    "shuffle_read_bytes",
                    "output_bytes",
                    "task_ms",
                )
            )
            + " |"
        )
    with open(os.path.join(args.work, "volumes.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
