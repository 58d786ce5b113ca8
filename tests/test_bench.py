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


def _source_texts(folder: Path) -> None:
    """Three small text files of made-up words, two sentences a paragraph: too few
    chunks for 300 documents, so half the base documents are mosaics."""
    folder.mkdir()
    for f in range(3):
        paras = []
        for p in range(10):
            words = [f"w{(f * 1000 + p * 70 + i) * 7919 % 1009}" for i in range(70)]
            paras.append(" ".join(words[:35]) + ". " + " ".join(words[35:]) + ".")
        (folder / f"doc{f}.txt").write_text("\n\n".join(paras) + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    ("shape", "copies_by_group", "exact_copies", "sha256"),
    [
        (
            "web",
            [20, 20, 20, 16, 10, 2, 2],
            45,
            "06db283b86ee50d2692d823cc38fefae9aea45b7010df5a20464453347fe2254",
        ),
        ("flat", [1] * 90, 42, "e132145ef5d3cab7c7ce43caf0ba09bdaf2cff288d9185c38cb8f16f22ed5db0"),
    ],
)
def test_make_corpus_streams_the_same_corpus_as_an_in_memory_build(
    tmp_path, shape, copies_by_group, exact_copies, sha256
):
    import hashlib
    import re
    from collections import Counter

    source, out = tmp_path / "source", tmp_path / "out"
    _source_texts(source)
    options = ("--source", str(source), "--n", "300", "--shape", shape, "--words", "20,40")
    path = Path(bench_module("make_corpus").build_once(str(out), *options, "--largest", "20"))
    # The bytes of the build that held every record in memory before shuffling them
    # (make_corpus.py before it streamed), same options and seed.
    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha256
    assert sorted(p.name for p in out.iterdir()) == ["corpus.jsonl", "meta.json"]
    meta = json.loads((out / "meta.json").read_text())
    assert meta["documents"] == 300 and meta["bytes"] == path.stat().st_size
    assert meta["mosaic_base_documents"] == 150

    docs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(docs) == 300 and len({d["id"] for d in docs}) == 300
    assert all(d["family"] == d["id"].partition("-")[0] for d in docs)
    originals = {d["family"]: d for d in docs if d.get("original")}
    members = Counter(d["family"] for d in docs if d["id"].startswith("w"))
    # One original a group, whose copies are int(300 * 0.3) = 90 in all; the rest are
    # singletons s0000000 ...
    assert set(originals) == set(members)
    assert sorted((m - 1 for m in members.values()), reverse=True) == copies_by_group
    singletons = sorted(d["id"] for d in docs if d["id"].startswith("s"))
    assert singletons == [f"s{s:07d}" for s in range(300 - sum(members.values()))]
    for family, count in members.items():
        numbers = sorted(int(d["id"].partition("-")[2]) for d in docs if d["family"] == family)
        assert numbers == list(range(count))

    # Half the copies exact up to case, spacing and punctuation, the others a few
    # words edited.
    def words(text):
        return re.findall(r"\w+", text.lower())

    exact = 0
    for d in docs:
        if d["family"] in originals and not d.get("original"):
            copy, original = words(d["text"]), words(originals[d["family"]]["text"])
            if copy == original:
                exact += 1
            else:
                a, b = set(copy), set(original)
                assert len(a & b) / len(a | b) >= 0.75
    assert exact == exact_copies


def test_compare_runs_datatrove_only_where_it_can_be_scored_and_says_when_it_skips_it():
    compare = bench_module("compare")
    dt = "/venv/bin/python"
    assert compare.choose_systems(None, "pairs", None) == (
        ["lsh-spark", "mllib", "datasketch"],
        {},
    )
    assert compare.choose_systems(None, "planted", dt) == (["lsh-spark", "datatrove"], {})
    # Without its interpreter datatrove is skipped, with the reason to print.
    run, skipped = compare.choose_systems(None, "planted", None)
    assert run == ["lsh-spark"] and "no --datatrove-python given" in skipped["datatrove"]
    with pytest.raises(SystemExit, match="nothing to run: datatrove skipped: no --datatrove"):
        compare.choose_systems("datatrove", "planted", None)
    # datatrove verifies no pair; MLlib and datasketch write no clusters.
    with pytest.raises(SystemExit, match="datatrove cannot be scored with --score pairs"):
        compare.choose_systems("lsh-spark,datatrove", "pairs", dt)
    with pytest.raises(SystemExit, match="mllib cannot be scored with --score planted"):
        compare.choose_systems("lsh-spark,mllib", "planted", dt)
    with pytest.raises(SystemExit, match="unknown system 'spark'; known: datasketch, datatrove"):
        compare.choose_systems("spark", "pairs", dt)


def _planted_corpus(path: Path) -> None:
    """A corpus shaped like bench/make_corpus.py --shape web: group w1 (an original,
    an exact copy up to case, a near copy with one word changed: J 38/44), group w2
    (an original and its exact copy) and a singleton."""
    near = WORDS[:2] + ["felt"] + WORDS[3:]
    docs = [
        {"id": "w1-0", "text": " ".join(WORDS), "original": True},
        {"id": "w1-1", "text": " ".join(WORDS).upper()},
        {"id": "w1-2", "text": " ".join(near)},
        {"id": "w2-0", "text": " ".join(reversed(WORDS)), "original": True},
        {"id": "w2-1", "text": " ".join(reversed(WORDS))},
        {"id": "s0", "text": " ".join(f"word{i}" for i in range(40))},
    ]
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")


