"""bench/multilingual.py's pure parts: tokens of raw text, planted edits, the
reference Jaccard, catalogs, and how the systems' outputs are scored."""

from __future__ import annotations

import json
import struct

import pytest
from servers import bench_module


@pytest.fixture(scope="module")
def ml():
    return bench_module("multilingual")


class Scripted:
    """A stand-in for random.Random that returns the choices it was given, in order."""

    def __init__(self, sample: list[int], choices: list[str]) -> None:
        self._sample = sample
        self._choices = list(choices)

    def sample(self, population, k):
        assert k == len(self._sample)
        return self._sample

    def choice(self, seq):
        return self._choices.pop(0)


def test_token_spans_split_scripts_without_spaces_into_characters(ml):
    text = "日本語 ls-l テスト! Hello"
    assert ml.token_spans(text) == [
        (0, 1), (1, 2), (2, 3), (4, 6), (7, 8), (9, 10), (10, 11), (11, 12), (14, 19),
    ]  # fmt: skip
    # A Thai consonant keeps the marks that follow it; Hangul words stay words.
    assert ml.token_spans("ที่ดี") == [(0, 3), (3, 5)]
    assert ml.token_spans("한국어 문장") == [(0, 3), (4, 6)]


def test_plant_replaces_deletes_and_inserts_whole_tokens(ml):
    # 10 words at rate 0.2: two edits, the later position first.
    text = "a b c d e f g h i j"
    out, n = ml.plant(text, 0.2, Scripted([1, 7], ["replace", "c", "delete"]))
    assert (out, n) == ("a  c d e f g c i j", 2)
    # An inserted word brings its own space; an inserted character none.
    assert ml.plant("a b", 0.5, Scripted([1], ["insert", "x"])) == ("a x b", 1)
    jp = "日本語のテキスト"
    assert ml.plant(jp, 0.1, Scripted([3], ["insert", "本"])) == ("日本語本のテキスト", 1)
    # At least one edit, however low the rate.
    assert ml.plant("a b c", 0.001, Scripted([0], ["delete"])) == (" b c", 1)


def test_reference_jaccard_counts_characters_of_scripts_without_spaces(ml):
    # 10 characters, 6 shingles; the 6th character changed: only the first
    # shingle (characters 1-5) survives: 1 / (6 + 6 - 1).
    a, b = "日本語のテキストです", "日本語のテ本ストです"
    assert ml.jaccard(ml.reference_shingles(a), ml.reference_shingles(b)) == pytest.approx(1 / 11)
    # With 0.2.0's tokens each text is one word: nothing shared.
    assert ml.jaccard(ml.space_shingles(a), ml.space_shingles(b)) == 0.0
    # 9 words, 5 shingles; the 4th word changed: only the shingle of words 5-9 stays.
    en = "the quick brown fox jumps over the lazy dog"
    assert ml.jaccard(
        ml.reference_shingles(en), ml.reference_shingles(en.replace("fox", "cat"))
    ) == pytest.approx(1 / 9)


