"""The real command line: ``spark-submit jobs/*.py`` as a user runs it.

The tests here start ``spark-submit`` from the test environment in a
subprocess (marked ``slow``), once per behaviour of the launcher; where a test
runs a job several times, the other runs call the job's ``main`` in the test
session (:func:`in_process`).  Spark's own log lines are ignored; the job's
messages are the lines starting with the job's name.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from servers import bench_module

from lsh_spark.config import DedupConfig

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")
JOBS = os.path.join(ROOT, "jobs")
SPARK_SUBMIT = os.path.join(os.path.dirname(sys.executable), "spark-submit")
FLAGS = [
    "--input",
    "--output",
    "--config",
    "--format",
    "--id-col",
    "--text-col",
    "--threshold",
    "--num-perm",
    "--bands",
    "--rows",
    "--shingle",
    "--k",
    "--seed",
    "--keep",
]


def submit(
    job: str,
    *args: str,
    timeout: int = 600,
    launcher: str = "spark-submit",
    conf: tuple[str, ...] = ("--conf", "spark.ui.enabled=false"),
) -> subprocess.CompletedProcess:
    """Run ``jobs/<job>`` with ``spark-submit`` and its options ``conf``, or
    (``launcher="python"``) with the interpreter alone, which is enough for errors
    found before the session starts."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    if launcher == "python":
        cmd = [sys.executable]
    else:
        cmd = [SPARK_SUBMIT, "--master", "local[2]", *conf]
    cmd += [os.path.join(JOBS, job), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def job_lines(proc: subprocess.CompletedProcess, job: str) -> list[str]:
    """The job's own message lines (Spark's launcher and log4j lines are not ours).

    The job writes errors to its stderr, but spark-submit's PythonRunner merges the
    Python driver's stderr into its own stdout (``redirectErrorStream``), so both
    streams are searched.
    """
    text = proc.stdout + "\n" + proc.stderr
    return [line for line in text.splitlines() if line.startswith(f"{job}:")]


def explain(proc: subprocess.CompletedProcess) -> str:
    return (
        f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n"
        f"{proc.stderr[-5000:]}"
    )


def in_process(job: str, spark, *args: str) -> None:
    """Run ``jobs/<job>``'s ``main`` in the test session: the code spark-submit
    runs, without starting a JVM of its own."""
    spec = importlib.util.spec_from_file_location(job[:-3], os.path.join(JOBS, job))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(list(args), spark=spark) == 0


STAGE_JOBS = [
    ("signatures.py", True),
    ("candidates.py", False),
    ("verify.py", False),
    ("cluster.py", True),
]


def read_report(output) -> dict:
    with open(os.path.join(str(output), "report.json"), encoding="utf-8") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def require_spark_submit():
    if not os.path.exists(SPARK_SUBMIT):
        pytest.skip(f"spark-submit not found next to {sys.executable}")


# -- (a) help -------------------------------------------------------------------
def test_help_lists_every_flag(require_spark_submit):
    proc = submit("dedup.py", "--help")
    assert proc.returncode == 0, explain(proc)
    for flag in FLAGS:
        assert flag in proc.stdout, f"{flag} missing from --help"


# -- (b) invalid options fail fast, exit 2, one line ----------------------------
# Found before any session starts, so they run without spark-submit; that
# spark-submit passes the exit code and the line on is tested with --method below.
@pytest.mark.parametrize(
    "args, option",
    [
        (["--threshold", "1.5"], "--threshold"),
        (["--threshold", "0"], "--threshold"),
        (["--bands", "30", "--rows", "10"], "--bands"),
        (["--format", "xml"], "--format"),
        (["--input", "does/not/exist.jsonl"], "--input"),
    ],
    ids=["threshold-1.5", "threshold-0", "bands-x-rows", "format-xml", "missing-input"],
)
def test_invalid_option_exits_2_with_one_line(require_spark_submit, tmp_path, args, option):
    base = ["--input", SAMPLE, "--output", str(tmp_path / "out")]
    if "--input" in args:
        base = base[2:]
    proc = submit("dedup.py", *base, *args, launcher="python")
    assert proc.returncode == 2, explain(proc)
    lines = job_lines(proc, "dedup.py")
    assert len(lines) == 1, explain(proc)
    assert lines[0].startswith("dedup.py: error:") and option in lines[0], lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr, explain(proc)
    assert not (tmp_path / "out").exists()
    assert os.listdir(tmp_path) == []  # no staging directory left behind


# -- (c) the four stage jobs equal one dedup run ---------------------------------
def test_stage_jobs_match_dedup(require_spark_submit, spark, tmp_path, capsys):
    # The stage jobs in this session (spark-submit of a stage job is tested
    # below), the whole job with spark-submit.
    staged = tmp_path / "staged"
    for job, needs_input in STAGE_JOBS:
        args = ["--output", str(staged)]
        if needs_input:
            args = ["--input", SAMPLE, *args]
        before = spark.conf.get("spark.sql.shuffle.partitions")
        in_process(job, spark, *args)
        assert spark.conf.get("spark.sql.shuffle.partitions") == before  # left as it was
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert summary["stage"] == job[:-3]
    full, events = tmp_path / "full", tmp_path / "events"
    events.mkdir()
    stage_volumes = bench_module("stage_volumes")
    # With the Spark UI on (a free port), as on a cluster: report.json has the
    # bytes of each stage from Spark's REST API, the event log's figures.
    ui = ("--conf", "spark.ui.enabled=true", "--conf", "spark.ui.port=0")
    conf = (*ui, *stage_volumes.event_log_args(str(events)))
    proc = submit("dedup.py", "--input", SAMPLE, "--output", str(full), conf=conf)
    assert proc.returncode == 0, explain(proc)
    stage_bytes = read_report(full)["execution"]["stage_bytes"]
    logged = stage_volumes.parse_event_logs(str(events))
    names = {"read": "input_bytes", "shuffle_write": "shuffle_write_bytes"}
    names |= {"shuffle_read": "shuffle_read_bytes", "written": "output_bytes"}
    assert stage_bytes["complete"] is True
    assert {"signatures", "candidates", "verify", "cluster"} <= set(stage_bytes["by_stage"])
    for stage, figures in stage_bytes["by_stage"].items():
        assert figures == {k: logged[stage].get(v, 0) for k, v in names.items()}, stage
    assert stage_bytes["by_stage"]["signatures"]["read"] > os.path.getsize(SAMPLE) / 2
    assert stage_bytes["by_stage"]["verify"]["shuffle_write"] > 0

    for name in ("pairs", "clusters"):
        a = spark.read.parquet(str(staged / name))
        b = spark.read.parquet(str(full / name))
        cols = sorted(b.columns)
        assert sorted(a.columns) == cols
        assert_df_equality(a.select(cols), b.select(cols), ignore_row_order=True)

    counts_staged, counts_full = read_report(staged)["counts"], read_report(full)["counts"]
    for key in (
        "input_records",
        "accepted",
        "candidate_pairs",
        "verified_pairs",
        "duplicate_clusters",
        "deduped_documents",
    ):
        assert counts_staged[key] == counts_full[key], key
    assert counts_full["input_records"] == 411
    assert counts_full["verified_pairs"] > 0


# -- (d) --config is honoured, flags win -----------------------------------------
def test_config_file_honoured_and_flag_overrides(require_spark_submit, spark, tmp_path):
    with open(SAMPLE, encoding="utf-8") as fh:
        head = [next(fh) for _ in range(25)]
    small = tmp_path / "small.jsonl"
    small.write_text("".join(head), encoding="utf-8")
    cfg = tmp_path / "job.yaml"
    cfg.write_text("threshold: 0.7\nnum-perm: 64\n", encoding="utf-8")

    # The signatures stage writes report.json with the parameters: two cheap runs.
    from_file = tmp_path / "from_file"
    proc = submit(
        "signatures.py", "--input", str(small), "--output", str(from_file), "--config", str(cfg)
    )
    assert proc.returncode == 0, explain(proc)
    # Progress: an INFO line at each section's start and end, and the stage's counts.
    shown = proc.stdout + proc.stderr
    for line in ("INFO lsh-spark: signatures: started", "INFO lsh-spark: signatures: done in"):
        assert line in shown, explain(proc)
    assert "INFO lsh-spark: signatures: 25 input records, 25 accepted" in shown, explain(proc)
    params = read_report(from_file)["parameters"]
    assert params["threshold"] == 0.7 and params["num_perm"] == 64
    assert [params["bands"], params["rows"]] == list(
        DedupConfig(threshold=0.7, num_perm=64).band_params()
    )

    overridden = tmp_path / "overridden"
    in_process(
        "signatures.py",
        spark,
        *("--input", str(small), "--output", str(overridden), "--config", str(cfg)),
        *("--threshold", "0.9"),
    )
    params = read_report(overridden)["parameters"]
    assert params["threshold"] == 0.9 and params["num_perm"] == 64
    assert [params["bands"], params["rows"]] == list(
        DedupConfig(threshold=0.9, num_perm=64).band_params()
    )
    # The signatures stage wrote every document's bucket key of each band of
    # that banding, and says which banding in the column's metadata.
    bands, rows = DedupConfig(threshold=0.9, num_perm=64).band_params()
    sigs = spark.read.parquet(str(overridden / "signatures"))
    assert {r[0] for r in sigs.select(F.size("buckets")).distinct().collect()} == {bands}
    meta = sigs.schema["buckets"].metadata
    assert (meta["lsh_spark.bands"], meta["lsh_spark.rows"]) == (bands, rows)


# -- (f) the advisor and the other LSH families from the command line -------------
def test_advise_job_writes_advice_and_plot(require_spark_submit, tmp_path):
    out = tmp_path / "advice"
    proc = submit(
        "advise.py",
        "--input",
        SAMPLE,
        "--threshold",
        "0.8",
        "--sample",
        "300",
        "--output",
        str(out),
    )
    assert proc.returncode == 0, explain(proc)
    summary = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
    assert summary["predicted_recall"] >= 0.99
    advice = json.loads((out / "advice.json").read_text())
    assert advice["sample_documents"] == 300 and advice["corpus_documents"] >= 400
    assert (out / "s_curve.png").read_bytes()[:4] == b"\x89PNG"


def test_method_flags_fail_fast_with_one_line(require_spark_submit, tmp_path):
    proc = submit(
        "dedup.py", "--input", SAMPLE, "--output", str(tmp_path / "o"), "--method", "pstable"
    )
    assert proc.returncode == 2, explain(proc)
    lines = job_lines(proc, "dedup.py")
    assert len(lines) == 1 and "--max-distance: required with --method pstable" in lines[0]


def test_stage_jobs_run_a_vector_method(spark, tmp_path):
    rng = np.random.default_rng(3)
    base = rng.standard_normal((40, 6))
    rows = [{"id": f"a{i}", "vector": v.tolist()} for i, v in enumerate(base)]
    rows += [{"id": f"b{i}", "vector": (v + 0.01).tolist()} for i, v in enumerate(base[:10])]
    src = tmp_path / "v.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "staged"
    flags = ["--method", "pstable", "--max-distance", "0.5"]
    for job, needs_input in STAGE_JOBS:
        args = ["--output", str(out), *flags] + (["--input", str(src)] if needs_input else [])
        in_process(job, spark, *args)
    report = read_report(out)
    assert report["counts"]["verified_pairs"] == 10
    assert report["counts"]["duplicate_clusters"] == 10


# -- catalog tables in and out ---------------------------------------------------
def test_dedup_reads_and_writes_catalog_tables(spark, tmp_path, capsys):
    """--input-table and --output-table, in process: the table's dedup equals the
    file's, and the deduplicated corpus is a catalog table."""
    spark.read.json(SAMPLE).write.saveAsTable("pages_in")
    try:
        out = tmp_path / "from_table"
        in_process(
            "dedup.py",
            spark,
            "--input-table",
            "pages_in",
            "--output",
            str(out),
            "--output-table",
            "pages_deduped",
        )
        summary = json.loads(capsys.readouterr().out)  # stdout: the JSON object alone
        assert summary["output_table"] == "pages_deduped" and summary["input_records"] == 411
        table = spark.table("pages_deduped")
        assert_df_equality(
            table,
            spark.read.parquet(str(out / "deduped")),
            ignore_row_order=True,
            ignore_nullable=True,
        )
        assert table.count() == summary["deduped_documents"]
        # An existing table is replaced only with --overwrite; a format the session
        # cannot write is refused before anything runs; so is a missing table.
        again = ["--input-table", "pages_in", "--output", str(tmp_path / "o2")]
        for extra, message in [
            (["--output-table", "pages_deduped"], "table 'pages_deduped' exists; pass --overwrite"),
            (["--output-table", "t2", "--output-format", "delta"], "no delta data source"),
        ]:
            with pytest.raises(SystemExit) as exit_:
                in_process("dedup.py", spark, *again, *extra)
            assert exit_.value.code == 2 and message in capsys.readouterr().err
            assert not (tmp_path / "o2").exists()
        with pytest.raises(SystemExit):
            in_process("dedup.py", spark, "--input-table", "nope", "--output", str(tmp_path / "o3"))
        assert "table 'nope' not found" in capsys.readouterr().err
    finally:
        spark.sql("DROP TABLE IF EXISTS pages_in")
        spark.sql("DROP TABLE IF EXISTS pages_deduped")


def test_input_and_input_table_are_one_of_two(capsys):
    from lsh_spark.cli import build_parser, parse

    for argv in (["--output", "o"], ["--input", "a", "--input-table", "t", "--output", "o"]):
        with pytest.raises(SystemExit):
            parse(build_parser("dedup.py", ""), argv)
        assert "give exactly one of --input PATH and --input-table NAME" in capsys.readouterr().err
