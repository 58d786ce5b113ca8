"""lsh-spark side by side with Spark MLlib, datasketch and datatrove on one corpus.

    python bench/compare.py --corpus bench/out/c40k/corpus.jsonl --work bench/out/cmp \\
        [--threshold 0.8] [--systems lsh-spark,mllib,datasketch] [--master 'local[2]']
    python bench/compare.py --corpus bench/out/web/corpus-200000-web/corpus.jsonl \\
        --work bench/out/cmp200k-web --datatrove-python VENV/bin/python

Runs each system as its own process (spark-submit for the Spark ones), first
once untimed on a small warm-up corpus (``--warmup``, the bundled sample), so
the timed run of whichever system goes first does not alone pay for reading
Spark's jars and the Python packages from a cold disk or for compiling and
caching kernels; then on the corpus, and records
wall time, the CPU seconds and the peak memory of its whole process tree (JVM plus
Python workers; see tree_memory; polled every 0.5 s), then scores every system
against the same truth (``--score``):

* ``pairs`` (any corpus): the pairs each system lists against every pair with
  exact Jaccard >= threshold (bench/quality.py); lsh-spark lists every verified
  pair (``--pairs all``), as MLlib and datasketch do;
* ``planted`` (a corpus of ``bench/make_corpus.py --shape web|flat``, whose
  originals carry ``"original": true``; ``auto``, the default, picks it for such
  a corpus): the planted copies, scored as bench/web_shape.py scores them (its
  ``quality``): recall of the copies with exact Jaccard >= threshold with their
  original (in one cluster with it), removed documents, false edges (links below
  the threshold: lsh-spark's ``pairs/``, datatrove's candidate pairs) and
  removals across groups.  lsh-spark runs with the README's defaults.

datatrove (bench/peer_datatrove.py: 0.10.1 measured, the FineWeb recipe, 14 bands
of 8 hashes, ``--datatrove-workers`` processes, by default the master's cores) is
scored on planted corpora only: it verifies no pair, so it has none to list.  It
runs under a Python of its own, given by ``--datatrove-python`` (made with
``python3 -m venv VENV && VENV/bin/pip install 'datatrove[io,processing]==0.10.1'
spacy``); without one it is skipped, and a line says so.  Its input is the corpus
dealt into one JSON Lines file per worker under ``--work`` (not timed).

Prints one table and writes ``results.json`` under ``--work``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pickle
import re
import shutil
import statistics
import struct
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


def cores(master: str) -> int:
    m = re.fullmatch(r"local\[(\d+)(,\s*\d+)?\]", master)
    if m:
        return int(m.group(1))
    if master == "local":
        return 1
    return os.cpu_count() or 1


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
    last sample), the machine's 1-minute load average before and after (on a shared
    machine, how busy the others kept it), exit code and output tail.  Processes are
    sampled every 0.5 s, so a process living less than that can be missed."""
    import psutil

    load_before = os.getloadavg()[0]
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
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
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


# The systems each --score can score.  The exact ground truth scores the pairs a
# system lists, and every peer but datatrove verifies its candidates and lists them;
# the planted copies score clusters and the links they are made of, which lsh-spark
# and datatrove write (MLlib and datasketch write no clusters).
SCORED = {
    "pairs": ("lsh-spark", "mllib", "datasketch"),
    "planted": ("lsh-spark", "datatrove"),
}


def planted_corpus(corpus: str, lines: int = 1000) -> bool:
    """Whether a record among the first ``lines`` of ``corpus`` is a planted original
    (``"original": true``, written by ``bench/make_corpus.py --shape web|flat``)."""
    return any(rec.get("original") is True for rec in corpus_records(corpus, lines))


def choose_score(score: str, corpus: str, id_col: str, text_col: str) -> str:
    """``--score``: ``auto`` is ``planted`` for a corpus with planted originals and
    ``pairs`` otherwise.  Planted scoring reads the corpus as bench/web_shape.py
    does: one JSON Lines file with the fields ``id`` and ``text``."""
    if score == "auto":
        score = "planted" if planted_corpus(corpus) else "pairs"
    if score == "planted":
        if (id_col, text_col) != ("id", "text"):
            raise SystemExit(
                "--score planted reads the fields id and text of bench/make_corpus.py, "
                f"not --id-col {id_col!r} --text-col {text_col!r}"
            )
        if not os.path.isfile(corpus):
            raise SystemExit(f"--score planted reads one corpus.jsonl file, not {corpus}")
    return score


