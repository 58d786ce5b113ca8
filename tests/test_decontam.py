"""jobs/decontaminate.py: containment of reference items and near-duplicates of
reference documents, against a brute-force oracle (tests/reference.py's
independent normalizer, n-grams as tuples of words, every pair compared)."""

from __future__ import annotations

import json
import os
import random
import subprocess

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from reference import jaccard, normalize, word_shingles
from servers import spark_submit

import lsh_spark.decontam as decontam
from lsh_spark.config import ConfigError, DecontamConfig, DedupConfig
from lsh_spark.decontam import run_decontaminate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")
REFERENCE = os.path.join(ROOT, "data", "reference", "passages.jsonl")
N = 13


def sample_docs(min_words: int) -> list[dict]:
    """The sample's documents of at least ``min_words`` words, near-copies left out."""
    with open(SAMPLE, encoding="utf-8") as fh:
        docs = [json.loads(line) for line in fh]
    return [d for d in docs if "~" not in d["id"] and len(d["text"].split()) >= min_words]


def write_jsonl(path, rows) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")
    return str(path)


def ngrams(text: str, k: int) -> set[tuple[str, ...]]:
    words = normalize(text).split(" ")
    return {tuple(words[i : i + k]) for i in range(len(words) - k + 1)}


def brute_containment(docs: list[dict], items: list[dict], n: int = N) -> dict:
    """{(doc id, item id): (score, matched)} for every pair, exactly as specified:
    the share of the item's distinct n-grams (an item of m < n words: its m-gram)
    found among the document's."""
    out = {}
    for item in items:
        k = min(n, len(normalize(item["text"]).split(" ")))
        want = ngrams(item["text"], k)
        for doc in docs:
            hit = len(want & ngrams(doc["text"], k))
            out[(doc["id"], item["id"])] = (hit / len(want), hit)
    return out


