"""Exact ground truth for a corpus and the recall of a dedup run against it.

    python bench/quality.py --corpus bench/out/c40k/corpus.jsonl --run out/c40k --threshold 0.8

Ground truth is every pair with word-5-gram Jaccard >= threshold, found exactly
(not sampled) with the prefix-filtering all-pairs method of Bayardo, Ma and
Srikant, "Scaling Up All Pairs Similarity Search" (WWW 2007): with shingles in
one global order (rarest first), two sets with Jaccard >= t must share one of
the first ``|x| - ceil(t |x|) + 1`` shingles of each; every such pair is then
verified with exact set arithmetic.  Normalization and shingling come from the
independent pure-Python oracle in tests/reference.py.

Prints, for the run's ``pairs/`` and ``clusters/``: recall of true pairs (all,
and with J >= threshold + 0.05), pairs reported below the threshold, Jaccard
values that disagree with the oracle, and the share of true pairs whose two
documents share a cluster (this counts pairs that bounded buckets listed only
as star edges).  A run with the default ``--pairs edges`` lists only the edges
that connect each cluster, so its pair recalls are low by design and the
cluster share is the measure (``pairs_mode`` says which); run the job with
``--pairs all`` to score every pair.
"""

from __future__ import annotations

import argparse
import bz2
import glob
import gzip
import itertools
import json
import math
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from reference import word_shingles  # noqa: E402

# The codecs Spark's JSON reader decompresses by extension that the standard
# library also reads; the others are refused by name (corpus_files).
_OPENERS = {".gz": gzip.open, ".bz2": bz2.open}
_OTHER_CODECS = (".zst", ".lz4", ".snappy", ".deflate", ".xz")


def corpus_files(corpus: str) -> list[str]:
    """The files of a JSON Lines corpus as Spark reads it: the file itself, or
    every file under a folder (recursively, sorted), without the names Spark
    skips (starting with ``_`` or ``.``: ``_SUCCESS``, checksums)."""
    if not os.path.isdir(corpus):
        files = [corpus]
    else:
        files = sorted(
            os.path.join(root, name)
            for root, dirs, names in os.walk(corpus)
            for name in names
            if not name.startswith(("_", "."))
        )
        if not files:
            raise SystemExit(f"--corpus: no data files under {corpus}")
    for f in files:
        if f.lower().endswith(_OTHER_CODECS):
            raise SystemExit(
                f"--corpus: {f} is compressed with a codec this harness does not "
                f"read; allowed: plain, {', '.join(_OPENERS)} (decompress it)"
            )
    return files


def corpus_lines(corpus: str) -> Iterator[str]:
    """Every line of every file of ``corpus`` (:func:`corpus_files`), ``.gz`` and
    ``.bz2`` files decompressed."""
    for name in corpus_files(corpus):
        opener = _OPENERS.get(os.path.splitext(name)[1].lower(), open)
        with opener(name, "rt", encoding="utf-8") as fh:
            yield from fh


def corpus_fingerprint(corpus: str) -> str:
    """Path, size and modification time of every file of ``corpus``: changes
    whenever any of them does."""
    parts = []
    for name in corpus_files(corpus):
        st = os.stat(name)
        parts.append(f"{os.path.abspath(name)}|{st.st_size}|{st.st_mtime_ns}")
    return "\n".join(parts)


def corpus_records(corpus: str, lines: int | None = None) -> Iterator[dict]:
    """The JSON objects of ``corpus``'s lines (:func:`corpus_lines`; its first
    ``lines`` only when given); lines that do not parse, or parse to anything
    but an object, are left out."""
    for line in itertools.islice(corpus_lines(corpus), lines):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            yield rec


def usable(rec: dict, id_col: str, text_col: str) -> bool:
    """Whether a record has what every system reads: a non-null id and a string text."""
    return rec.get(id_col) is not None and isinstance(rec.get(text_col), str)


