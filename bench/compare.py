"""lsh-spark side by side with Spark MLlib and datasketch on one corpus.

    python bench/compare.py --corpus bench/out/c40k/corpus.jsonl --work bench/out/cmp \\
        [--threshold 0.8] [--systems lsh-spark,mllib,datasketch] [--master 'local[2]']

Runs each system as its own process (spark-submit for the Spark ones), first
once untimed on a small warm-up corpus (``--warmup``, the bundled sample), so
the timed run of whichever system goes first does not alone pay for reading
Spark's jars and the Python packages from a cold disk or for compiling and
caching kernels; then on the corpus, and records
wall time and the peak memory of its whole process tree (JVM plus Python
workers; see tree_memory; polled every 0.5 s), then
scores every system's pairs against the same exact ground truth
(bench/quality.py).  Prints one table and writes
``results.json`` under ``--work``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pickle
import statistics
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from quality import (  # noqa: E402 (bench/ is put on sys.path above)
    all_pairs,
    check_ids,
    corpus_fingerprint,
    corpus_lines,
    corpus_records,
    load,
    read_parquet,
    usable,
)

# Reading a process's proportional set size walks its page tables: about 80-95 ms
# for a JVM of 4 GiB on this machine, so polling it every 0.2 s took a third
# to a half of one of the 2 cores away from the run being measured.
PSS_MAX_RSS = 512 << 20


def tree_memory(procs: list[psutil.Process]) -> int:
    """Bytes used by a process tree, counting shared pages once.

    An RSS sum counts shared pages in every process: a JVM that forks to
    start a Python worker has a child with the JVM's whole resident size until
    the child calls exec, and a sample falling in that moment counted the JVM
    twice (a 1M-document run read 7.0 GiB instead of about 3 GiB).  So a
    process running ``java`` whose parent runs the same executable is a fork
    in progress and is skipped; small processes (Python
    workers, which the PySpark daemon forks and which share its pages) count
    their proportional set size; a large one (the JVM, whose pages no other
    process of the tree shares) its resident size, which costs nothing to read
    where its PSS would cost tens of milliseconds per sample
    (``PSS_MAX_RSS``).  Falls back to RSS where PSS cannot be read.
    """
    import psutil  # bench extra; imported here so that the tests can load this module

    total = 0
    for p in procs:
        try:
            rss = p.memory_info().rss
            parent = p.parent()
            exe = p.exe()
            if parent is not None and os.path.basename(exe) == "java" and parent.exe() == exe:
                continue  # the JVM forked, not yet exec'd: its pages are the parent's
            if rss > PSS_MAX_RSS:
                total += rss
                continue
            try:
                total += p.memory_full_info().pss
            except (psutil.AccessDenied, AttributeError):
                total += rss
        except psutil.Error:
            pass
    return total


def local_master(master: str) -> bool:
    """Whether ``master`` runs every task in the driver's JVM: ``local``,
    ``local[n]``, ``local[n, retries]``; not ``local-cluster``, whose executors
    are JVMs of their own."""
    return master == "local" or master.startswith("local[")


def spark_settings(system: str, master: str) -> list[str]:
    """spark-submit arguments of Spark system ``system`` beyond master and memory.

    Both get conf/log4j2.properties.  On a local master, lsh-spark runs with
    conf/local.properties (its JVM options, no web UI, ...), as scripts/demo.sh
    runs it; the MLlib peer keeps the JVM's default collector and JIT and only
    runs without the web UI too (a setting of the machine, not of either algorithm).
    """
    log4j = f"-Dlog4j2.configurationFile=file:{ROOT}/conf/log4j2.properties"
    out = ["--conf", f"spark.driver.defaultJavaOptions={log4j}"]
    if not local_master(master):
        return out
    if system == "lsh-spark":
        return out + ["--properties-file", os.path.join(ROOT, "conf", "local.properties")]
    return out + ["--conf", "spark.ui.enabled=false"]


# --max-all-pairs of the benchmark runs: pair-level recall needs every verified pair,
# and the 41k corpora estimate up to a few tens of millions before verification.
ALL_PAIRS_BOUND = 1_000_000_000


def run_measured(cmd: list[str], env: dict | None = None) -> dict:
    """Run ``cmd``; return wall seconds, the peak memory of its process tree (MiB,
    see :func:`tree_memory`) and of its largest JVM and largest Python process alone
    (resident MiB), the CPU seconds of the whole tree (user + system, each process's
    last sample), exit code and output tail.  Processes are sampled every 0.5 s, so a
    process living less than that can be missed."""
    import psutil

    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    peak = {"tree": 0, "java": 0, "python": 0}
    cpu: dict[int, float] = {}
    done = threading.Event()

    def poll() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            with contextlib.suppress(psutil.Error):
                procs = [root] + root.children(recursive=True)
                peak["tree"] = max(peak["tree"], tree_memory(procs))
                for p in procs:
                    with contextlib.suppress(psutil.Error), p.oneshot():
                        t = p.cpu_times()
                        cpu[p.pid] = t.user + t.system
                        # cmdline, not exe(): psutil caches a process's exe, and the
                        # root runs bash until spark-class execs the JVM
                        name = os.path.basename((p.cmdline() or [""])[0])  # [] for a zombie
                        kind = "java" if name == "java" else "python" if "python" in name else ""
                        if kind:
                            peak[kind] = max(peak[kind], p.memory_info().rss)
            time.sleep(0.5)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    out, _ = proc.communicate()
    done.set()
    t.join()
    return {
        "seconds": round(time.perf_counter() - start, 1),
        "peak_mem_mib": round(peak["tree"] / 2**20),
        "peak_jvm_mib": round(peak["java"] / 2**20),
        "peak_python_process_mib": round(peak["python"] / 2**20),
        "cpu_seconds": round(sum(cpu.values()), 1),
        "exit": proc.returncode,
        "tail": out.strip().splitlines()[-3:],
    }


def summarize_runs(runs: list[dict], n_docs: int) -> dict:
    """One system's timed runs (:func:`run_measured`, in round order) as one result.

    A failed run is reported as it failed. Otherwise the time is the median of
    the rounds, the memory the largest peak, the output tail the last round's,
    and ``runs_seconds`` lists every round.
    """
    failed = [r for r in runs if r["exit"] != 0]
    if failed:
        return dict(failed[0])
    seconds = round(statistics.median(r["seconds"] for r in runs), 1)
    return {
        **runs[-1],
        "seconds": seconds,
        "peak_mem_mib": max(r["peak_mem_mib"] for r in runs),
        "runs_seconds": [r["seconds"] for r in runs],
        "docs_per_second": round(n_docs / seconds, 1),
    }


def _fields(corpus: str, id_col: str, text_col: str, lines: int) -> tuple[bool, set[str]]:
    """Whether a record among the first ``lines`` of ``corpus`` has a non-null
    ``id_col`` and a string ``text_col``, and the fields seen before it."""
    seen: set[str] = set()
    for rec in corpus_records(corpus, lines):
        if usable(rec, id_col, text_col):
            return True, seen
        seen.update(rec)
    return False, seen


def check_fields(corpus: str, id_col: str, text_col: str, lines: int = 1000) -> None:
    """Stop with a message naming the option when no record among the corpus's
    first ``lines`` has an ``id_col`` and a string ``text_col``.

    Every system reads the same two fields, and the scores match pairs by id,
    so a corpus without ids cannot be compared (lsh-spark itself would derive
    them, the peers cannot): this says so before any system runs.
    """
    found, seen = _fields(corpus, id_col, text_col, lines)
    if found:
        return
    if not seen:
        raise SystemExit(
            f"--corpus: no JSON object among the first {lines} lines of "
            f"{corpus}; compare.py reads JSON Lines"
        )
    missing = [
        f"--{opt} {name!r}"
        for opt, name in (("id-col", id_col), ("text-col", text_col))
        if name not in seen
    ]
    what = " and ".join(missing) or (
        f"--id-col {id_col!r} with --text-col {text_col!r}: "
        "never a non-null id together with a string text"
    )
    raise SystemExit(
        f"{what}: not found in the first {lines} records of {corpus} (their "
        f"fields: {', '.join(sorted(seen))}). Every system reads these two "
        "fields and the pairs are scored by id: pass the corpus's own names"
    )


def ground_truth(
    corpus: str, threshold: float, cache_dir: str, id_col: str = "id", text_col: str = "text"
) -> dict:
    """All pairs with exact Jaccard >= ``threshold`` (bench/quality.py), cached.

    The pure-Python all-pairs search takes minutes on a 40k-document corpus, so
    its result is kept in ``cache_dir`` under a key of the corpus's files
    (path, size and modification time of each), the threshold and the two
    fields read; any change to the corpus misses.
    """
    fields = "" if (id_col, text_col) == ("id", "text") else f"|{id_col}|{text_col}"
    key = hashlib.sha256(
        f"{corpus_fingerprint(corpus)}|{threshold!r}{fields}".encode()
    ).hexdigest()[:16]
    path = os.path.join(cache_dir, f"truth-{key}.pkl")
    if os.path.exists(path):
        with open(path, "rb") as fh:
            return pickle.load(fh)
    truth = all_pairs(load(corpus, id_col, text_col, 5), threshold)
    os.makedirs(cache_dir, exist_ok=True)
    with open(path + ".tmp", "wb") as fh:
        pickle.dump(truth, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(path + ".tmp", path)
    return truth


def spark_submit() -> str:
    return os.path.join(os.path.dirname(sys.executable), "spark-submit")


def submit_command(system: str, master: str, driver_memory: str) -> list[str]:
    """``spark-submit`` with the master, driver memory and :func:`spark_settings`
    of Spark system ``system``; the script and its arguments follow."""
    base = [spark_submit(), "--master", master, "--driver-memory", driver_memory]
    return base + spark_settings(system, master)


def measured_dedup(
    args: argparse.Namespace, corpus: str, out: str, *job_args: str, spark_args: tuple = ()
) -> tuple[dict, dict]:
    """``spark-submit jobs/dedup.py --input corpus --output out --overwrite --threshold
    args.threshold *job_args`` as the README runs it (``args.master``,
    ``args.driver_memory``; ``spark_args`` before the script), measured by
    :func:`run_measured`: the measurement and the run's report.json.  Exits on failure."""
    cmd = [
        *submit_command("lsh-spark", args.master, args.driver_memory),
        *spark_args,
        os.path.join(ROOT, "jobs", "dedup.py"),
        *("--input", corpus, "--output", out, "--overwrite"),
        *("--threshold", str(args.threshold), *job_args),
    ]
    m = run_measured(cmd)
    if m["exit"] != 0:
        raise SystemExit(f"dedup failed on {corpus}:\n" + "\n".join(m["tail"]))
    with open(os.path.join(out, "report.json"), encoding="utf-8") as fh:
        return m, json.load(fh)


