"""The jobs over Spark Connect: a thin client against a server, output as in classic mode.

A Spark Connect server is started from the installed PySpark on 127.0.0.1
(``scripts/connect-server.sh``: ``spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer``, whose jar ships with
PySpark).  Every job runs as ``python jobs/X.py
--remote sc://...`` in a client process that cannot start a JVM of its own
(``SPARK_HOME`` points nowhere), and its outputs are compared with chispa to
a classic local run's: ``pairs/``, ``clusters/``, ``deduped/`` of the dedup job,
of the Python API (``tests/api_client.py``) and of the four stage jobs, two
crawl batches and the index they build, the compacted index, and the
advisor's recommendation.  The server is stopped in
a ``finally``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from chispa import assert_df_equality
from crawlgen import batches
from servers import free_port, listening, wait_for

from lsh_spark.config import DedupConfig
from lsh_spark.crawl import run_crawl_batch
from lsh_spark.index import CrawlIndex
from lsh_spark.pipeline import run_dedup

pytestmark = pytest.mark.connect

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``sc://127.0.0.1:PORT`` of a Spark Connect server in local mode."""
    tmp = tmp_path_factory.mktemp("connect-server")
    port = free_port()
    cmd = [
        "bash",
        os.path.join(ROOT, "scripts", "connect-server.sh"),
        "--port",
        str(port),
        "--master",
        "local[2]",
        "--driver-memory",
        "2g",
    ]
    env = dict(os.environ, LSH_SPARK_VENV=sys.prefix, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("SPARK_REMOTE", None)
    log_path = tmp / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp
        )
    try:
        wait_for(lambda: proc.poll() is not None or listening(port), 240, "the Connect server")
        if proc.poll() is not None:
            pytest.fail(f"the Connect server exited: {log_path.read_text()[-3000:]}")
        yield f"sc://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def client(server: str, job: str, *args: str) -> dict:
    """Run ``jobs/<job>`` as a Connect client; its last JSON line of output."""
    env = dict(os.environ, SPARK_HOME=os.path.join(ROOT, "no-jvm-in-the-client"))
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "jobs", job), "--remote", server, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"{job} failed:\n{done.stderr[-4000:]}"
    return json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1])


def same(spark, got: str, want: str) -> int:
    """Two Parquet datasets hold the same rows (in any order); their row count."""
    a, b = spark.read.parquet(got), spark.read.parquet(want)
    assert_df_equality(a, b, ignore_row_order=True, ignore_nullable=True)
    return a.count()


@pytest.fixture(scope="module")
def classic(spark, tmp_path_factory):
    """The classic local run of dedup on the sample, for comparison."""
    out = str(tmp_path_factory.mktemp("classic") / "dedup")
    run_dedup(spark, SAMPLE, out, DedupConfig())
    return out


def test_dedup_over_connect_equals_classic(server, classic, spark, tmp_path):
    out = str(tmp_path / "dedup")
    summary = client(server, "dedup.py", "--input", SAMPLE, "--output", out)
    assert summary["verified_pairs"] > 0
    for name in ("pairs", "clusters", "deduped"):
        assert same(spark, f"{out}/{name}", f"{classic}/{name}") > 0
    with open(f"{out}/report.json") as got, open(f"{classic}/report.json") as want:
        got, want = json.load(got), json.load(want)
    assert got["counts"] == want["counts"]
    # No stage bytes from Spark's REST API: over Connect it is the server's; the
    # test session's classic run has its UI off.
    assert got["execution"]["stage_bytes"] == {
        "unavailable": "Spark Connect: the driver's web UI is the server's"
    }
    assert want["execution"]["stage_bytes"] == {
        "unavailable": "the Spark UI is off (spark.ui.enabled=false)"
    }