def _mo(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A little-endian GNU .mo file of (msgid, msgstr), sorted as msgfmt sorts them."""
    entries = sorted(entries)
    n = len(entries)
    orig, trans = 28, 28 + 8 * n
    data = b""
    start = 28 + 16 * n
    otab, ttab = b"", b""
    for msgid, _ in entries:
        otab += struct.pack("<2I", len(msgid), start + len(data))
        data += msgid + b"\0"
    for _, msgstr in entries:
        ttab += struct.pack("<2I", len(msgstr), start + len(data))
        data += msgstr + b"\0"
    return struct.pack("<7I", 0x950412DE, 0, n, orig, trans, 0, 0) + otab + ttab + data


def test_mo_messages_reads_translations_and_plural_forms_without_the_header(ml):
    mo = _mo(
        [
            (b"", b"Content-Type: text/plain; charset=UTF-8\n"),
            (b"Hello", "こんにちは".encode()),
            (b"file\0files", "ファイル\0ファイル群".encode()),
        ]
    )
    assert ml.mo_messages(mo) == ["こんにちは", "ファイル", "ファイル群"]


def test_catalog_parts_cut_between_messages(ml):
    assert ml.catalog_parts(["aaa", "bb", "cccc"], 6) == ["aaa\nbb", "cccc"]
    assert ml.catalog_parts(["aaa", "bb", "cccc"], 0) == ["aaa\nbb\ncccc"]
    assert ml.catalog_parts(["toolongmessage"], 3) == ["toolongmessage"]


def test_ids_of_copies_do_not_favour_the_original(ml):
    docs = [
        {"lang": "de", "name": f"man1/p{i}.1", "text": "ein kleiner Text " * 20} for i in range(200)
    ]
    corpus = ml.plant_copies(docs, 0.5, [0.01], seed=1)
    copies = [d for d in corpus if d.get("original")]
    assert len(copies) == 100 and len({d["id"] for d in corpus}) == 300
    smaller = sum(d["original"] < d["id"] for d in copies)
    assert 30 < smaller < 70
    assert all(d["id"].startswith("de-") and len(d["id"]) == 15 for d in corpus)
    assert ml.plant_copies(docs, 0.5, [0.01], seed=1) == corpus  # deterministic


def test_score_counts_recall_at_085_and_links_below_05_per_language(ml):
    truth = [
        {"copy": "c1", "original": "o1", "lang": "ja", "j": 0.9},
        {"copy": "c2", "original": "o2", "lang": "ja", "j": 0.8},  # below 0.85: not planted
        {"copy": "c3", "original": "o3", "lang": "de", "j": 0.95},
    ]
    lang_of = {"c1": "ja", "o1": "ja", "x": "ja", "y": "de", "c3": "de", "o3": "de"}
    lang_of |= {"z": "de", "w": "de"}
    j = {("c1", "o1"): 0.9, ("x", "y"): 0.3, ("c3", "o3"): 0.95, ("z", "w"): 0.2}
    got = ml.score(
        truth,
        lang_of,
        found={"c1"},
        links=[("c1", "o1"), ("x", "y")],
        removals=[("c3", "o3"), ("z", "w")],
        jac=lambda a, b: j[(a, b)],
    )
    assert got == {
        "ja": {"planted": 1, "found": 1, "recall": 1.0, "links_below": 0, "removed_below": 0},
        "de": {"planted": 1, "found": 0, "recall": 0.0, "links_below": 0, "removed_below": 1},
        "de+ja": {"planted": 0, "found": 0, "recall": None, "links_below": 1, "removed_below": 0},
        "total": {"planted": 2, "found": 1, "recall": 0.5, "links_below": 1, "removed_below": 1},
    }


def test_datatrove_outcome_maps_shard_positions_to_ids(ml, tmp_path):
    shards = []
    for i, ids in enumerate((["a", "b"], ["c", "d"])):
        path = tmp_path / f"part-{i:05d}.jsonl"
        path.write_text("".join(json.dumps({"id": x, "text": "t"}) + "\n" for x in ids))
        shards.append(str(path))
    out = tmp_path / "dt"
    (out / "buckets").mkdir(parents=True)
    # (shard, position) pairs: (0, 0)-(1, 1) is a-d, (0, 1)-(1, 0) is b-c.
    (out / "buckets" / "00000_00.dups").write_bytes(struct.pack("<8I", 0, 0, 1, 1, 0, 1, 1, 0))
    (out / "buckets" / "00001_00.dups").write_bytes(struct.pack("<4I", 0, 0, 1, 1))
    for sub, rows in (
        ("removed", [("d", 0)]),
        ("kept", [("a", 0), ("b", -1), ("c", -1)]),
    ):
        (out / sub).mkdir()
        (out / sub / "00000.jsonl").write_text(
            "".join(
                json.dumps({"id": i, "text": "t", "metadata": {"minhash_cluster_id": c}}) + "\n"
                for i, c in rows
            )
        )
    truth = [
        {"copy": "d", "original": "a"},  # the copy removed: found
        {"copy": "c", "original": "b"},  # a candidate pair, but nothing removed
        {"copy": "a", "original": "d"},  # the original removed: found
    ]
    found, links, removals = ml.datatrove_outcome(str(out), shards, truth)
    assert found == {"d", "a"}
    assert links == [("a", "d"), ("b", "c")]
    assert removals == [("d", "a")]


def test_lsh_spark_outcome_reads_clusters_and_edges(ml, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = tmp_path / "run"
    (run / "clusters").mkdir(parents=True)
    (run / "pairs").mkdir()
    pq.write_table(
        pa.table(
            {
                "id": ["a", "b", "c", "d", "e"],
                "cluster_id": ["a", "a", "c", "c", "e"],
                "keep": [True, False, False, True, True],
            }
        ),
        run / "clusters" / "part-0.parquet",
    )
    pq.write_table(
        pa.table({"id_a": ["a", "c"], "id_b": ["b", "d"], "jaccard": [0.9, 0.95]}),
        run / "pairs" / "part-0.parquet",
    )
    truth = [{"copy": "b", "original": "a"}, {"copy": "e", "original": "d"}]
    found, links, removals = ml.lsh_spark_outcome(str(run), truth)
    assert found == {"b"}
    assert links == [("a", "b"), ("c", "d")]
    assert removals == [("b", "a"), ("c", "d")]


def test_rates_cost_and_selection(ml):
    truth = [
        {"copy": "c1", "lang": "ja", "rate": 0.01, "j": 0.9, "j_space": 0.2},
        {"copy": "c2", "lang": "ja", "rate": 0.01, "j": 0.8, "j_space": 0.4},
        {"copy": "c3", "lang": "de", "rate": 0.04, "j": 0.86, "j_space": 0.86},
    ]
    stats, recall = ml.by_rate(truth, {"default": {"c1", "c3"}, "space": {"c3"}})
    assert stats == {
        0.01: {"copies": 2, "planted": 1, "mean_j": 0.85, "mean_j_space": 0.3},
        0.04: {"copies": 1, "planted": 1, "mean_j": 0.86, "mean_j_space": 0.86},
    }
    assert recall == {"default": {0.01: 1.0, 0.04: 1.0}, "space": {0.01: 0.0, 0.04: 1.0}}
    names = {"c1": "ja/man1/ls.1.gz", "c2": "x", "c3": "de/man1/ls.1.gz"}
    assert ml.missed_copies(truth, {"c3"}, names) == {
        "ja": [{"copy": "c1", "name": "ja/man1/ls.1.gz", "rate": 0.01, "j": 0.9}]
    }
    assert ml.cores("local[2]") == 2 and ml.cores("local[4, 3]") == 4 and ml.cores("local") == 1
    # 10 MB in 5 s on 2 cores: 1 MB/s per core.
    assert ml.mb_per_s_per_core(10_000_000, 5.0, 2) == 1.0
    meta = {"en": {}, "ja": {}, "th": {}}
    assert ml.per_language_selection("all", meta) == ["en", "ja", "th"]
    assert ml.per_language_selection("none", meta) == []
    with pytest.raises(SystemExit, match="--per-language-runs: xx not in the corpus"):
        ml.per_language_selection("ja,xx", meta)