def choose_systems(
    systems: str | None, score: str, datatrove_python: str | None
) -> tuple[list[str], dict[str, str]]:
    """The systems to run (``--systems``, by default every system ``score`` scores)
    and those skipped, each with the reason printed for it: datatrove without
    ``--datatrove-python``.  A system unknown, or one ``score`` cannot score, stops
    everything before anything runs."""
    names = systems.split(",") if systems else list(SCORED[score])
    known = sorted({n for group in SCORED.values() for n in group})
    for name in names:
        if name not in known:
            raise SystemExit(f"--systems: unknown system {name!r}; known: {', '.join(known)}")
        if name not in SCORED[score]:
            other = next(k for k, v in SCORED.items() if name in v)
            raise SystemExit(
                f"--systems: {name} cannot be scored with --score {score} (only with "
                f"--score {other}); with --score {score}: {', '.join(SCORED[score])}"
            )
    skipped = {}
    if "datatrove" in names and not datatrove_python:
        skipped["datatrove"] = (
            "no --datatrove-python given (a Python with datatrove 0.10.x: "
            "see bench/compare.py's docstring)"
        )
    run = [n for n in names if n not in skipped]
    if not run:
        raise SystemExit(
            "nothing to run: " + "; ".join(f"{n} skipped: {why}" for n, why in skipped.items())
        )
    return run, skipped


def datatrove_version(python: str) -> str:
    """The version of datatrove ``python`` imports; stops naming the option otherwise."""
    code = "import importlib.metadata as m; print(m.version('datatrove'))"
    try:
        done = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=300, check=False
        )
    except OSError as e:
        raise SystemExit(f"--datatrove-python {python}: cannot run it: {e}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(
            f"--datatrove-python {python}: no datatrove there ({tail}); make one with "
            "python3 -m venv VENV && VENV/bin/pip install 'datatrove[io,processing]==0.10.1' spacy"
        )
    return done.stdout.strip()