def light_edits(words: list[str], rng: random.Random, replace_one: bool) -> list[str]:
    """Case, quotes and punctuation changes (undone by normalization) and, for long
    passages, one word replaced (which costs up to n n-grams)."""
    words = list(words)
    if replace_one:
        words[len(words) // 2] = "zqxjv"
    text = " ".join(words).replace("\u2019", "'")
    text = text.upper() if rng.random() < 0.5 else text.lower()
    return f"\u00ab{text}\u00bb!".split(" ")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Real documents with reference passages of 20-200 words planted at random
    positions (and short items of 6-10 words), plus items planted nowhere."""
    rng = random.Random(2026)
    docs = sample_docs(150)
    rng.shuffle(docs)
    hosts, sources = docs[:130], docs[130:]
    items, plants = [], {}
    for i, src in enumerate(sources):
        words = src["text"].split()
        # Every fourth item is a short question-like span, shorter than an n-gram.
        length = rng.randint(6, 10) if i % 4 == 0 else rng.randint(20, 200)
        length = min(length, len(words) - 1)
        start = rng.randrange(0, len(words) - length)
        passage = words[start : start + length]
        items.append({"id": f"item-{i:03d}", "text": " ".join(passage)})
        if i % 5 == 4 or i >= len(hosts):
            continue  # planted nowhere
        host = hosts[i]  # one passage per host: a later one never splits an earlier one
        edited = light_edits(passage, rng, replace_one=length >= 100)
        hw = host["text"].split()
        at = rng.randrange(0, len(hw) + 1)
        host["text"] = " ".join(hw[:at] + edited + hw[at:])
        plants[(host["id"], items[-1]["id"])] = length
    root = tmp_path_factory.mktemp("planted")
    return {
        "corpus": write_jsonl(root / "corpus.jsonl", hosts),
        "reference": write_jsonl(root / "items.jsonl", items),
        "docs": hosts,
        "items": items,
        "plants": plants,
        "root": root,
    }


def matches(spark, out, kind=None) -> dict:
    rows = spark.read.parquet(f"{out}/matches").collect()
    return {
        (r["id"], r["reference_id"]): (r["score"], r["matched_ngrams"])
        for r in rows
        if kind is None or r["kind"] == kind
    }


@pytest.mark.heavy
@pytest.mark.parametrize("strategy", ["broadcast", "shuffle"])
def test_planted_containment_against_brute_force(planted, spark, tmp_path, monkeypatch, strategy):
    if strategy == "shuffle":
        monkeypatch.setattr(decontam, "BROADCAST_REFERENCE_NGRAMS", 0)
    out = str(tmp_path / "out")
    dc = DecontamConfig(mode="containment")
    report = run_decontaminate(
        spark, planted["corpus"], [planted["reference"]], out, DedupConfig(), dc
    )
    assert report["joins"]["containment"]["strategy"] == strategy
    got = matches(spark, out, "containment")
    truth = brute_containment(planted["docs"], planted["items"])
    # Recall on the planted pairs at containment >= 0.8.
    found = [pair for pair in planted["plants"] if got.get(pair, (0, 0))[0] >= 0.8]
    assert len(found) / len(planted["plants"]) >= 0.99
    assert any(n < N for n in planted["plants"].values())  # short items were planted
    assert any(n >= 100 for n in planted["plants"].values())  # and edited long ones
    # Exactly the oracle's pairs at >= 0.5, with its scores: no false match below 0.5.
    want = {pair: v for pair, v in truth.items() if v[0] >= 0.5}
    assert got.keys() == want.keys()
    for pair, (score, hit) in got.items():
        assert hit == want[pair][1] and score == pytest.approx(want[pair][0], abs=1e-12)
    counts = report["counts"]
    removed = {doc for doc, _ in want}
    assert counts["removed"] == len(removed)
    assert counts["clean"] + counts["removed"] + counts["rejected"] == counts["input_records"]
    assert report["by_reference"][planted["reference"]]["short_items"] > 0


def test_jaccard_pairs_only_across_the_two_sides(spark, tmp_path):
    docs = sample_docs(300)[:4]
    a, b, c, d = docs

    def near(doc, seed):  # about 1 word in 60 replaced: Jaccard of 5-grams about 0.85
        rng = random.Random(seed)
        words = doc["text"].split()
        return " ".join("qzv" if rng.random() < 1 / 60 else w for w in words)

    corpus = [
        {"id": "a", "text": a["text"]},
        {"id": "a-copy", "text": near(a, 1)},  # input x input: never a pair
        {"id": "b", "text": b["text"]},
        {"id": "d", "text": d["text"]},
    ]
    refs = [
        {"id": "b-near", "text": near(b, 2)},
        {"id": "c", "text": c["text"]},
        {"id": "c-copy", "text": near(c, 3)},  # reference x reference: never a pair
    ]
    out = str(tmp_path / "out")
    run_decontaminate(
        spark,
        write_jsonl(tmp_path / "in.jsonl", corpus),
        [write_jsonl(tmp_path / "ref.jsonl", refs)],
        out,
        DedupConfig(),
        DecontamConfig(mode="jaccard"),
    )
    got = matches(spark, out, "jaccard")
    truth = {
        (x["id"], y["id"]): jaccard(word_shingles(x["text"]), word_shingles(y["text"]))
        for x in corpus
        for y in refs
    }
    assert {p for p, j in truth.items() if j >= 0.8} == set(got) == {("b", "b-near")}
    assert got[("b", "b-near")][0] == pytest.approx(truth[("b", "b-near")], abs=1e-12)
    assert jaccard(word_shingles(corpus[0]["text"]), word_shingles(corpus[1]["text"])) >= 0.8
    clean = {r["id"] for r in spark.read.parquet(f"{out}/clean").collect()}
    assert clean == {"a", "a-copy", "d"}


@pytest.mark.heavy
def test_bad_records_are_rejected_with_reasons_and_parquet_references_work(spark, tmp_path):
    docs = sample_docs(200)[:3]
    question = " ".join(docs[0]["text"].split()[30:60])
    corpus = [{"id": d["id"], "text": d["text"]} for d in docs]
    corpus.append({"id": "empty", "text": "   "})
    refs = [
        {"id": "ok", "text": " ".join(docs[1]["text"].split()[10:40])},
        {"text": "an item without an id field at all, which cannot be named in matches"},
        {"id": "null-text", "text": None},
        {"id": "blank", "text": " \t "},
        {"id": "twice", "text": "first of two records that share one id in this source"},
        {"id": "twice", "text": "second of two records that share one id in this source"},
        '{"id": "broken", "text": "not closed',
    ]
    ref_path = write_jsonl(tmp_path / "ref.jsonl", refs)
    # A Hugging Face dataset exported to Parquet: integer ids, other column names.
    hf = tmp_path / "hf"
    hf.mkdir()
    pq.write_table(
        pa.table({"idx": [7, 8], "question": [question, "an unrelated question?"]}),
        hf / "test-00000-of-00001.parquet",
    )
    out = str(tmp_path / "out")
    with pytest.raises(ConfigError):  # the two references name their columns differently
        run_decontaminate(
            spark,
            write_jsonl(tmp_path / "in.jsonl", corpus),
            [ref_path, str(hf)],
            out,
            DedupConfig(),
            DecontamConfig(reference_id_col="idx", reference_text_col="question"),
        )
    report = run_decontaminate(
        spark,
        str(tmp_path / "in.jsonl"),
        [str(hf)],
        out,
        DedupConfig(),
        DecontamConfig(reference_id_col="idx", reference_text_col="question"),
    )
    assert set(matches(spark, out)) == {(docs[0]["id"], "7")}
    assert report["counts"]["rejected"] == 1
    rejects = {r["id"]: r["reason"] for r in spark.read.parquet(f"{out}/rejects").collect()}
    assert list(rejects) == ["empty"] and rejects["empty"]
    report = run_decontaminate(
        spark,
        str(tmp_path / "in.jsonl"),
        [ref_path],
        out,
        DedupConfig(),
        DecontamConfig(),
        overwrite=True,
    )
    assert set(matches(spark, out)) == {(docs[1]["id"], "ok")}
    bad = spark.read.parquet(f"{out}/reference_rejects").collect()
    reasons = sorted((r["reference_id"] or "", r["reason"].split(":")[0]) for r in bad)
    assert [r for r in reasons if r[0] == "twice"] == [("twice", "duplicate_id")] * 2
    assert {r[0] for r in reasons} == {"", "null-text", "blank", "twice"}
    assert len(bad) == 6  # no id, broken line, null text, blank, the two "twice"
    assert report["by_reference"][ref_path]["rejected"] == 6
    assert report["by_reference"][ref_path]["records"] == 7


@pytest.mark.slow
def test_bundled_reference_command(tmp_path):
    out = tmp_path / "decontam"
    cmd, env = spark_submit(
        "decontaminate.py", "--input", SAMPLE, "--reference", REFERENCE, "--output", str(out)
    )
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1])
    with open(REFERENCE, encoding="utf-8") as fh:
        items = [json.loads(line) for line in fh]
    report = json.loads((out / "report.json").read_text())
    with open(SAMPLE, encoding="utf-8") as fh:
        records = sum(1 for _ in fh)
    assert summary["input_records"] == records
    assert summary["clean"] + summary["removed"] + summary["rejected"] == records
    found = ds.dataset(str(out / "matches"), format="parquet").to_table().to_pylist()
    named = {m["reference_id"] for m in found}
    cut = {i["id"] for i in items if i["cut_from"]}
    assert cut <= named and not named - cut  # every cut passage found, no unrelated text
    for item in items:  # each cut passage matches the document it was cut from
        if item["cut_from"]:
            assert any(
                m["id"] == item["cut_from"] and m["reference_id"] == item["id"] for m in found
            )
    assert report["joins"]["containment"]["strategy"] == "broadcast"
