"""The scheduling examples agree with the jobs, and the nightly wrapper really runs.

The Airflow DAG file is executed against stand-in ``airflow`` modules that
record what it builds (Airflow itself is not a dependency), and every
``application_args`` list, rendered for a date, must parse with the job's own
argument parser.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from crawlgen import day, page, write_warc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAG_FILE = os.path.join(ROOT, "deploy", "airflow", "lsh_spark_crawl_dedup.py")
CRON_FILE = os.path.join(ROOT, "deploy", "cron", "lsh-spark-crawl.cron")
NIGHTLY = os.path.join(ROOT, "scripts", "crawl-nightly.sh")


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run_dag_file() -> tuple[list[dict], list[dict]]:
    dags, tasks = [], []

    class DAG:
        def __init__(self, **kw):
            self.kw = kw
            dags.append(kw)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class Variable:
        @staticmethod
        def get(key, default_var=None):
            return default_var

    class SparkSubmitOperator:
        def __init__(self, **kw):
            tasks.append(kw)

    mods = {
        "airflow": types.SimpleNamespace(DAG=DAG),
        "airflow.models": types.SimpleNamespace(Variable=Variable),
        "airflow.providers": types.SimpleNamespace(),
        "airflow.providers.apache": types.SimpleNamespace(),
        "airflow.providers.apache.spark": types.SimpleNamespace(),
        "airflow.providers.apache.spark.operators": types.SimpleNamespace(),
        "airflow.providers.apache.spark.operators.spark_submit": types.SimpleNamespace(
            SparkSubmitOperator=SparkSubmitOperator
        ),
    }
    saved = {k: sys.modules.get(k) for k in mods}
    sys.modules.update(mods)
    try:
        _load(DAG_FILE, "lsh_spark_dag_under_test")
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return dags, tasks


def _cron_fields_ok(expr: str) -> bool:
    fields = expr.split()
    return len(fields) == 5 and all(re.fullmatch(r"[\d*/,\-]+", f) for f in fields)


def test_airflow_dag_submits_the_jobs_with_valid_arguments():
    dags, tasks = _run_dag_file()
    by_id = {d["dag_id"]: d for d in dags}
    crawl = by_id["lsh_spark_crawl_dedup"]
    assert crawl["max_active_runs"] == 1 and crawl["default_args"]["depends_on_past"]
    assert _cron_fields_ok(crawl["schedule"])
    assert _cron_fields_ok(by_id["lsh_spark_index_compact"]["schedule"])
    assert {t["pool"] for t in tasks} == {"lsh_spark_index"}  # never concurrent
    jobs = {os.path.basename(t["application"]): t for t in tasks}
    assert set(jobs) == {"crawl_dedup.py", "index_compact.py"}
    for name in jobs:
        assert os.path.exists(os.path.join(ROOT, "jobs", name))
    from lsh_spark.cli import build_parser, parse
    from lsh_spark.commands import crawl_parser

    args = [a.replace("{{ ds }}", "2026-11-29") for a in jobs["crawl_dedup.py"]["application_args"]]
    parsed = crawl_parser().parse_args(args)
    assert parsed.batch.endswith("/2026-11-29") and parsed.output.endswith("/2026-11-29")
    assert parsed.batch_id == "crawl-2026-11-29"
    parse(build_parser("index_compact.py", ""), jobs["index_compact.py"]["application_args"])
    for t in tasks:  # the packaging that scripts/package.sh builds
        assert t["py_files"].endswith("dist/lsh_spark.zip")
        assert t["archives"].endswith("dist/lsh-spark-env.tar.gz#environment")


def test_cron_example_runs_the_wrapper_daily():
    lines = [
        ln
        for ln in Path(CRON_FILE).read_text(encoding="utf-8").splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    env = dict(ln.split("=", 1) for ln in lines if re.match(r"^[A-Z_]+=", ln))
    assert {"CRAWL_ROOT", "INDEX", "RESULTS"} <= set(env)
    entries = [ln for ln in lines if not re.match(r"^[A-Z_]+=", ln)]
    schedules = [" ".join(e.split()[:5]) for e in entries]
    assert all(_cron_fields_ok(s) for s in schedules)
    nightly = [e for e in entries if "scripts/crawl-nightly.sh" in e]
    assert len(nightly) == 1 and nightly[0].split()[2:5] == ["*", "*", "*"]
    compact = [e for e in entries if "jobs/index_compact.py" in e]
    assert len(compact) == 1 and "flock /tmp/lsh-spark-crawl.lock" in compact[0]


def test_nightly_wrapper_refuses_a_bad_date_and_a_held_lock(tmp_path):
    env = dict(
        os.environ,
        CRAWL_ROOT=str(tmp_path),
        INDEX=str(tmp_path / "i"),
        RESULTS=str(tmp_path / "r"),
        LSH_SPARK_LOCK=str(tmp_path / "lock"),
        SPARK_SUBMIT="false",
    )
    bad = subprocess.run(["bash", NIGHTLY, "29/11/2026"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "allowed: YYYY-MM-DD" in bad.stderr
    with open(tmp_path / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        busy = subprocess.run(
            ["bash", NIGHTLY, "2026-11-29"], env=env, capture_output=True, text=True
        )
    assert busy.returncode == 75 and "another batch holds" in busy.stderr
    unset = dict(env)
    del unset["INDEX"]
    missing = subprocess.run(
        ["bash", NIGHTLY, "2026-11-29"], env=unset, capture_output=True, text=True
    )
    assert missing.returncode != 0 and "set INDEX" in missing.stderr


@pytest.mark.slow
def test_nightly_wrapper_runs_two_days_and_a_rerun(tmp_path):
    crawl = tmp_path / "crawl"
    write_warc(
        str(crawl / "2026-11-28" / "a.warc.gz"),
        [
            dict(url="https://a.example/1", date=day(28), html=page("wapo-1")),
            dict(url="https://a.example/2", date=day(28), html=page("ars-1")),
        ],
    )
    write_warc(
        str(crawl / "2026-11-29" / "a.warc.gz"),
        [
            dict(url="https://b.example/1", date=day(29), html=page("wapo-1")),
            dict(url="https://b.example/2", date=day(29), html=page("lwn-1")),
        ],
    )
    env = dict(
        os.environ,
        CRAWL_ROOT=str(crawl),
        INDEX=str(tmp_path / "index"),
        RESULTS=str(tmp_path / "results"),
        LSH_SPARK_LOCK=str(tmp_path / "lock"),
        SPARK_SUBMIT=os.path.join(os.path.dirname(sys.executable), "spark-submit"),
        SPARK_ARGS="--master local[2]",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    )

    def run(date):
        done = subprocess.run(
            ["bash", NIGHTLY, date], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]

    (first,), (second,) = run("2026-11-28"), run("2026-11-29")
    assert first["batch_id"] == "crawl-2026-11-28" and first["new_documents"] == 2
    assert second["duplicates_of_index"] == 1 and second["new_documents"] == 1
    # The re-run of the first day changes nothing; with DECONTAM_REFERENCES, the
    # batch's deduped/ is then decontaminated.
    deduped = pq.read_table(str(tmp_path / "results" / "2026-11-28" / "deduped")).to_pylist()
    words = deduped[0]["text"].split()
    passage = {"id": "eval-1", "text": " ".join(words[: min(len(words), 40)])}
    (tmp_path / "eval.jsonl").write_text(json.dumps(passage) + "\n")
    env["DECONTAM_REFERENCES"] = str(tmp_path / "eval.jsonl")
    again, clean = run("2026-11-28")
    assert again["status"] == "already_applied" and again["index_version"] == 2
    assert clean["removed"] == 1 and clean["clean"] == len(deduped) - 1
    removed = pq.read_table(str(tmp_path / "results-clean" / "2026-11-28" / "removed"))
    assert removed.column("id").to_pylist() == [deduped[0]["id"]]
