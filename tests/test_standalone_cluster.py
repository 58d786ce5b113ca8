"""A real Spark standalone cluster: one master and two workers on 127.0.0.1.

The cluster is started from the installed PySpark (``spark-class``), the project
is packaged with ``scripts/package.sh`` and submitted with ``spark-submit
--master spark://...`` exactly as the README's "Running on a cluster" section
says (``--py-files dist/lsh_spark.zip --archives
dist/lsh-spark-env.tar.gz#environment``).  While the job runs, an executor
that is running Python tasks is killed with SIGKILL; the job must still finish,
and its ``pairs/`` and ``clusters/`` must equal a local-mode run's.  Every
process the test started is stopped at the end, pass or fail.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from chispa import assert_df_equality
from servers import free_port, spark_home, wait_for

pytestmark = pytest.mark.standalone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")


def master_state(ui_port: int) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            return json.load(r)
    except OSError:
        return {}


def children(pid: int) -> list[int]:
    """Child processes of ``pid``, whichever of its threads forked them."""
    out = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as fh:
                out += [int(c) for c in fh.read().split()]
        except OSError:
            pass
    return out


def busy_executors() -> list[int]:
    """Executors running Python work: their pyspark daemon is a child process."""
    return [pid for pid in executor_pids() if children(pid)]


def executor_pids() -> list[int]:
    """Executor JVMs on this machine (standalone workers start them as children)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if b"CoarseGrainedExecutorBackend" in cmd:
            pids.append(int(entry))
    return pids


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if sys.platform != "linux":
        pytest.skip("the standalone-cluster test reads /proc (Linux)")
    tmp = tmp_path_factory.mktemp("standalone")
    home = spark_home()
    env = dict(
        os.environ,
        SPARK_HOME=home,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp),
        SPARK_WORKER_DIR=str(tmp / "work"),
    )
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = os.path.join(home, "bin", "spark-class")
    procs, logs = [], []

    def start(name: str, *args: str) -> None:
        log = open(tmp / f"{name}.log", "w")  # noqa: SIM115 (closed when the cluster stops)
        logs.append(log)
        # Own process group: stopping it stops the executors it launched too.
        procs.append(
            subprocess.Popen(
                [spark_class, *args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        )
        wait_for(lambda: master_state(ui).get("status") == "ALIVE", 60, "the master")
        for i in (1, 2):
            start(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(tmp / f"work{i}"),
                url,
            )
        wait_for(
            lambda: (
                sum(w.get("state") == "ALIVE" for w in master_state(ui).get("workers", [])) == 2
            ),
            60,
            "two workers",
        )
        yield {"url": url, "ui": ui, "tmp": tmp, "env": env}
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for log in logs:
            log.close()


def test_cluster_run_with_a_killed_executor_equals_local_run(cluster, spark, tmp_path):
    # 1. Package, as the README says.
    pkg = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "package.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert pkg.returncode == 0, pkg.stderr[-3000:]
    for f in ("dist/lsh_spark.zip", "dist/lsh-spark-env.tar.gz"):
        assert os.path.getsize(os.path.join(ROOT, f)) > 0, f

    # 2. Submit to the standalone master with the packaged library and environment.
    out = tmp_path / "cluster-out"
    env = dict(
        cluster["env"],
        PYSPARK_PYTHON="./environment/bin/python",
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    cmd = [
        os.path.join(BIN, "spark-submit"),
        "--master",
        cluster["url"],
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.executor.cores=1",
        "--executor-memory",
        "512m",
        "--total-executor-cores",
        "2",
        "--conf",
        "spark.ui.enabled=false",
        "--py-files",
        "dist/lsh_spark.zip",
        "--archives",
        "dist/lsh-spark-env.tar.gz#environment",
        "jobs/dedup.py",
        "--input",
        SAMPLE,
        "--output",
        str(out),
        "--checkpoint-dir",
        str(tmp_path / "checkpoints"),
    ]
    log_path = tmp_path / "submit.log"
    with open(log_path, "w") as log:
        job = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            # 3. Kill one executor once both run tasks and the job is well under way.
            # The executor seen busy is the one killed (asking again could find its
            # Python task already finished and none busy).
            seen: list[int] = []

            def busy_or_done() -> bool:
                seen[:] = busy_executors()
                return bool(seen) or job.poll() is not None

            wait_for(busy_or_done, 180, "an executor running Python tasks")
            assert job.poll() is None, "the job ended before an executor could be killed"
            victim = seen[0]
            os.kill(victim, signal.SIGKILL)
            killed_at = time.monotonic()
            code = job.wait(timeout=900)
        finally:
            if job.poll() is None:
                job.kill()
    text = log_path.read_text()
    assert code == 0, text[-5000:]
    assert time.monotonic() - killed_at > 1, "job finished right at the kill"
    # The killed executor is on record: it was running Python tasks when it was
    # killed (checked above) and its worker saw it die of SIGKILL (exit 137).
    # (The driver's own wording of the loss depends on timing and log level.)
    workers = "".join((cluster["tmp"] / f"worker{i}.log").read_text() for i in (1, 2))
    assert re.search(
        r"Executor app-\S+ finished with state EXITED message "
        r"Command exited with code 137",
        workers,
    ), workers[-3000:]

    # 4. The same input in local mode: identical pairs and clusters.
    local = tmp_path / "local-out"
    proc = subprocess.run(
        [
            os.path.join(BIN, "spark-submit"),
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            "jobs/dedup.py",
            "--input",
            SAMPLE,
            "--output",
            str(local),
        ],
        cwd=ROOT,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for name in ("pairs", "clusters"):
        a = spark.read.parquet(str(out / name))
        b = spark.read.parquet(str(local / name))
        cols = sorted(b.columns)
        assert a.count() == b.count() > 0
        assert_df_equality(a.select(cols), b.select(cols), ignore_row_order=True)
    with open(out / "report.json", encoding="utf-8") as fh:
        assert json.load(fh)["counts"]["input_records"] == 411