def score(pairs: dict, truth: dict, t: float) -> dict:
    strong = [p for p, j in truth.items() if j >= t + 0.05]
    return {
        "verified_pairs": len(pairs),
        "recall": round(sum(p in pairs for p in truth) / max(1, len(truth)), 4),
        "recall_at_t_plus_0.05": round(sum(p in pairs for p in strong) / max(1, len(strong)), 4),
        "false_pairs": sum(1 for p in pairs if p not in truth),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    p.add_argument("--corpus", required=True)
    p.add_argument("--work", required=True, help="folder for the systems' outputs")
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--systems", default="lsh-spark,mllib,datasketch")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="4g")
    # The fewest tables with P(candidate | J = 0.8) = 1 - 0.2**t >= 0.99, the
    # criterion lsh-spark's own banding uses (3 measured 0.9958 recall here).
    p.add_argument("--mllib-tables", type=int, default=3)
    p.add_argument(
        "--id-col", default="id", help="the records' id field, given to every system (default: id)"
    )
    p.add_argument(
        "--text-col",
        default="text",
        help="the records' text field, given to every system (default: text)",
    )
    p.add_argument(
        "--truth-cache",
        default=os.path.join(ROOT, "bench", "out", "truth"),
        help="folder where the exact ground truth of a corpus is kept between "
        "runs (keyed by the path, size and mtime of the corpus's files, the "
        "threshold and the two fields)",
    )
    p.add_argument(
        "--max-bucket-size",
        type=int,
        default=None,
        help="passed to lsh-spark (default: its own default)",
    )
    # Recall is counted over the pairs each system lists, and the peers list
    # every pair they verify: so does lsh-spark here, unless told otherwise.
    p.add_argument(
        "--max-family-size",
        type=int,
        default=None,
        help="passed to lsh-spark (default: the corpus size, so that no "
        "family is written as a spanning forest and pairs/ lists every "
        "verified pair)",
    )
    p.add_argument(
        "--warmup",
        default=os.path.join(ROOT, "data", "sample", "corpus.jsonl"),
        help="a small corpus each system runs once, untimed, right before its "
        "timed run (default: the bundled 411-document sample), so that no "
        "system pays for a cold page cache, compiled-code caches or first "
        "class loads the systems after it do not; '' for none",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of timed runs (default 1); within a round the systems run "
        "one after the other, so the machine's drift falls on all of them "
        "alike. A system's time is the median of its rounds, its memory the "
        "largest peak, and each round's speed-up is printed as well",
    )
    args = p.parse_args()
    if args.repeat < 1:
        raise SystemExit(f"--repeat must be at least 1, not {args.repeat}")
    check_fields(args.corpus, args.id_col, args.text_col)
    # Before any system runs (the ground truth comes after them): the pairs
    # are scored by id, and lsh-spark stops on a repeated one.
    check_ids(
        args.corpus,
        (
            rec[args.id_col]
            for rec in corpus_records(args.corpus)
            if usable(rec, args.id_col, args.text_col)
        ),
    )
    fields = ["--id-col", args.id_col, "--text-col", args.text_col]
    # The bundled warm-up sample has the default fields whatever the corpus's are.
    warm_fields = fields
    if args.warmup and not _fields(args.warmup, args.id_col, args.text_col, 1000)[0]:
        check_fields(args.warmup, "id", "text")
        warm_fields = []
    os.makedirs(args.work, exist_ok=True)
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    n_docs = sum(1 for line in corpus_lines(args.corpus) if line.strip())

    def command(system: str, corpus: str, out: str, fields: list[str] = fields) -> list[str]:
        if system == "lsh-spark":
            cmd = (
                submit_command(system, args.master, args.driver_memory)
                + [
                    os.path.join(ROOT, "jobs", "dedup.py"),
                    "--input",
                    corpus,
                    "--output",
                    out,
                    "--threshold",
                    str(args.threshold),
                ]
                + fields
            )
            if args.max_bucket_size:
                cmd += ["--max-bucket-size", str(args.max_bucket_size)]
            # Every verified pair, as the peers list them (the default writes edges).
            cmd += ["--pairs", "all", "--max-all-pairs", str(ALL_PAIRS_BOUND)]
            return cmd + ["--max-family-size", str(args.max_family_size or max(n_docs, 2))]
        if system == "mllib":
            return (
                submit_command(system, args.master, args.driver_memory)
                + [
                    os.path.join(HERE, "peer_mllib.py"),
                    "--corpus",
                    corpus,
                    "--out",
                    out,
                    "--threshold",
                    str(args.threshold),
                    "--tables",
                    str(args.mllib_tables),
                ]
                + fields
            )
        if system == "datasketch":
            return [
                sys.executable,
                os.path.join(HERE, "peer_datasketch.py"),
                "--corpus",
                corpus,
                "--out",
                out,
                "--threshold",
                str(args.threshold),
            ] + fields
        raise SystemExit(f"--systems: unknown system {system!r}")

    systems = args.systems.split(",")
    for system in systems:
        command(system, args.corpus, "")  # unknown names fail before anything runs
    runs: dict[str, list[dict]] = {system: [] for system in systems}
    for round_no in range(args.repeat):
        for system in systems:
            if runs[system] and runs[system][-1]["exit"] != 0:
                continue  # failed in an earlier round: reported as it failed
            out = os.path.join(args.work, system)
            subprocess.run(["rm", "-rf", out], check=True)
            if args.warmup and round_no == 0:
                warm = os.path.join(args.work, "warmup", system)
                subprocess.run(["rm", "-rf", warm], check=True)
                print(
                    f"warming up {system} on {args.warmup} (not timed) ...",
                    file=sys.stderr,
                    flush=True,
                )
                warmed = run_measured(command(system, args.warmup, warm, warm_fields), env)
                if warmed["exit"] != 0:
                    raise SystemExit(
                        f"{system}'s warm-up run failed:\n" + "\n".join(warmed["tail"])
                    )
            rounds = f" (round {round_no + 1} of {args.repeat})" if args.repeat > 1 else ""
            print(f"running {system}{rounds} ...", file=sys.stderr, flush=True)
            runs[system].append(run_measured(command(system, args.corpus, out), env))
    results = {system: summarize_runs(done, n_docs) for system, done in runs.items()}
    print("computing exact ground truth ...", file=sys.stderr, flush=True)
    truth = ground_truth(args.corpus, args.threshold, args.truth_cache, args.id_col, args.text_col)
    for system, res in results.items():
        out = os.path.join(args.work, system)
        if res["exit"] != 0:
            continue
        if system == "datasketch":
            with open(os.path.join(out, "pairs.jsonl")) as fh:
                rows = [json.loads(line) for line in fh]
        else:
            rows = read_parquet(os.path.join(out, "pairs"))
        pairs = {(r["id_a"], r["id_b"]): r["jaccard"] for r in rows}
        res.update(score(pairs, truth, args.threshold))
        if system == "lsh-spark":
            with open(os.path.join(out, "report.json")) as fh:
                rep = json.load(fh)
            res["candidate_pairs"] = rep["counts"]["candidate_pairs"]
            res["bounded_buckets"] = rep["buckets"]["bounded_buckets"]
        else:
            for line in res["tail"]:
                if line.startswith("{"):
                    res.update(
                        {k: v for k, v in json.loads(line).items() if k in ("candidate_pairs",)}
                    )
    summary = {
        "corpus": args.corpus,
        "documents": n_docs,
        "threshold": args.threshold,
        "warmup": args.warmup or None,
        "true_pairs": len(truth),
        "systems": results,
    }
    with open(os.path.join(args.work, "results.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    cols = [
        "seconds",
        "docs_per_second",
        "candidate_pairs",
        "verified_pairs",
        "recall",
        "recall_at_t_plus_0.05",
        "false_pairs",
        "peak_mem_mib",
    ]
    print(f"{len(truth)} true pairs with J >= {args.threshold} among {n_docs} documents")
    print("| system | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for system, res in results.items():
        print(f"| {system} | " + " | ".join(str(res.get(c, "—")) for c in cols) + " |")
    base = results.get("lsh-spark", {})
    for system, res in results.items():
        if base.get("exit") == 0 and system != "lsh-spark" and res.get("exit") == 0:
            line = f"lsh-spark speed-up over {system}: {res['seconds'] / base['seconds']:.1f}x"
            if args.repeat > 1:
                line += (
                    " (medians; by round: "
                    + ", ".join(
                        f"{theirs / ours:.1f}x"
                        for ours, theirs in zip(
                            base["runs_seconds"], res["runs_seconds"], strict=False
                        )
                    )
                    + ")"
                )
            print(line)


if __name__ == "__main__":
    main()