def test_python_api_over_connect_equals_the_job(server, classic, spark, tmp_path):
    """A notebook on a Connect client: find_duplicates on a DataFrame built in
    the client, then remove(); the results equal the classic job's."""
    env = dict(os.environ, SPARK_HOME=os.path.join(ROOT, "no-jvm-in-the-client"))
    env.pop("SPARK_REMOTE", None)
    work, out = tmp_path / "work", tmp_path / "deduped"
    script = os.path.join(ROOT, "tests", "api_client.py")
    done = subprocess.run(
        [sys.executable, script, server, str(work), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["after"] == got["before"]  # the session's settings put back
    for name in ("pairs", "clusters"):
        assert same(spark, str(work / name), f"{classic}/{name}") > 0
    want = spark.read.parquet(f"{classic}/deduped").drop("cluster_size")
    assert_df_equality(
        spark.read.parquet(str(out)),
        want.select("id", "source", "text"),
        ignore_row_order=True,
        ignore_nullable=True,
    )
    with open(f"{classic}/report.json") as fh:
        assert got["counts"] == json.load(fh)["counts"]
    # removals and the inspection page over Connect: one row per removed document,
    # 20 of them shown beside their kept documents.
    assert got["removals"] == got["counts"]["removed_documents"]
    assert got["page_pairs"] == 20 and 0 <= got["below_threshold"] < got["removals"]


def test_stage_jobs_and_advisor_over_connect(server, classic, spark, tmp_path):
    out = str(tmp_path / "stages")
    client(server, "signatures.py", "--input", SAMPLE, "--output", out)
    client(server, "candidates.py", "--output", out)
    client(server, "verify.py", "--output", out)
    client(server, "cluster.py", "--input", SAMPLE, "--output", out)
    for name in ("pairs", "clusters", "deduped"):
        assert same(spark, f"{out}/{name}", f"{classic}/{name}") > 0
    advice = client(server, "advise.py", "--input", SAMPLE, "--output", str(tmp_path / "advice"))
    assert advice["bands"] * advice["rows"] <= advice["num_perm"]
    assert (tmp_path / "advice" / "s_curve.png").stat().st_size > 0


def index_rows(spark, root: str) -> dict:
    index = CrawlIndex(spark, root)
    manifest = index.current()
    return {
        "documents": manifest.documents,
        "batches": sorted(b["batch_id"] for b in manifest.batches),
        "docs": index.docs(manifest),
        "bands": index.bands(manifest),
    }


def test_crawl_batches_and_compaction_over_connect(server, spark, tmp_path):
    b = batches(str(tmp_path / "in"))
    connect_index, classic_index = str(tmp_path / "index-c"), str(tmp_path / "index-k")
    for name in ("batch-1", "batch-2"):
        got = client(
            server,
            "crawl_dedup.py",
            "--batch",
            b[name],
            "--index",
            connect_index,
            "--output",
            str(tmp_path / "out-c" / name),
        )
        assert got["status"] == "committed"
        run_crawl_batch(
            spark, b[name], classic_index, str(tmp_path / "out-k" / name), DedupConfig()
        )
        got_out, want_out = tmp_path / "out-c" / name, tmp_path / "out-k" / name
        assert same(spark, str(got_out / "deduped"), str(want_out / "deduped")) > 0
        same(spark, str(got_out / "duplicates"), str(want_out / "duplicates"))
    got, want = index_rows(spark, connect_index), index_rows(spark, classic_index)
    assert got["documents"] == want["documents"] and got["batches"] == want["batches"]
    for table in ("docs", "bands"):
        assert_df_equality(got[table], want[table], ignore_row_order=True, ignore_nullable=True)
    client(server, "index_compact.py", "--index", connect_index)
    compacted = index_rows(spark, connect_index)
    assert compacted["documents"] == want["documents"]
    for table in ("docs", "bands"):
        assert_df_equality(  # compaction writes bands as (doc, bucket)
            compacted[table],
            want[table],
            ignore_row_order=True,
            ignore_nullable=True,
            ignore_column_order=True,
        )
