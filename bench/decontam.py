"""jobs/decontaminate.py (containment) beside a single-process Python n-gram set baseline.

    python bench/decontam.py --corpus bench/out/scaling/corpus-1000000-t0/corpus.jsonl \\
        --docs 100000 --items 10000 --work bench/out/decontam

Takes the first ``--docs`` documents of ``--corpus`` as the input and builds a
reference of ``--items`` items: a fifth are passages of 20-200 words cut from
random input documents (with case and quotes changed, which normalization
undoes), the rest are passages of the same lengths made of words drawn at random
from the corpus's vocabulary (they match nothing).  Both systems report every
(document, item) pair whose containment of 13-grams is at least 0.5:

* **lsh-spark**: ``spark-submit jobs/decontaminate.py --mode containment`` with
  conf/local.properties (as bench/compare.py runs it);
* **python-sets**: one Python process: NFKC + casefold + punctuation to spaces
  (``unicodedata`` and ``re``), a dict from each reference n-gram (a tuple of
  words) to the items holding it, then every document's n-gram set looked up
  in it.

Prints wall seconds, peak memory of the process tree, the pairs found, the
recall on the planted (source document, item) pairs, and whether both found the
same pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import unicodedata
from collections import defaultdict
from itertools import islice

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from compare import run_measured, submit_command  # noqa: E402

N = 13
MIN_CONTAINMENT = 0.5
_SEPARATORS = re.compile(r"[\W_]+")


def normalize(text: str) -> list[str]:
    """NFKC, casefold, NFKC; every run of non-word characters is one separator."""
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return _SEPARATORS.sub(" ", text).split()


def grams(words: list[str], k: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + k]) for i in range(len(words) - k + 1)}


def build(args: argparse.Namespace) -> tuple[str, str, set[tuple[str, str]]]:
    """The input and reference files under --work; the planted (doc, item) pairs."""
    rng = random.Random(45)
    os.makedirs(args.work, exist_ok=True)
    corpus = os.path.join(args.work, "corpus.jsonl")
    with open(args.corpus, encoding="utf-8") as src, open(corpus, "w", encoding="utf-8") as dst:
        docs = [json.loads(line) for line in islice(src, args.docs)]
        for doc in docs:
            dst.write(json.dumps({"id": doc["id"], "text": doc["text"]}) + "\n")
    vocab = [w for doc in rng.sample(docs, 2000) for w in doc["text"].split()]
    items, planted = [], set()
    for i in range(args.items):
        length = rng.randint(20, 200)
        if i % 5 == 0:
            doc = rng.choice(docs)
            words = doc["text"].split()
            start = rng.randrange(0, max(1, len(words) - length))
            text = " ".join(words[start : start + length])
            text = text.upper() if rng.random() < 0.5 else f"\u201c{text}\u201d"
            planted.add((doc["id"], f"ref-{i}"))
        else:
            text = " ".join(rng.choice(vocab) for _ in range(length))
        items.append({"id": f"ref-{i}", "text": text})
    reference = os.path.join(args.work, "reference.jsonl")
    with open(reference, "w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item, ensure_ascii=False) + "\n")
    return corpus, reference, planted


def python_sets(corpus: str, reference: str, out: str) -> None:
    """The baseline, run in its own process (``--baseline``): pairs to ``out``."""
    holders: dict[tuple[str, ...], list[str]] = defaultdict(list)
    total: dict[str, int] = {}
    lengths: set[int] = set()
    with open(reference, encoding="utf-8") as fh:
        for line in fh:
            item = json.loads(line)
            words = normalize(item["text"])
            k = min(N, len(words))
            item_grams = grams(words, k)
            total[item["id"]] = len(item_grams)
            lengths.add(k)
            for g in item_grams:
                holders[g].append(item["id"])
    found = []
    with open(corpus, encoding="utf-8") as fh:
        for line in fh:
            doc = json.loads(line)
            words = normalize(doc["text"])
            hits: dict[str, int] = defaultdict(int)
            for k in lengths:
                for g in grams(words, k):
                    for item in holders.get(g, ()):
                        hits[item] += 1
            found += [(doc["id"], i, n / total[i]) for i, n in hits.items()]
    with open(out, "w", encoding="utf-8") as fh:
        json.dump([p for p in found if p[2] >= MIN_CONTAINMENT], fh)


def spark_pairs(out: str) -> set[tuple[str, str]]:
    import pyarrow.dataset as ds

    table = ds.dataset(os.path.join(out, "matches"), format="parquet").to_table()
    return set(
        zip(table.column("id").to_pylist(), table.column("reference_id").to_pylist(), strict=True)
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, help="JSON Lines with id and text")
    p.add_argument("--docs", type=int, default=100_000)
    p.add_argument("--items", type=int, default=10_000)
    p.add_argument("--work", required=True)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument(
        "--baseline", nargs=3, metavar=("CORPUS", "REFERENCE", "OUT"), help=argparse.SUPPRESS
    )
    args = p.parse_args()
    if args.baseline:
        python_sets(*args.baseline)
        return
    corpus, reference, planted = build(args)
    out = os.path.join(args.work, "lsh-spark")
    spark = run_measured(
        submit_command("lsh-spark", args.master, args.driver_memory)
        + [
            os.path.join(ROOT, "jobs", "decontaminate.py"),
            "--input",
            corpus,
            "--reference",
            reference,
            "--output",
            out,
            "--overwrite",
            "--mode",
            "containment",
        ],
        env={"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable},
    )
    if spark["exit"] != 0:
        raise SystemExit(f"decontaminate.py failed: {spark['tail']}")
    pairs_file = os.path.join(args.work, "python-sets.json")
    base = run_measured(
        [
            sys.executable,
            __file__,
            "--corpus",
            corpus,
            "--work",
            args.work,
            "--baseline",
            corpus,
            reference,
            pairs_file,
        ]
    )
    if base["exit"] != 0:
        raise SystemExit(f"baseline failed: {base['tail']}")
    ours = spark_pairs(out)
    with open(pairs_file, encoding="utf-8") as fh:
        theirs = {(d, i) for d, i, _ in json.load(fh)}
    with open(os.path.join(out, "report.json"), encoding="utf-8") as fh:
        strategy = json.load(fh)["joins"]["containment"]["strategy"]
    print(
        f"{args.docs} documents, {args.items} reference items ({len(planted)} planted), "
        f"n = {N}, min containment {MIN_CONTAINMENT}; lsh-spark join: {strategy}"
    )
    print("| system | seconds | peak memory MiB | pairs | planted recall | same pairs |")
    print("|---|---|---|---|---|---|")
    for name, res, found in (("lsh-spark", spark, ours), ("python-sets", base, theirs)):
        recall = len(planted & found) / len(planted)
        print(
            f"| {name} | {res['seconds']} | {res['peak_mem_mib']} | {len(found)} | "
            f"{recall:.4f} | {ours == theirs} |"
        )


if __name__ == "__main__":
    main()