def corpus_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options every reader of a corpus here takes (this script and the
    peers, as bench/compare.py calls them): the corpus, its id and text fields
    and the Jaccard threshold."""
    p.add_argument(
        "--corpus",
        required=True,
        help="JSON Lines corpus: a file or a folder of parts (.gz, .bz2 read)",
    )
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--id-col", default="id", help="the records' id field (default: id)")
    p.add_argument("--text-col", default="text", help="the records' text field (default: text)")
    return p


def _id_kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    return {str: "string", int: "integer"}.get(type(value), type(value).__name__)


def check_ids(corpus: str, ids: Iterable[object], shown: int = 5) -> None:
    """Stop when the ids of ``corpus``'s usable records cannot be scored alike
    by every system: ids that are not all strings or all integers (Spark reads
    a mix as strings, which the ground truth would not, and lsh-spark takes
    no other type), or an id that repeats (naming the ``shown`` most
    repeated: pairs are scored by id, and lsh-spark stops on such input)."""
    ids = list(ids)
    kinds = sorted({_id_kind(i) for i in ids})
    if kinds not in ([], ["string"], ["integer"]):
        raise SystemExit(
            f"--corpus: the ids of {corpus} are {' and '.join(kinds)} values; "
            "allowed: all strings or all integers (Spark would read a mix as "
            "strings, the ground truth would not)"
        )
    repeated = [(i, n) for i, n in Counter(ids).most_common() if n > 1]
    if repeated:
        top = ", ".join(f"{i!r} (x{n})" for i, n in repeated[:shown])
        more = f" and {len(repeated) - shown} more" if len(repeated) > shown else ""
        raise SystemExit(
            f"--corpus: {len(repeated)} ids repeat in {corpus}: {top}{more}. "
            "Pairs are scored by id and lsh-spark requires unique ids: give "
            "each record its own"
        )


def load(corpus: str, id_col: str, text_col: str, k: int) -> dict:
    """``{id: frozenset of word k-grams}`` of the :func:`usable` records of
    ``corpus`` whose normalized text is not empty.

    Stops (:func:`check_ids`) when two usable records share an id (keyed by
    id, the later would silently replace the earlier) or the ids mix types.
    """
    records = [
        (rec[id_col], rec[text_col])
        for rec in corpus_records(corpus)
        if usable(rec, id_col, text_col)
    ]
    check_ids(corpus, (i for i, _ in records))
    docs = {}
    for i, text in records:
        sh = word_shingles(text, k)
        if sh != {""}:
            docs[i] = frozenset(sh)
    return docs


def all_pairs(docs: dict, t: float) -> dict:
    freq = Counter(s for sh in docs.values() for s in sh)
    index = defaultdict(list)
    ordered = {}
    for d, sh in docs.items():
        toks = sorted(sh, key=lambda s: (freq[s], s))
        ordered[d] = toks
        for s in toks[: len(toks) - math.ceil(t * len(toks)) + 1]:
            index[s].append(d)
    cands = set()
    for ids in index.values():
        if len(ids) > 1:
            ids = sorted(ids)
            for i, a in enumerate(ids):
                for b in ids[i + 1 :]:
                    cands.add((a, b))
    truth = {}
    for a, b in cands:
        sa, sb = docs[a], docs[b]
        inter = len(sa & sb)
        j = inter / (len(sa) + len(sb) - inter)
        if j >= t:
            truth[(a, b)] = j
    return truth


def read_parquet(path: str) -> list[dict]:
    import pyarrow.parquet as pq

    files = sorted(glob.glob(os.path.join(path, "*.parquet")))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def evaluate(truth: dict, run: str, t: float) -> dict:
    pairs = {(r["id_a"], r["id_b"]): r["jaccard"] for r in read_parquet(os.path.join(run, "pairs"))}
    cluster = {r["id"]: r["cluster_id"] for r in read_parquet(os.path.join(run, "clusters"))}
    strong = [p for p, j in truth.items() if j >= t + 0.05]
    bounded = set()
    report_path = os.path.join(run, "report.json")
    if os.path.exists(report_path):
        with open(report_path, encoding="utf-8") as fh:
            report = json.load(fh)
        bounded = {f["cluster_id"] for f in report.get("buckets", {}).get("bounded_families", [])}
        mode = report.get("pairs_written", {}).get("mode")
    else:
        mode = None
    free = [p for p in truth if not (cluster.get(p[0]) in bounded and cluster.get(p[1]) in bounded)]
    wrong_j = sum(1 for p, j in pairs.items() if p in truth and abs(truth[p] - j) > 1e-9)
    return {
        # "edges" (the default): pairs/ connects each cluster and the pair recalls count
        # only those edges; same_cluster_share is the measure to read.  "all": every pair.
        "pairs_mode": mode,
        "true_pairs": len(truth),
        "reported_pairs": len(pairs),
        "recall": sum(p in pairs for p in truth) / max(1, len(truth)),
        "recall_at_t_plus_0.05": sum(p in pairs for p in strong) / max(1, len(strong)),
        "true_pairs_outside_bounded_families": len(free),
        "recall_outside_bounded_families": sum(p in pairs for p in free) / max(1, len(free)),
        "pairs_below_threshold_or_unknown": sum(1 for p in pairs if p not in truth),
        "jaccard_mismatches": wrong_j,
        "same_cluster_share": sum(cluster.get(a) == cluster.get(b) for a, b in truth)
        / max(1, len(truth)),
    }


def main() -> None:
    p = corpus_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[1]))
    p.add_argument("--run", help="output directory of jobs/dedup.py to evaluate")
    p.add_argument("--k", type=int, default=5)
    args = p.parse_args()
    start = time.perf_counter()
    docs = load(args.corpus, args.id_col, args.text_col, args.k)
    truth = all_pairs(docs, args.threshold)
    out = {"documents": len(docs), "ground_truth_seconds": round(time.perf_counter() - start, 1)}
    if args.run:
        out.update(evaluate(truth, args.run, args.threshold))
    else:
        out["true_pairs"] = len(truth)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