def test_compare_scores_a_planted_corpus_by_its_planted_copies(tmp_path):
    compare = bench_module("compare")
    corpus = tmp_path / "corpus.jsonl"
    _planted_corpus(corpus)
    assert compare.choose_score("auto", str(corpus), "id", "text") == "planted"
    plain = tmp_path / "plain.jsonl"
    _renamed_corpus(plain)
    assert compare.choose_score("auto", str(plain), "url", "content") == "pairs"
    # Planted scoring reads the corpus as bench/web_shape.py does.
    with pytest.raises(SystemExit, match="reads the fields id and text"):
        compare.choose_score("planted", str(corpus), "url", "text")
    with pytest.raises(SystemExit, match="reads one corpus.jsonl file"):
        compare.choose_score("planted", str(tmp_path), "id", "text")


def test_a_datatrove_output_is_scored_as_a_lsh_spark_run(tmp_path):
    import struct

    compare, planted = bench_module("compare"), bench_module("planted")
    corpus = tmp_path / "corpus.jsonl"
    _planted_corpus(corpus)
    shards = compare.write_shards(str(corpus), str(tmp_path / "shards"), 2, "id", "text")
    read = {
        name: [json.loads(line) for line in (Path(shards) / name).open()]
        for name in sorted(p.name for p in Path(shards).iterdir())
    }
    assert [[d["id"] for d in docs] for docs in read.values()] == [
        ["w1-0", "w1-2", "w2-1"],
        ["w1-1", "w2-0", "s0"],
    ]
    assert all(set(d) == {"id", "text"} for docs in read.values() for d in docs)
    # What bench/peer_datatrove.py leaves: candidate pairs as (file, place in it) twice,
    # and every document kept or removed with its cluster id (-1: in none).  w1 is found
    # whole, w2's copy is missed, and the singleton is removed in favour of w2's original
    # through a candidate pair far below the threshold.
    out = tmp_path / "datatrove"
    (out / "buckets").mkdir(parents=True)
    (out / "buckets" / "00000_00.dups").write_bytes(
        struct.pack("<4I", 0, 0, 1, 0) + struct.pack("<4I", 1, 0, 0, 1)
    )
    (out / "buckets" / "00001_00.dups").write_bytes(struct.pack("<4I", 1, 1, 1, 2))
    for sub, rows in (
        ("kept", [("w1-0", 0), ("w2-0", 1), ("w2-1", -1)]),
        ("removed", [("w1-1", 0), ("w1-2", 0), ("s0", 1)]),
    ):
        (out / sub).mkdir()
        (out / sub / "00000.jsonl").write_text(
            "".join(
                json.dumps({"text": "", "id": i, "metadata": {"minhash_cluster_id": c}}) + "\n"
                for i, c in rows
            ),
            encoding="utf-8",
        )
    assert compare.datatrove_as_run(str(out), shards) == {"candidate_pairs": 3}
    texts, originals = planted.read_texts(str(corpus))
    assert planted.quality(str(out), texts, originals, 0.8) == {
        "planted_copies": 3,
        "removed": 3,
        "recall": 0.6667,
        "removals_across_groups": 1,
        "false_edges": 1,
    }
    assert compare.false_edges_across_groups(str(out), texts, 0.8) == 1
    # A removed document whose cluster keeps none: not a whole output.
    with (out / "removed" / "00000.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"text": "", "id": "w2-1", "metadata": {"minhash_cluster_id": 7}}))
    with pytest.raises(SystemExit, match="1 removed documents whose cluster keeps no document"):
        compare.datatrove_as_run(str(out), shards)


def test_compare_without_a_datatrove_python_says_so_before_anything_runs(tmp_path):
    import subprocess

    corpus = tmp_path / "corpus.jsonl"
    _planted_corpus(corpus)
    work = tmp_path / "work"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "compare.py"), "--corpus", str(corpus)]
        + ["--work", str(work), "--systems", "datatrove", "--warmup", ""],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "datatrove skipped: no --datatrove-python given" in done.stderr
    assert not work.exists()


def test_planted_scoring_on_a_sample_reads_whole_groups_and_the_edges_named(tmp_path):
    """bench/web_shape.py --quality-share: the texts of a CRC-32 sample of the groups
    (w1 at 0.44 of the range, w2 at 0.91) and of the documents the sampled edges
    name; a share of 1 reads every document."""
    planted = bench_module("planted")
    corpus = tmp_path / "corpus.jsonl"
    _planted_corpus(corpus)
    texts, originals = planted.read_texts(str(corpus), 0.5, {"s0"})
    assert sorted(texts) == ["s0", "w1-0", "w1-1", "w1-2"] and originals == {"w1": "w1-0"}
    every, _ = planted.read_texts(str(corpus))
    assert len(every) == 6 and planted.read_texts(str(corpus), 1.0)[0] == every
    shingles = planted.Shingles(every)
    assert planted.planted_copies(shingles, {"w1": "w1-0", "w2": "w2-0"}, 0.8, 0.5) == {
        "w1-1",
        "w1-2",
    }
    assert planted.planted_copies(shingles, {"w1": "w1-0", "w2": "w2-0"}, 0.8) == {
        "w1-1",
        "w1-2",
        "w2-1",
    }