def write_shards(corpus: str, folder: str, n: int, id_col: str, text_col: str) -> str:
    """``corpus``'s usable records dealt in turn into ``n`` JSON Lines files under
    ``folder`` (made anew), with the fields ``id`` and ``text`` that
    bench/peer_datatrove.py reads: datatrove runs one task per file in its first
    and last stage."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with contextlib.ExitStack() as stack:
        files = [
            stack.enter_context(
                open(os.path.join(folder, f"part-{i:05d}.jsonl"), "w", encoding="utf-8")
            )
            for i in range(n)
        ]
        records = (r for r in corpus_records(corpus) if usable(r, id_col, text_col))
        for k, rec in enumerate(records):
            doc = {"id": rec[id_col], "text": rec[text_col]}
            files[k % n].write(json.dumps(doc, ensure_ascii=False) + "\n")
    return folder


def datatrove_outcome(out: str, shards: list[str], truth: list[dict]):
    """What :func:`lsh_spark_outcome` gives, from a bench/peer_datatrove.py output:
    found copies (the copy or its original removed), its candidate pairs (the
    ``.dups`` files, each side a shard number and the document's place in it) and
    the removals (removed id, the id its cluster keeps)."""
    order = []
    for path in shards:
        with open(path, encoding="utf-8") as fh:
            order.append([json.loads(line)["id"] for line in fh])
    links = set()
    folder = os.path.join(out, "buckets")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".dups"):
            with open(os.path.join(folder, name), "rb") as fh:
                for f1, d1, f2, d2 in struct.iter_unpack("<4I", fh.read()):
                    links.add(tuple(sorted((order[f1][d1], order[f2][d2]))))

    def read(sub):
        rows = []
        for root, _, names in os.walk(os.path.join(out, sub)):
            for name in sorted(names):
                with open(os.path.join(root, name), encoding="utf-8") as fh:
                    for line in fh:
                        d = json.loads(line)
                        rows.append((d["id"], d.get("metadata", {}).get("minhash_cluster_id", -1)))
        return rows

    removed = read("removed")
    kept = {c: i for i, c in read("kept") if c != -1}
    gone = {i for i, _ in removed}
    found = {t["copy"] for t in truth if t["copy"] in gone or t["original"] in gone}
    removals = [(i, kept[c]) for i, c in removed if c in kept]
    return found, sorted(links), removals


def datatrove_as_run(out: str, shards: str) -> dict:
    """Write a bench/peer_datatrove.py output ``out`` (run on the files of
    ``shards``) in the layout of a lsh-spark run, which bench/web_shape.py's
    ``quality`` scores: ``clusters/`` (``id``, ``cluster_id``, ``keep``: every
    document; a datatrove cluster is named by the id it keeps, any other document is
    its own) and ``pairs/`` (``id_a``, ``id_b``: the candidate pairs datatrove's
    clusters are made of, as bench/multilingual.py reads them; it verifies none).
    Returns their counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(os.path.join(shards, f) for f in os.listdir(shards) if f.endswith(".jsonl"))
    _, links, removals = datatrove_outcome(out, files, [])
    removed_lines = 0
    for root, _, names in os.walk(os.path.join(out, "removed")):
        for name in names:
            with open(os.path.join(root, name), encoding="utf-8") as fh:
                removed_lines += sum(1 for line in fh if line.strip())
    if removed_lines != len(removals):
        raise SystemExit(
            f"{out}: {removed_lines - len(removals)} removed documents whose cluster "
            "keeps no document: not a complete datatrove output"
        )
    ids = []
    for path in files:
        with open(path, encoding="utf-8") as fh:
            ids += [json.loads(line)["id"] for line in fh if line.strip()]
    cluster = {i: i for i in ids}
    for gone, kept in removals:
        cluster[gone] = kept
    gone = {i for i, _ in removals}
    for sub, table in (
        (
            "clusters",
            pa.table(
                {
                    "id": ids,
                    "cluster_id": [cluster[i] for i in ids],
                    "keep": [i not in gone for i in ids],
                }
            ),
        ),
        ("pairs", pa.table({"id_a": [a for a, _ in links], "id_b": [b for _, b in links]})),
    ):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
        os.makedirs(os.path.join(out, sub))
        pq.write_table(table, os.path.join(out, sub, "part-00000.parquet"))
    return {"candidate_pairs": len(links)}


def false_edges_across_groups(run: str, texts: dict[str, str], threshold: float) -> int:
    """Edges of ``run``'s ``pairs/`` below ``threshold`` (exact Jaccard, reference
    shingles) between documents of two planted groups.  bench/web_shape.py's
    ``false_edges`` counts these and those inside a group: two near copies of one
    original, each at or above the threshold with it, can fall below it with each
    other, a link that removes a planted copy all the same."""
    import pyarrow.dataset as ds
    from planted import Shingles, group

    pairs = ds.dataset(os.path.join(run, "pairs"), format="parquet").to_table(
        columns=["id_a", "id_b"]
    )
    shingles = Shingles(texts)
    return sum(
        group(a) != group(b) and shingles.jaccard(a, b) < threshold - 1e-9
        for a, b in zip(
            pairs.column("id_a").to_pylist(), pairs.column("id_b").to_pylist(), strict=True
        )
    )


# The columns of the printed table under each --score (results.json has more).
TABLE_COLUMNS = {
    "pairs": [
        "seconds",
        "docs_per_second",
        "candidate_pairs",
        "verified_pairs",
        "recall",
        "recall_at_t_plus_0.05",
        "false_pairs",
        "peak_mem_mib",
    ],
    "planted": [
        "seconds",
        "cpu_seconds",
        "docs_per_second",
        "removed",
        "recall",
        "false_edges",
        "false_edges_across_groups",
        "removals_across_groups",
        "edges",
        "peak_mem_mib",
    ],
}


def table(results: dict[str, dict], cols: list[str]) -> str:
    """The Markdown table of ``results``, one row per system, "—" where a system has
    no such figure."""
    lines = ["| system | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for system, res in results.items():
        lines.append(f"| {system} | " + " | ".join(str(res.get(c, "—")) for c in cols) + " |")
    return "\n".join(lines)


def own_counts(system: str, res: dict, out: str) -> dict:
    """What a finished system says of its own run: lsh-spark's report.json (candidate
    pairs, bounded buckets); a peer's last JSON line (its candidate pairs; datatrove's
    own time from its start to the end of its last stage, ``own_seconds``)."""
    if system == "lsh-spark":
        with open(os.path.join(out, "report.json")) as fh:
            rep = json.load(fh)
        return {
            "candidate_pairs": rep["counts"]["candidate_pairs"],
            "bounded_buckets": rep["buckets"]["bounded_buckets"],
        }
    got = {}
    for line in res["tail"]:
        if line.startswith("{"):
            own = json.loads(line)
            if "candidate_pairs" in own:
                got["candidate_pairs"] = own["candidate_pairs"]
            if system == "datatrove" and "seconds" in own:
                got["own_seconds"] = own["seconds"]
    return got


def score_pairs(args: argparse.Namespace, results: dict[str, dict]) -> int:
    """Score each finished system's listed pairs against the exact ground truth
    (:func:`ground_truth`, :func:`score`); returns the number of true pairs."""
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
    return len(truth)


def score_planted(args: argparse.Namespace, results: dict[str, dict], shards: str | None) -> int:
    """Score each finished system against the planted copies with bench/web_shape.py's
    ``quality`` (datatrove's output first written as a run, :func:`datatrove_as_run`),
    and :func:`false_edges_across_groups`; ``edges`` counts the rows of ``pairs/``.
    Returns the number of planted copies at or above the threshold."""
    import pyarrow.dataset as ds
    from planted import quality, read_texts

    print("scoring against the planted copies ...", file=sys.stderr, flush=True)
    texts, originals = read_texts(args.corpus)
    planted = 0
    for system, res in results.items():
        out = os.path.join(args.work, system)
        if res["exit"] != 0:
            continue
        if system == "datatrove":
            res.update(datatrove_as_run(out, shards))
        res.update(quality(out, texts, originals, args.threshold))
        res["false_edges_across_groups"] = false_edges_across_groups(out, texts, args.threshold)
        res["edges"] = ds.dataset(os.path.join(out, "pairs"), format="parquet").count_rows()
        planted = res["planted_copies"]
    return planted


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    p.add_argument("--corpus", required=True)
    p.add_argument("--work", required=True, help="folder for the systems' outputs")
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument(
        "--systems",
        help="comma-separated, of lsh-spark, mllib, datasketch (--score pairs) and "
        "datatrove (--score planted); default: every system the score scores",
    )
    p.add_argument(
        "--score",
        choices=("auto", "pairs", "planted"),
        default="auto",
        help="pairs: against every pair with exact J >= threshold; planted: against "
        "the copies bench/make_corpus.py --shape web|flat planted; auto (default): "
        "planted for a corpus whose records mark their original",
    )
    p.add_argument(
        "--datatrove-python",
        help="a Python with datatrove 0.10.x (its own virtualenv: see the docstring) "
        "to run bench/peer_datatrove.py with; without it datatrove is skipped",
    )
    p.add_argument(
        "--datatrove-workers",
        type=int,
        help="datatrove's worker processes, and the files its input is dealt into "
        "(default: the cores of --master)",
    )
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
    score_by = choose_score(args.score, args.corpus, args.id_col, args.text_col)
    systems, skipped = choose_systems(args.systems, score_by, args.datatrove_python)
    for system, why in skipped.items():
        print(f"{system}: skipped: {why}", file=sys.stderr, flush=True)
    versions = {}
    workers = 0
    if "datatrove" in systems:
        versions["datatrove"] = datatrove_version(args.datatrove_python)
        workers = args.datatrove_workers or cores(args.master)
        if workers < 1:
            raise SystemExit(f"--datatrove-workers must be at least 1, not {workers}")
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
    # datatrove's input: the corpus (and the warm-up corpus) dealt into one file per
    # worker, written before anything is timed.
    shard_dirs = {}
    if "datatrove" in systems:
        for corpus, folder, names in (
            (args.corpus, os.path.join(args.work, "datatrove-input"), fields),
            (args.warmup, os.path.join(args.work, "warmup", "datatrove-input"), warm_fields),
        ):
            if corpus:
                id_col, text_col = names[1::2] or ["id", "text"]
                shard_dirs[corpus] = write_shards(corpus, folder, workers, id_col, text_col)

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
            if score_by == "planted":
                # The README's command: what is scored is clusters and their edges.
                if args.max_family_size:
                    cmd += ["--max-family-size", str(args.max_family_size)]
                return cmd
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
        if system == "datatrove":
            return [
                args.datatrove_python,
                os.path.join(HERE, "peer_datatrove.py"),
                *("--input", shard_dirs[corpus], "--out", out),
                *("--workers", str(workers)),
            ]
        raise SystemExit(f"--systems: unknown system {system!r}")

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
    for system, res in results.items():
        if res["exit"] == 0:
            res.update(own_counts(system, res, os.path.join(args.work, system)))
        if system in versions:
            res["version"] = versions[system]
    if score_by == "planted":
        truth_size = score_planted(args, results, shard_dirs.get(args.corpus))
    else:
        truth_size = score_pairs(args, results)
    summary = {
        "corpus": args.corpus,
        "documents": n_docs,
        "threshold": args.threshold,
        "score": score_by,
        "warmup": args.warmup or None,
        ("planted_copies" if score_by == "planted" else "true_pairs"): truth_size,
        "systems": results,
        "skipped": skipped,
    }
    with open(os.path.join(args.work, "results.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    if score_by == "planted":
        print(
            f"{truth_size} planted copies with J >= {args.threshold} with their original "
            f"among {n_docs} documents"
        )
    else:
        print(f"{truth_size} true pairs with J >= {args.threshold} among {n_docs} documents")
    print(table(results, TABLE_COLUMNS[score_by]))
    for system, why in skipped.items():
        print(f"{system}: skipped: {why}")
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
