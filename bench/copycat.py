"""lsh-spark's decisions against human judgments of near-duplicate web pages (Webis CopyCat).

    python bench/copycat.py [--judgments ../shared/data/copycat/judgments] [--work DIR] \\
        [--threshold 0.8] [--master 'local[2]']

Each folder ``<src>__to__<target>`` of ``--judgments`` holds two crawled web pages
that share a canonical link (``src-doc``, ``target-doc``: text already lowercased
and stemmed, boilerplate kept) and ``label``, a human judgment of how similar
they are: 0.5, 1, 2 or 3 (higher is more similar) or unknown.  Webis CopyCat,
github.com/chatnoir-eu/chatnoir-copycat (MIT; the ClueWeb text is for evaluation
only: it is read from its folder at run time and never copied into the project).

Pairs without a readable label are left out (and counted).  The distinct pages
become one JSON Lines corpus (id = the page id of the folder name) in ``--work``
(a temporary folder unless given), deduplicated as the README runs it:
``spark-submit jobs/dedup.py`` with conf/local.properties and the default
options (word 5-grams, ``--threshold``).  lsh-spark calls a pair a duplicate
when its two pages share a cluster of ``clusters/``; a pair is positive when
judged 2 or 3.  Prints precision, recall and F1 with Wilson 95% intervals, the
confusion counts and the pairs merged per label; then the same for the pairs'
exact word-5-gram Jaccard (the independent oracle of tests/reference.py) at
fixed thresholds and at the best one (the Jaccard ceiling: the best F1 any
threshold on this measure reaches), the ROC-AUC of Jaccard for the binary
label, and the median Jaccard per label.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from compare import submit_command  # noqa: E402 (bench/ and tests/ are put on sys.path above)
from quality import read_parquet  # noqa: E402
from reference import jaccard, word_shingles  # noqa: E402

LABELS = (0.5, 1.0, 2.0, 3.0)
POSITIVE_FROM = 2.0  # "judged 2 or 3"
# Median word-5-gram Jaccard per label as ../shared/data/README.md states it.
README_MEDIANS = {0.5: 0.49, 1.0: 0.65, 2.0: 0.74, 3.0: 0.93}
FIXED_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
SEP = "__to__"


@dataclass(frozen=True)
class Pair:
    name: str
    src: str
    target: str
    label: float


# -- reading the judgments -------------------------------------------------------------


def parse_label(raw: str) -> float | None:
    """The judgment in a ``label`` file: one of :data:`LABELS`, or None when the
    file holds anything else (``unknown``, a misspelling, a stray suffix).
    Surrounding whitespace is ignored."""
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if value in LABELS else None


def pair_ids(name: str) -> tuple[str, str]:
    """``(src, target)`` page ids of a pair folder named ``src__to__target``."""
    parts = name.split(SEP)
    if len(parts) != 2 or not all(parts):
        raise SystemExit(f"--judgments: {name!r} is not a pair folder <src>{SEP}<target>")
    return parts[0], parts[1]


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def load_judgments(folder: str) -> tuple[list[Pair], dict[str, str], Counter, Counter]:
    """The labelled pairs of ``folder``, the text of each distinct page, the raw
    contents of the labels left out (counted), and in how many labelled pairs
    each page appears.  Stops when one page id comes with two different texts."""
    if not os.path.isdir(folder):
        raise SystemExit(f"--judgments: no folder {folder}")
    pairs: list[Pair] = []
    texts: dict[str, str] = {}
    skipped: Counter = Counter()
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not os.path.isdir(path):
            continue
        raw = _read(os.path.join(path, "label"))
        label = parse_label(raw)
        if label is None:
            skipped[raw.strip()] += 1
            continue
        src, target = pair_ids(name)
        for doc, file in ((src, "src-doc"), (target, "target-doc")):
            text = _read(os.path.join(path, file))
            if texts.setdefault(doc, text) != text:
                raise SystemExit(f"--judgments: page {doc} has two different texts ({name})")
        pairs.append(Pair(name, src, target, label))
    if not pairs:
        raise SystemExit(f"--judgments: no labelled pair under {folder}")
    uses = Counter(doc for p in pairs for doc in (p.src, p.target))
    return pairs, texts, skipped, uses


# -- scoring (pure) ----------------------------------------------------------------------


def confusion(predicted: Sequence[bool], actual: Sequence[bool]) -> dict[str, int]:
    """True/false positives and negatives of ``predicted`` against ``actual``."""
    c = Counter(zip(predicted, actual, strict=True))
    return {"tp": c[True, True], "fp": c[True, False], "fn": c[False, True], "tn": c[False, False]}


def prf(tp: int, fp: int, fn: int) -> tuple[float | None, float | None, float]:
    """Precision, recall (None when undefined: nothing predicted / nothing
    positive) and F1 (0 when either is undefined or both are 0)."""
    p = tp / (tp + fp) if tp + fp else None
    r = tp / (tp + fn) if tp + fn else None
    f1 = 2 * p * r / (p + r) if p and r else 0.0
    return p, r, f1


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """Wilson score interval of a proportion (95% for the default ``z``); None for n = 0."""
    if n == 0:
        return None
    phat = successes / n
    denom = 1 + z * z / n
    centre = (phat + z * z / (2 * n)) / denom
    half = z * math.sqrt(phat * (1 - phat) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def decisions(predicted: Sequence[bool], actual: Sequence[bool]) -> dict:
    """Confusion counts, precision, recall and F1 of ``predicted`` against ``actual``."""
    c = confusion(predicted, actual)
    p, r, f1 = prf(c["tp"], c["fp"], c["fn"])
    return {**c, "precision": p, "recall": r, "f1": f1}


def at_threshold(scores: Sequence[float], actual: Sequence[bool], t: float) -> dict:
    """:func:`decisions` of calling a pair "duplicate" when its score is >= t."""
    return {"threshold": t, **decisions([s >= t for s in scores], actual)}


def best_threshold(scores: Sequence[float], actual: Sequence[bool]) -> dict:
    """:func:`at_threshold` at the threshold with the highest F1, trying every
    distinct score (every other threshold decides like the next score up).
    Among thresholds of equal F1 the highest wins (it merges the least)."""
    best = None
    for t in sorted(set(scores), reverse=True):
        row = at_threshold(scores, actual, t)
        if best is None or row["f1"] > best["f1"]:
            best = row
    if best is None:
        raise ValueError("best_threshold of no scores")
    return best


def roc_auc(scores: Sequence[float], actual: Sequence[bool]) -> float | None:
    """Area under the ROC curve of ``scores`` for ``actual``: the probability
    that a random positive scores above a random negative (ties count half),
    by the rank-sum (Mann-Whitney U) with average ranks for ties.  None
    without both classes."""
    n_pos = sum(actual)
    n_neg = len(actual) - n_pos
    if not n_pos or not n_neg:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1  # ranks i+1 .. j+1, averaged
        i = j + 1
    pos_rank_sum = sum(r for r, a in zip(ranks, actual, strict=True) if a)
    return (pos_rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def merged_per_label(labels: Sequence[float], merged: Sequence[bool]) -> dict[float, tuple]:
    """``{label: (pairs, merged)}`` in label order."""
    out = {}
    for label in sorted(set(labels)):
        picked = [m for lab, m in zip(labels, merged, strict=True) if lab == label]
        out[label] = (len(picked), sum(picked))
    return out


# -- running lsh-spark ---------------------------------------------------------------


def write_corpus(texts: dict[str, str], path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for doc in sorted(texts):
            fh.write(json.dumps({"id": doc, "text": texts[doc]}, ensure_ascii=False) + "\n")


def run_dedup(args: argparse.Namespace, corpus: str, out: str) -> tuple[float, dict]:
    """``spark-submit jobs/dedup.py`` as the README runs it; wall seconds and report.json."""
    cmd = [
        *submit_command("lsh-spark", args.master, args.driver_memory),
        os.path.join(ROOT, "jobs", "dedup.py"),
        *("--input", corpus, "--output", out, "--overwrite"),
        *("--threshold", str(args.threshold)),
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise SystemExit("dedup failed:\n" + "\n".join(tail))
    with open(os.path.join(out, "report.json"), encoding="utf-8") as fh:
        return seconds, json.load(fh)


# -- printing ----------------------------------------------------------------------------


def _f(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _ci(x: tuple[float, float] | None) -> str:
    return "" if x is None else f" ({x[0]:.2f}–{x[1]:.2f})"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table, columns padded to their widest cell."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def decision_row(name: str, d: dict) -> list[object]:
    return [
        name,
        _f(d["precision"]) + _ci(wilson(d["tp"], d["tp"] + d["fp"])),
        _f(d["recall"]) + _ci(wilson(d["tp"], d["tp"] + d["fn"])),
        _f(d["f1"]),
        d["tp"],
        d["fp"],
        d["fn"],
        d["tn"],
    ]


def _label(x: float) -> str:
    return f"{x:g}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    p.add_argument(
        "--judgments",
        default=os.path.join(ROOT, "..", "shared", "data", "copycat", "judgments"),
        help="folder of <src>__to__<target>/ pair folders (default: "
        "../shared/data/copycat/judgments relative to the repository)",
    )
    p.add_argument("--work", help="folder for the corpus and the run (default: a temporary one)")
    p.add_argument("--threshold", type=float, default=0.8, help="lsh-spark's --threshold")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--k", type=int, default=5, help="word k of the oracle's Jaccard (job: 5)")
    args = p.parse_args()

    pairs, texts, skipped, uses = load_judgments(os.path.abspath(args.judgments))
    shared = sorted(d for d, n in uses.items() if n > 1)
    total = len(pairs) + sum(skipped.values())
    left_out = ", ".join(f"{n} {raw!r}" for raw, n in skipped.most_common())
    print(f"judged pairs: {total}; labelled: {len(pairs)}; left out: {left_out or 'none'}")
    print(
        f"distinct pages: {len(texts)} ({len(shared)} of them in more than one "
        f"labelled pair, each with one text); "
        f"{sum(len(t.encode()) for t in texts.values()) / 1e6:.1f} MB"
    )

    work = args.work or tempfile.mkdtemp(prefix="copycat-")
    os.makedirs(work, exist_ok=True)
    try:
        corpus = os.path.join(work, "corpus.jsonl")
        out = os.path.join(work, "run")
        write_corpus(texts, corpus)
        sys.stdout.flush()
        print(f"running lsh-spark on {corpus} ...", file=sys.stderr, flush=True)
        seconds, report = run_dedup(args, corpus, out)
        cluster = {r["id"]: r["cluster_id"] for r in read_parquet(os.path.join(out, "clusters"))}
        edges = {
            (r["id_a"], r["id_b"]): r["jaccard"] for r in read_parquet(os.path.join(out, "pairs"))
        }
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)

    shingles = {doc: word_shingles(text, args.k) for doc, text in texts.items()}
    labels = [pr.label for pr in pairs]
    actual = [pr.label >= POSITIVE_FROM for pr in pairs]
    merged = [pr.src in cluster and cluster.get(pr.src) == cluster.get(pr.target) for pr in pairs]
    jac = [jaccard(shingles[pr.src], shingles[pr.target]) for pr in pairs]

    prm = report["parameters"]
    counts = report["counts"]
    print(
        f"lsh-spark {report.get('lsh_spark_version')}: {prm['shingle']} {prm['k']}-grams, "
        f"threshold {prm['threshold']}, {prm['num_perm']} permutations, "
        f"{prm['bands']} bands x {prm['rows']} rows; {counts['accepted']} pages accepted, "
        f"{counts['rejected']} rejected, {counts['duplicate_clusters']} duplicate clusters "
        f"(largest {counts['largest_cluster']}); {seconds:.1f} s wall ({args.master})"
    )

    # The oracle against the job's own Jaccard, on the judged pairs pairs/ lists.
    listed = []
    for pr, j in zip(pairs, jac, strict=True):
        key = (min(pr.src, pr.target), max(pr.src, pr.target))
        if key in edges:
            listed.append(abs(edges[key] - j))
    agree = sum(d <= 1e-9 for d in listed)
    worst = _f(max(listed), 6) if listed else "—"
    print(
        f"oracle Jaccard vs pairs/ jaccard: {agree} of {len(listed)} judged pairs listed "
        f"in pairs/ agree within 1e-9 (largest difference {worst})"
    )
    print()

    n_pos = sum(actual)
    print(
        f"positive = judged 2 or 3: {n_pos} of {len(pairs)} pairs; "
        f"P, R: Wilson 95% intervals in brackets"
    )
    lsh = decisions(merged, actual)
    exact = at_threshold(jac, actual, args.threshold)
    best = best_threshold(jac, actual)
    header = ["decision", "precision", "recall", "F1", "TP", "FP", "FN", "TN"]
    rows = [
        decision_row(f"lsh-spark (same cluster, t {args.threshold:g})", lsh),
        decision_row(f"exact Jaccard >= {args.threshold:g}", exact),
        # Rounded down: every pair the best threshold calls a duplicate is >= the shown value.
        decision_row(
            f"Jaccard ceiling: J >= {math.floor(best['threshold'] * 1e4) / 1e4:.4f}", best
        ),
    ]
    print(table(header, rows))
    lsh_only = sum(m and j < args.threshold for m, j in zip(merged, jac, strict=True))
    exact_only = sum(j >= args.threshold and not m for m, j in zip(merged, jac, strict=True))
    print(
        f"lsh-spark vs exact J >= {args.threshold:g}: {exact_only} pairs at or above "
        f"the threshold not merged, {lsh_only} below it merged (through a third page)"
    )
    auc = roc_auc(jac, actual)
    print(f"ROC-AUC of the exact Jaccard for judged 2-3 vs 0.5-1: {_f(auc)}")
    print()

    print(
        table(
            ["J >=", "precision", "recall", "F1", "merged"],
            [
                [f"{t:g}", _f(d["precision"]), _f(d["recall"]), _f(d["f1"]), d["tp"] + d["fp"]]
                for t in FIXED_THRESHOLDS
                for d in [at_threshold(jac, actual, t)]
            ],
        )
    )
    print()

    per_label = merged_per_label(labels, merged)
    rows = []
    for label, (n, m) in per_label.items():
        js = [j for lab, j in zip(labels, jac, strict=True) if lab == label]
        rows.append(
            [
                _label(label),
                n,
                f"{m} ({m / n:.0%})",
                sum(j >= args.threshold for j in js),
                _f(statistics.median(js), 2),
                _f(README_MEDIANS.get(label), 2),
            ]
        )
    print(
        table(
            [
                "label",
                "pairs",
                "merged by lsh-spark",
                f"J >= {args.threshold:g}",
                "median J",
                "data README",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
