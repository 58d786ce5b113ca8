"""jobs/dedup.py in classic mode and over Spark Connect, side by side, in one run.

    python bench/connect.py --corpus bench/out/c41k/corpus.jsonl --work bench/out/connect

Classic: ``spark-submit jobs/dedup.py`` as bench/compare.py runs lsh-spark
(local master, conf/local.properties, the same driver memory).  Connect: a
server started once with scripts/connect-server.sh and the same master,
memory and properties, then ``python jobs/dedup.py --remote sc://...`` from a
client process.  Both run the bundled sample once, untimed, first; then the
rounds alternate (classic, Connect) so the machine's drift falls on both.
A mode's time is the median of its rounds: for classic the whole
spark-submit (JVM start included), for Connect the client's run against the
already running server (its start-up is printed apart).  Peak memory is that
of the process trees (the server's plus the client's for Connect).  The two
modes' ``pairs/`` must hold the same pairs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

import pyarrow.dataset as ds

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from compare import run_measured, submit_command, tree_memory  # noqa: E402
from servers import free_port, listening, wait_for  # noqa: E402

SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")


def start_server(master: str, memory: str, log_path: str) -> tuple[subprocess.Popen, str, float]:
    """A Connect server with the classic runs' settings; its process, URL and start seconds."""
    port = free_port()
    cmd = ["bash", os.path.join(ROOT, "scripts", "connect-server.sh"), "--port", str(port)]
    cmd += ["--master", master, "--driver-memory", memory]
    env = dict(os.environ, LSH_SPARK_VENV=sys.prefix)
    env.pop("SPARK_REMOTE", None)
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    wait_for(lambda: proc.poll() is not None or listening(port), 240, "the Connect server")
    if proc.poll() is not None:
        raise SystemExit(f"the Connect server exited; see {log_path}")
    return proc, f"sc://127.0.0.1:{port}", time.perf_counter() - start


def measured_with_server(cmd: list[str], server: subprocess.Popen) -> dict:
    """:func:`run_measured` of the client, with the server's tree in the memory peak."""
    import psutil

    root, peak, done = psutil.Process(server.pid), [0], threading.Event()

    def poll() -> None:
        while not done.is_set():
            with contextlib.suppress(psutil.Error):
                peak[0] = max(peak[0], tree_memory([root, *root.children(recursive=True)]))
            time.sleep(0.5)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    res = run_measured(cmd, env={"SPARK_HOME": os.path.join(ROOT, "no-jvm-in-the-client")})
    done.set()
    t.join()
    res["peak_mem_mib"] += round(peak[0] / 2**20)
    return res


def pairs(out: str) -> set[tuple]:
    table = ds.dataset(os.path.join(out, "pairs"), format="parquet").to_table(["id_a", "id_b"])
    return set(zip(*(table.column(c).to_pylist() for c in ("id_a", "id_b")), strict=True))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, help="JSON Lines with id and text")
    p.add_argument("--work", required=True, help="folder for the outputs and the server log")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--repeat", type=int, default=2, help="rounds of timed runs (default 2)")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    job = [os.path.join(ROOT, "jobs", "dedup.py")]
    classic = submit_command("lsh-spark", args.master, args.driver_memory) + job
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    server, url, started = start_server(
        args.master, args.driver_memory, os.path.join(args.work, "server.log")
    )
    connect = [sys.executable, *job, "--remote", url]
    try:
        print(f"Connect server up in {started:.1f} s at {url}; warming up on the sample ...")
        warm = ["--input", SAMPLE, "--output", f"{args.work}/warm", "--overwrite"]
        run_measured(classic + warm, env=env)
        measured_with_server(connect + warm, server)
        runs: dict[str, list[dict]] = {"classic": [], "connect": []}
        for i in range(args.repeat):
            for mode in runs:
                out = ["--input", args.corpus, "--output", f"{args.work}/{mode}", "--overwrite"]
                print(f"running {mode} (round {i + 1} of {args.repeat}) ...", flush=True)
                res = (
                    run_measured(classic + out, env=env)
                    if mode == "classic"
                    else measured_with_server(connect + out, server)
                )
                if res["exit"] != 0:
                    raise SystemExit(f"{mode} failed: {res['tail']}")
                runs[mode].append(res)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(60)
    same = pairs(f"{args.work}/classic") == pairs(f"{args.work}/connect")
    print("| mode | seconds (median) | rounds | peak memory MiB | same pairs |")
    print("|---|---|---|---|---|")
    for mode, rs in runs.items():
        secs = [r["seconds"] for r in rs]
        peak = max(r["peak_mem_mib"] for r in rs)
        print(f"| {mode} | {statistics.median(secs):.1f} | {secs} | {peak} | {same} |")
    if not same:
        raise SystemExit("the two modes found different pairs")


if __name__ == "__main__":
    main()
