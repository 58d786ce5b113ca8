"""The benchmark harness (bench/): how compare.py runs the systems and what every
system reads of a corpus."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from servers import bench_module

ROOT = Path(__file__).resolve().parent.parent


def test_compare_gives_lsh_spark_its_properties_and_the_peer_jvm_defaults():
    compare = bench_module("compare")
    ours = compare.spark_settings("lsh-spark", "local[2]")
    peer = compare.spark_settings("mllib", "local[2]")
    props = ours[ours.index("--properties-file") + 1]
    assert Path(props) == ROOT / "conf" / "local.properties" and Path(props).is_file()
    # The peer gets none of lsh-spark's JVM options, only the machine's settings.
    assert "--properties-file" not in peer and "spark.ui.enabled=false" in peer
    assert not any("-XX:" in a for a in peer)
    for settings in (ours, peer):
        assert any("log4j2.configurationFile=file:" in a for a in settings)
    # On a cluster neither gets local-mode settings.
    assert compare.spark_settings("lsh-spark", "yarn") == compare.spark_settings("mllib", "yarn")
    assert "--properties-file" not in compare.spark_settings("lsh-spark", "local-cluster[2,1,1024]")


def test_compare_reports_the_median_round_and_a_failed_run_as_it_failed():
    compare = bench_module("compare")

    def run(seconds, peak, code=0):
        return {"seconds": seconds, "peak_mem_mib": peak, "exit": code, "tail": [str(seconds)]}

    three = compare.summarize_runs([run(30.0, 100), run(20.0, 300), run(25.0, 200)], 1000)
    assert three["seconds"] == 25.0 and three["docs_per_second"] == 40.0
    assert three["runs_seconds"] == [30.0, 20.0, 25.0]
    assert three["peak_mem_mib"] == 300 and three["tail"] == ["25.0"]
    assert compare.summarize_runs([run(30.0, 1), run(20.0, 1)], 10)["seconds"] == 25.0
    one = compare.summarize_runs([run(12.3, 5)], 123)
    assert one["seconds"] == 12.3 and one["docs_per_second"] == 10.0
    failed = compare.summarize_runs([run(30.0, 1), run(5.0, 1, code=1)], 10)
    assert failed["exit"] == 1 and "runs_seconds" not in failed


WORDS = [
    "the",
    "harbour",
    "was",
    "quiet",
    "that",
    "morning",
    "and",
    "the",
    "boats",
    "rocked",
    "slowly",
    "against",
    "the",
    "old",
    "stone",
    "wall",
    "while",
    "gulls",
    "circled",
    "above",
    "the",
    "market",
    "where",
    "traders",
    "laid",
    "out",
    "fish",
    "bread",
    "and",
    "baskets",
    "of",
    "apples",
    "for",
    "the",
    "first",
    "customers",
    "of",
    "the",
    "day",
    "who",
    "came",
    "down",
    "from",
    "the",
    "hill",
]


def _renamed_corpus(path: Path) -> dict[str, str]:
    """A corpus whose ids are in ``url`` and texts in ``content``, with an exact
    copy, a near copy (its third word changed: word-5-gram Jaccard 38/44), an unrelated
    text, and lines no system can read."""
    texts = {
        "https://a.example/1": " ".join(WORDS),
        "https://a.example/1-copy": " ".join(WORDS),
        "https://b.example/near": " ".join(WORDS[:2] + ["felt"] + WORDS[3:]),
        "https://c.example/other": " ".join(reversed(WORDS)),
    }
    lines = [json.dumps({"url": u, "content": t}) for u, t in texts.items()]
    lines += ["not json", "[1, 2]", json.dumps({"url": None, "content": "no id"})]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return texts


def test_compare_names_the_fields_a_corpus_lacks(tmp_path):
    compare = bench_module("compare")
    corpus = tmp_path / "c.jsonl"
    _renamed_corpus(corpus)
    compare.check_fields(str(corpus), "url", "content")  # found: no error
    with pytest.raises(SystemExit) as err:
        compare.check_fields(str(corpus), "id", "text")
    msg = str(err.value)
    assert "--id-col 'id' and --text-col 'text'" in msg and "fields: content, url" in msg
    with pytest.raises(SystemExit, match=r"^--text-col 'body': not found"):
        compare.check_fields(str(corpus), "url", "body")
    nulls = tmp_path / "nulls.jsonl"
    nulls.write_text(json.dumps({"id": None, "text": "a b c"}) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="never a non-null id together with a string text"):
        compare.check_fields(str(nulls), "id", "text")
    plain = tmp_path / "plain.txt"
    plain.write_text("just text\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="no JSON object among the first 1000 lines"):
        compare.check_fields(str(plain), "id", "text")


def test_ground_truth_reads_the_given_fields_and_keeps_them_apart_in_its_cache(tmp_path):
    compare = bench_module("compare")
    corpus = tmp_path / "c.jsonl"
    texts = _renamed_corpus(corpus)
    docs = bench_module("quality").load(str(corpus), "url", "content", 5)
    assert set(docs) == set(texts)  # the unreadable lines and the null id left out
    truth = compare.ground_truth(str(corpus), 0.8, str(tmp_path / "truth"), "url", "content")
    assert set(truth) == {
        ("https://a.example/1", "https://a.example/1-copy"),
        ("https://a.example/1", "https://b.example/near"),
        ("https://a.example/1-copy", "https://b.example/near"),
    }
    assert truth[("https://a.example/1", "https://a.example/1-copy")] == 1.0
    assert truth[("https://a.example/1", "https://b.example/near")] == pytest.approx(38 / 44)
    # The default fields read nothing of this corpus: a separate cache entry.
    assert compare.ground_truth(str(corpus), 0.8, str(tmp_path / "truth")) == {}
    assert len(list((tmp_path / "truth").iterdir())) == 2


def test_mllib_peer_reads_the_given_fields(spark, tmp_path):
    corpus = tmp_path / "c.jsonl"
    _renamed_corpus(corpus)
    pairs = bench_module("peer_mllib").mllib_pairs(spark, str(corpus), 0.8, 3, "url", "content")
    found = {(r.id_a, r.id_b): r.jaccard for r in pairs.collect()}
    # An exact copy always shares every table's hash; nothing pairs with the
    # unrelated text, and every id is the url of a record.
    assert found[("https://a.example/1", "https://a.example/1-copy")] == 1.0
    assert all(j >= 0.8 and "c.example" not in a + b for (a, b), j in found.items())


def test_a_folder_of_compressed_parts_reads_as_one_corpus(tmp_path):
    # As Spark reads it: every file under the folder, .gz and .bz2 decompressed,
    # _SUCCESS and hidden files skipped.
    import bz2
    import gzip

    compare, quality = bench_module("compare"), bench_module("quality")
    whole = tmp_path / "whole.jsonl"
    texts = _renamed_corpus(whole)
    lines = whole.read_text(encoding="utf-8").splitlines(keepends=True)
    parts = tmp_path / "parts"
    (parts / "sub").mkdir(parents=True)
    with gzip.open(parts / "part-0.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(lines[:2])
    with bz2.open(parts / "sub" / "part-1.jsonl.bz2", "wt", encoding="utf-8") as fh:
        fh.writelines(lines[2:4])
    (parts / "part-2.jsonl").write_text("".join(lines[4:]), encoding="utf-8")
    (parts / "_SUCCESS").write_text("", encoding="utf-8")
    (parts / ".part-2.jsonl.crc").write_text("not json", encoding="utf-8")
    assert sorted(quality.corpus_lines(str(parts))) == sorted(quality.corpus_lines(str(whole)))
    assert set(quality.load(str(parts), "url", "content", 5)) == set(texts)
    compare.check_fields(str(parts), "url", "content")
    cache = str(tmp_path / "truth")
    truth = compare.ground_truth(str(parts), 0.8, cache, "url", "content")
    assert truth == compare.ground_truth(str(whole), 0.8, cache, "url", "content")
    assert len(truth) == 3
    # A change to any one file is a new cache key.
    before = quality.corpus_fingerprint(str(parts))
    (parts / "part-2.jsonl").write_text("".join(lines[4:]) + "\n", encoding="utf-8")
    assert quality.corpus_fingerprint(str(parts)) != before
    (parts / "part-3.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    with pytest.raises(SystemExit, match=r"part-3\.jsonl\.zst is compressed with a codec"):
        list(quality.corpus_lines(str(parts)))


def test_a_corpus_whose_ids_repeat_stops_compare_before_any_system_runs(tmp_path):
    import subprocess

    quality = bench_module("quality")
    corpus = tmp_path / "c.jsonl"
    texts = _renamed_corpus(corpus)
    # Null ids and records no system reads are not repeats.
    with corpus.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"url": None, "content": "another with no id"}) + "\n")
        fh.write(json.dumps({"url": "https://c.example/other", "content": 7}) + "\n")
    assert set(quality.load(str(corpus), "url", "content", 5)) == set(texts)
    with corpus.open("a", encoding="utf-8") as fh:
        for text in ("crawled again", "and again"):
            fh.write(json.dumps({"url": "https://a.example/1", "content": text}) + "\n")
        fh.write(json.dumps({"url": "https://b.example/near", "content": "twice"}) + "\n")
    expected = (
        "2 ids repeat in .*: 'https://a.example/1' \\(x3\\), "
        "'https://b.example/near' \\(x2\\)\\. Pairs are scored by id"
    )
    # The ground truth would otherwise keep the last text of an id.
    with pytest.raises(SystemExit, match=expected):
        quality.load(str(corpus), "url", "content", 5)
    work = tmp_path / "work"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "compare.py"),
            "--corpus",
            str(corpus),
            "--work",
            str(work),
            "--systems",
            "lsh-spark,mllib",
            "--id-col",
            "url",
            "--text-col",
            "content",
            "--warmup",
            "",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "2 ids repeat in" in done.stderr and "'https://a.example/1' (x3)" in done.stderr
    assert not work.exists()  # stopped before any system ran


def test_ids_that_mix_strings_and_numbers_are_refused_by_name(tmp_path):
    # Spark reads such a column as strings, the ground truth would compare 7
    # with "a": stopped before anything runs instead of failing after.
    quality = bench_module("quality")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": i, "text": f"text {n}"}) + "\n" for n, i in enumerate(["a", 7, "b"])
        ),
        encoding="utf-8",
    )
    with pytest.raises(
        SystemExit, match="are integer and string values; allowed: all strings or all integers"
    ):
        quality.load(str(corpus), "id", "text", 5)
    for ids in (["a", "b"], [1, 2]):
        quality.check_ids(str(corpus), ids)  # one kind: no error
    for odd, kind in ((True, "boolean"), (1.5, "float"), ([1], "list")):
        with pytest.raises(SystemExit, match=f"are {kind} values"):
            quality.check_ids(str(corpus), [odd])
