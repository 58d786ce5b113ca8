"""End-to-end runs of ``run_dedup`` on inputs full of bad records.

The contract under test (DESIGN.md section 2): the job does not crash on bad
records, every input record ends in exactly one of ``clusters/`` or
``rejects/`` with a reason code, ``report.json`` agrees with the datasets,
derived ids are deterministic, duplicate ids and an existing output are clear
errors raised before anything is written.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import re

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.outputs import StagewiseOutput
from lsh_spark.pipeline import run_dedup, stage_signatures
from lsh_spark.readers import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")


# -- helpers -------------------------------------------------------------------
def _run(spark, input_path, output, cfg=None, **kwargs):
    return run_dedup(spark, str(input_path), str(output), cfg or DedupConfig(), **kwargs)


def _sample_rows():
    with open(SAMPLE, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _good_docs(n=20):
    """The first ``n`` base documents (no planted copies among them) by id."""
    rows = sorted((r for r in _sample_rows() if "~" not in r["id"]), key=lambda r: r["id"])
    return [{"id": r["id"], "text": r["text"]} for r in rows[:n]]


def _full_width(text: str) -> str:
    """ASCII printable -> full-width forms, space -> ideographic space (NFKC undoes both)."""
    out = []
    for ch in text:
        if ch == " ":
            out.append("\u3000")
        elif "!" <= ch <= "~":
            out.append(chr(ord(ch) + 0xFEE0))
        else:
            out.append(ch)
    return "".join(out)


def _code(reason: str) -> str:
    return reason.split(":", 1)[0]


def _jsonl_line(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def _read(spark, output, name):
    return spark.read.parquet(os.path.join(str(output), name))


def _load_report(output):
    with open(os.path.join(str(output), "report.json"), encoding="utf-8") as fh:
        return json.load(fh)


# -- the mixed JSONL corpus: one pipeline run shared by the tests below --------
EMOJI_ONLY_PLAIN = "😀😂🎉🚀 🙈🙉🙊 🍕🍔"
# Emoji written with VARIATION SELECTOR-16 (U+FE0F), as keyboards emit them.
EMOJI_ONLY_VS16 = "❤️ ☀️ ✔️ ⚠️"
# A different emoji text that normalizes to the same leftover marks as EMOJI_ONLY_VS16.
EMOJI_ONLY_VS16_OTHER = "⭐️ ✌️ ☺️ ✈️"


def _write_mixed_corpus(path) -> dict:
    """Write the mixed good/bad JSONL corpus to ``path``; return what each line should become."""
    rng = random.Random(20240601)
    good = _good_docs(20)

    lines: list[bytes] = [_jsonl_line(d) for d in good]
    in_clusters: set[str] = {d["id"] for d in good}
    same_cluster: list[tuple[str, str]] = []
    different_cluster: list[tuple[str, str]] = []

    # Full-width copy of good[0]: an exact duplicate after NFKC.
    lines.append(_jsonl_line({"id": "fullwidth-copy", "text": _full_width(good[0]["text"])}))
    in_clusters.add("fullwidth-copy")
    same_cluster.append(("fullwidth-copy", good[0]["id"]))

    # good[1] with emoji between its words: emoji are separators, so an exact duplicate.
    words = good[1]["text"].split(" ")
    emoji = ["😀", "🎉", "🚀", "👍", "🔥", "🙈"]
    mixed = " ".join(
        w + (" " + rng.choice(emoji) if i % 7 == 3 else "") for i, w in enumerate(words)
    )
    lines.append(_jsonl_line({"id": "emoji-mixed", "text": mixed}))
    in_clusters.add("emoji-mixed")
    same_cluster.append(("emoji-mixed", good[1]["id"]))

    # ~5 MB of real words in random order: many distinct shingles.
    vocab = sorted({w for r in _sample_rows() for w in r["text"].split()})
    big_words, size = [], 0
    while size < 5_000_000:
        w = rng.choice(vocab)
        big_words.append(w)
        size += len(w) + 1
    lines.append(_jsonl_line({"id": "huge-5mb", "text": " ".join(big_words)}))
    in_clusters.add("huge-5mb")

    # Short texts (fewer than k=5 words).
    lines += [
        _jsonl_line({"id": "short-a", "text": "hello there world"}),
        _jsonl_line({"id": "short-b", "text": "goodbye cruel world"}),
        _jsonl_line({"id": "short-c1", "text": "red fox jumps"}),
        _jsonl_line({"id": "short-c2", "text": "red fox jumps"}),
    ]
    in_clusters |= {"short-a", "short-b", "short-c1", "short-c2"}
    same_cluster.append(("short-c1", "short-c2"))
    different_cluster += [("short-a", "short-b"), ("short-a", "short-c1"), ("short-b", "short-c1")]

    # Records with an id that must be rejected, and their reason codes.
    garbage = bytes(rng.randrange(256) for _ in range(2000))
    expected_rejects = {
        "bad-null-text": "missing_text",
        "bad-no-text-field": "missing_text",
        "bad-empty": "empty_text",
        "bad-whitespace": "whitespace_only_text",
        "bad-binary-text": "binary_content",
        "bad-emoji-only": "no_text_content",
        "bad-punct-only": "no_text_content",
    }
    lines += [
        _jsonl_line({"id": "bad-null-text", "text": None}),
        _jsonl_line({"id": "bad-no-text-field", "source": "nowhere"}),
        _jsonl_line({"id": "bad-empty", "text": ""}),
        _jsonl_line({"id": "bad-whitespace", "text": "  \t\n \u3000\u00a0\r\n  "}),
        # Bytes of a binary file decoded with replacement: U+FFFD and control characters.
        _jsonl_line({"id": "bad-binary-text", "text": garbage.decode("utf-8", errors="replace")}),
        _jsonl_line({"id": "bad-emoji-only", "text": EMOJI_ONLY_PLAIN}),
        _jsonl_line({"id": "bad-punct-only", "text": "!!! ... --- *** ???"}),
        # Emoji-only texts with VS16: see test_emoji_with_variation_selector_is_rejected.
        _jsonl_line({"id": "bad-emoji-vs16", "text": EMOJI_ONLY_VS16}),
        _jsonl_line({"id": "bad-emoji-vs16-other", "text": EMOJI_ONLY_VS16_OTHER}),
    ]
    # Records whose id cannot be known: rejected with a null id.
    expected_null_id_rejects = {"invalid_record": 2, "null_id": 2}
    binary_line = b"\xff\xfe" + bytes(b for b in garbage if b not in (0x0A, 0x0D))
    lines += [
        _jsonl_line({"id": None, "text": "a perfectly fine text whose id is null"}),
        _jsonl_line({"text": "a perfectly fine text that has no id field at all"}),
        b'{"id": "broken-json", "text": "this line is cut off in the middle',
        binary_line,
    ]

    order = list(range(len(lines)))
    rng.shuffle(order)
    with open(path, "wb") as fh:
        for i in order:
            assert b"\n" not in lines[i] and b"\r" not in lines[i]
            fh.write(lines[i] + b"\n")
    return {
        "n_lines": len(lines),
        "in_clusters": in_clusters,
        "same_cluster": same_cluster,
        "different_cluster": different_cluster,
        "expected_rejects": expected_rejects,
        "expected_null_id_rejects": expected_null_id_rejects,
    }


@pytest.fixture(scope="module")
def bad_run(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("bad_input")
    path = base / "mixed.jsonl"
    expected = _write_mixed_corpus(path)
    # Invalid UTF-8 really is in the file.
    with pytest.raises(UnicodeDecodeError):
        path.read_bytes().decode("utf-8")
    output = base / "out"
    report = _run(spark, path, output)
    return {"output": output, "report": report, **expected}


def test_every_line_is_accounted_for_exactly_once(spark, bad_run):
    clusters = _read(spark, bad_run["output"], "clusters")
    rejects = _read(spark, bad_run["output"], "rejects")
    n_clusters, n_rejects = clusters.count(), rejects.count()
    assert n_clusters + n_rejects == bad_run["n_lines"]
    # Each accepted id exactly once in clusters/, and never also in rejects/.
    assert clusters.select("id").distinct().count() == n_clusters
    assert clusters.filter(F.col("id").isNull()).count() == 0
    assert rejects.join(clusters, "id", "left_semi").count() == 0
    # Every reject has a reason with a code.
    assert rejects.filter(F.col("reason").isNull() | ~F.col("reason").contains(":")).count() == 0


def test_bad_records_are_rejected_with_their_reason(spark, bad_run):
    rejects = {
        r["id"]: r["reason"]
        for r in _read(spark, bad_run["output"], "rejects").filter("id IS NOT NULL").collect()
    }
    for rid, code in bad_run["expected_rejects"].items():
        assert rid in rejects, f"{rid} not in rejects/"
        assert _code(rejects[rid]) == code, (rid, rejects[rid])

    null_ids = (
        _read(spark, bad_run["output"], "rejects")
        .filter("id IS NULL")
        .groupBy(F.split("reason", ":").getItem(0).alias("code"))
        .count()
        .collect()
    )
    assert {r["code"]: r["count"] for r in null_ids} == bad_run["expected_null_id_rejects"]


def test_good_huge_and_emoji_mixed_documents_are_clustered(spark, bad_run):
    clusters = {r["id"]: r for r in _read(spark, bad_run["output"], "clusters").collect()}
    missing = bad_run["in_clusters"] - set(clusters)
    assert not missing, f"accepted documents missing from clusters/: {sorted(missing)}"
    sigs = {
        r["id"]: r["num_shingles"]
        for r in _read(spark, bad_run["output"], "signatures")
        .select("id", "num_shingles")
        .collect()
    }
    assert sigs["huge-5mb"] > 500_000
    # The huge random document duplicates nothing.
    assert clusters["huge-5mb"]["cluster_size"] == 1


def test_normalization_duplicates_share_a_cluster_short_texts_do_not_collapse(spark, bad_run):
    clusters = {r["id"]: r for r in _read(spark, bad_run["output"], "clusters").collect()}
    for a, b in bad_run["same_cluster"]:
        assert clusters[a]["cluster_id"] == clusters[b]["cluster_id"], (a, b)
        assert clusters[a]["cluster_size"] == 2, (a, clusters[a])
    for a, b in bad_run["different_cluster"]:
        assert clusters[a]["cluster_id"] != clusters[b]["cluster_id"], (a, b)
    assert clusters["short-a"]["cluster_size"] == 1
    assert clusters["short-b"]["cluster_size"] == 1

    pairs = {
        (r["id_a"], r["id_b"]): r["jaccard"]
        for r in _read(spark, bad_run["output"], "pairs").collect()
    }
    for a, b in bad_run["same_cluster"]:
        assert pairs[tuple(sorted((a, b)))] == pytest.approx(1.0)


def test_report_counts_agree_with_datasets(spark, bad_run):
    out = bad_run["output"]
    report = _load_report(out)
    assert report["counts"] == bad_run["report"]["counts"]
    counts = report["counts"]
    clusters = _read(spark, out, "clusters")
    rejects = _read(spark, out, "rejects")
    assert counts["input_records"] == bad_run["n_lines"]
    assert counts["accepted"] == _read(spark, out, "signatures").count() == clusters.count()
    assert counts["clustered_documents"] == clusters.count()
    assert counts["rejected"] == rejects.count()
    assert counts["candidate_pairs"] == _read(spark, out, "candidates").count()
    assert counts["verified_pairs"] == _read(spark, out, "pairs").count()
    assert counts["deduped_documents"] == _read(spark, out, "deduped").count()
    assert counts["deduped_documents"] == clusters.filter("keep").count()
    assert counts["clusters"] == clusters.select("cluster_id").distinct().count()
    assert counts["removed_documents"] == clusters.filter(~F.col("keep")).count()
    by_reason = {
        r["code"]: r["count"]
        for r in rejects.groupBy(F.split("reason", ":").getItem(0).alias("code")).count().collect()
    }
    assert report["rejects_by_reason"] == by_reason
    # The histogram and the Jaccard-1 count come with the write of pairs/.
    pairs = _read(spark, out, "pairs")
    bins = {
        r["bin"] / 20: r["n"]
        for r in pairs.groupBy(F.least(F.floor(F.col("jaccard") * 20), F.lit(19)).alias("bin"))
        .count()
        .withColumnRenamed("count", "n")
        .collect()
    }
    assert {b["from"]: b["pairs"] for b in report["jaccard_histogram"]} == bins
    assert counts["pairs_with_jaccard_1"] == pairs.filter("jaccard >= 1.0").count() > 0
    assert report["buckets"]["block_members"] == sum(
        r["size"] for r in _read(spark, out, "blocks").collect()
    )
    assert os.path.exists(os.path.join(str(out), "_SUCCESS"))


def test_emoji_with_variation_selector_is_rejected(spark, bad_run):
    rejects = {
        r["id"]: r["reason"]
        for r in _read(spark, bad_run["output"], "rejects").filter("id IS NOT NULL").collect()
    }
    for rid in ("bad-emoji-vs16", "bad-emoji-vs16-other"):
        assert _code(rejects.get(rid, "accepted: not in rejects/")) == "no_text_content", rid


# -- other input formats ---------------------------------------------------------
@pytest.mark.heavy
def test_csv_malformed_rows_are_rejected(spark, tmp_path):
    good = _good_docs(8)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["id", "text"])
    # A quoted text with commas, quotes and line breaks is still one record.
    writer.writerow(["c-quoted", 'He said "stop, now", twice,\nthen left the room slowly today.'])
    for d in good:
        writer.writerow([d["id"], d["text"]])
    text = buf.getvalue()
    text += "c-too-many,too,many,fields\n"  # malformed: 4 fields for 2 columns
    text += "c-too-few\n"  # malformed: 1 field
    text += "c-empty,\n"  # empty field: read as null
    path = tmp_path / "corpus.csv"
    path.write_text(text, encoding="utf-8")
    n_records = len(good) + 4

    report = _run(spark, path, tmp_path / "out")
    clusters = _read(spark, tmp_path / "out", "clusters")
    rejects = {r["id"]: r["reason"] for r in _read(spark, tmp_path / "out", "rejects").collect()}
    assert clusters.count() + len(rejects) == n_records == report["counts"]["input_records"]
    assert {_code(rejects.get(i, "")) for i in ("c-too-many", "c-too-few")} == {"invalid_record"}
    assert _code(rejects["c-empty"]) == "missing_text"
    clustered = {r["id"] for r in clusters.collect()}
    assert clustered == {d["id"] for d in good} | {"c-quoted"}


@pytest.mark.heavy
def test_text_input_derived_ids_are_deterministic(spark, tmp_path):
    good = [" ".join(d["text"].split()) for d in _good_docs(10)]
    lines = good + [
        "",  # empty_text
        "   \t  ",  # whitespace_only_text
        "*** --- ***",  # no_text_content
        good[3],  # an identical line: derived ids #1, #2
        "a short line",
        good[5].upper() + "!!",  # exact duplicate after normalization
    ]
    src = tmp_path / "in"
    src.mkdir()
    (src / "docs.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")

    cfg = DedupConfig(format="text")
    key = "spark.sql.shuffle.partitions"
    old = spark.conf.get(key)
    report1 = _run(spark, src, tmp_path / "out1", cfg)
    try:
        spark.conf.set(key, "3")  # a different physical plan must not change any id
        report2 = _run(spark, src, tmp_path / "out2", cfg)
    finally:
        spark.conf.set(key, old)

    for report in (report1, report2):
        assert report["counts"]["input_records"] == len(lines)
        assert report["input"]["derived_ids"] is True
    for name in ("clusters", "rejects", "signatures"):
        df1 = _read(spark, tmp_path / "out1", name)
        df2 = _read(spark, tmp_path / "out2", name)
        cols = sorted(df1.columns)
        assert_df_equality(df1.select(cols), df2.select(cols), ignore_row_order=True)

    clusters = {r["id"]: r for r in _read(spark, tmp_path / "out1", "clusters").collect()}
    rejects = {r["id"]: r["reason"] for r in _read(spark, tmp_path / "out1", "rejects").collect()}
    assert len(clusters) + len(rejects) == len(lines)
    assert all(re.fullmatch(r"d[0-9A-F]{16}(#\d+)?", i) for i in [*clusters, *rejects])
    assert sorted(_code(r) for r in rejects.values()) == [
        "empty_text",
        "no_text_content",
        "whitespace_only_text",
    ]
    # The two identical lines got distinct ids and share a cluster; so do the exact copies.
    twins = [i for i in clusters if "#" in i]
    assert len(twins) == 2 and clusters[twins[0]]["cluster_id"] == clusters[twins[1]]["cluster_id"]
    assert report1["counts"]["duplicate_clusters"] == 2


@pytest.mark.heavy
@pytest.mark.parametrize("shingle", ["word", "char"])
def test_text_input_that_is_not_utf8_is_decoded_like_the_jvm_does(spark, tmp_path, shingle):
    # Spark's text reader passes a line's bytes on unchecked: a Latin-1 file
    # reaches the Python workers as malformed UTF-8.  A few such bytes are
    # U+FFFD (a separator) and the line is deduplicated; many are binary_content.
    good = [" ".join(d["text"].split()) for d in _good_docs(4)]
    latin1 = b"Caf\xe9 " + good[0].encode()  # one Latin-1 byte in a UTF-8 line
    lines = [
        latin1,
        latin1.replace(b"Caf\xe9", b"Cafe"),
        bytes(range(0x80, 0xC0)) + b" x",
        good[1].encode(),
        good[2].encode(),
    ]
    src = tmp_path / "in"
    src.mkdir()
    (src / "docs.txt").write_bytes(b"\n".join(lines) + b"\n")
    report = _run(spark, src, tmp_path / "out", DedupConfig(format="text", shingle=shingle))
    rejects = [r["reason"] for r in _read(spark, tmp_path / "out", "rejects").collect()]
    assert [_code(r) for r in rejects] == ["binary_content"]
    assert report["counts"]["input_records"] == len(lines)
    # The line with one undecodable byte and its clean twin are near-duplicates.
    assert report["counts"]["duplicate_clusters"] == 1


# -- errors before any output is written -------------------------------------
def test_duplicate_ids_raise_input_error_before_any_output(spark, tmp_path):
    good = _good_docs(4)
    rows = good + [
        {"id": "dup-7", "text": "first text with this id"},
        {"id": "dup-7", "text": "second text with the same id"},
    ]
    path = tmp_path / "dups.jsonl"
    path.write_bytes(b"".join(_jsonl_line(r) + b"\n" for r in rows))
    output = tmp_path / "out"

    with pytest.raises(InputError, match="dup-7"):
        _run(spark, path, output)
    assert not output.exists()
    # No staging directory left behind either.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dups.jsonl"]


@pytest.mark.parametrize("repeated", [True, False])
def test_id_check_beside_the_candidate_stage_wins_over_its_failure(
    spark, tmp_path, monkeypatch, repeated
):
    # run_dedup checks the ids beside the candidate stage: if that stage fails
    # on input whose ids repeat, the repeated ids are the error reported.
    from lsh_spark import pipeline

    rows = _good_docs(4) + [
        {"id": "dup-5" if repeated else "one-5", "text": "a first text"},
        {"id": "dup-5" if repeated else "two-5", "text": "a second text"},
    ]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(_jsonl_line(r) + b"\n" for r in rows))

    def failing(*args, **kwargs):
        raise RuntimeError("the candidate stage failed")

    monkeypatch.setattr(pipeline, "stage_candidates", failing)
    with pytest.raises(
        InputError if repeated else RuntimeError,
        match="dup-5" if repeated else "candidate stage failed",
    ):
        _run(spark, path, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_stage_job_with_duplicate_ids_leaves_none_of_its_datasets(spark, tmp_path):
    # The id check runs beside the signatures' and rejects' writes: when it
    # fails, those are deleted with shingles/ (a stage job's output has no
    # staging directory to abort).
    rows = _good_docs(4) + [
        {"id": "dup-9", "text": "first text with this id"},
        {"id": "dup-9", "text": "second text with the same id"},
        {"id": "rejected-1", "text": "!!!"},
    ]
    path = tmp_path / "dups.jsonl"
    path.write_bytes(b"".join(_jsonl_line(r) + b"\n" for r in rows))
    output = tmp_path / "out"
    with pytest.raises(InputError, match="dup-9"):
        stage_signatures(spark, str(path), StagewiseOutput(spark, str(output)), DedupConfig())
    left = (
        sorted(p.name for p in output.iterdir() if not p.name.startswith("."))
        if output.exists()
        else []
    )
    assert left == []


def test_existing_output_without_overwrite_is_a_config_error(spark, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(_jsonl_line(r) + b"\n" for r in _good_docs(3)))
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep-me.txt").write_text("an earlier run")

    with pytest.raises(ConfigError, match="--output"):
        _run(spark, path, output)
    assert sorted(p.name for p in output.iterdir()) == ["keep-me.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out"]


def test_input_with_every_record_rejected_completes(spark, tmp_path):
    from lsh_spark.config import DedupConfig as _Cfg
    from lsh_spark.pipeline import run_dedup as _run

    path = tmp_path / "all_bad.jsonl"
    path.write_text(
        '{"id": "a", "text": ""}\n{"id": "b", "text": null}\nnot json\n', encoding="utf-8"
    )
    report = _run(spark, str(path), str(tmp_path / "out"), _Cfg())
    c = report["counts"]
    assert (c["input_records"], c["rejected"], c["clustered_documents"]) == (3, 3, 0)
    assert (c["deduped_documents"], c["removed_documents"], c["duplicate_clusters"]) == (0, 0, 0)


# -- issue 49: bad input not yet covered -------------------------------------------
def _clustered_and_rejected(spark, output) -> tuple[set, dict]:
    clusters = {r["id"] for r in _read(spark, output, "clusters").select("id").collect()}
    rejects = [(r["id"], r["reason"]) for r in _read(spark, output, "rejects").collect()]
    return clusters, rejects


@pytest.mark.slow
def test_a_100mb_jsonl_document_is_rejected_as_too_large(spark, tmp_path):
    # One JSON line of 100 MB: read by the JVM (Jackson's default string limit
    # is 20M characters), measured there and rejected before any Python worker
    # sees it; the test session's driver has 2g.
    good = _good_docs(6)
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as fh:
        for d in good[:3]:
            fh.write(_jsonl_line(d) + b"\n")
        fh.write(b'{"id": "huge-100mb", "text": "')
        chunk = b"lorem ipsum dolor sit amet " * 40_000  # about 1 MB
        for _ in range(100):
            fh.write(chunk)
        fh.write(b'"}\n')
        for d in good[3:]:
            fh.write(_jsonl_line(d) + b"\n")
    assert path.stat().st_size > 100_000_000
    report = _run(spark, path, tmp_path / "out")
    clusters, rejects = _clustered_and_rejected(spark, tmp_path / "out")
    assert clusters == {d["id"] for d in good}
    ((rid, reason),) = rejects
    assert rid == "huge-100mb"
    assert reason == "too_large: 108000000 characters > max_text_chars 20000000"
    assert report["counts"]["input_records"] == 7


def test_nul_bytes_in_jsonl(spark, tmp_path):
    # An escaped NUL (\u0000) is a character of the text: a separator like any
    # other non-alphanumeric character, so the text still finds its twin.  A raw
    # NUL byte inside a JSON string is not JSON: that line is an invalid_record.
    good = _good_docs(6)
    words = good[0]["text"].split(" ")
    with_nul = "\u0000".join(words[:10]) + " " + " ".join(words[10:])
    lines = [_jsonl_line(d) for d in good]
    lines.append(_jsonl_line({"id": "escaped-nul", "text": with_nul}))
    assert b"\\u0000" in lines[-1]
    lines.append(b'{"id": "raw-nul", "text": "a text with a raw \x00 byte inside it"}')
    lines.append(b"\x00\x00\x00\x00")
    path = tmp_path / "nul.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    report = _run(spark, path, tmp_path / "out")
    clusters = {r["id"]: r for r in _read(spark, tmp_path / "out", "clusters").collect()}
    rejects = [r["reason"] for r in _read(spark, tmp_path / "out", "rejects").collect()]
    assert set(clusters) == {d["id"] for d in good} | {"escaped-nul"}
    assert clusters["escaped-nul"]["cluster_id"] == clusters[good[0]["id"]]["cluster_id"]
    assert [_code(r) for r in rejects] == ["invalid_record", "invalid_record"]
    # The reason shows the bad line with its control characters masked.
    assert any("a text with a raw ? byte" in r for r in rejects)
    assert all("\x00" not in r for r in rejects)
    assert report["counts"]["input_records"] == len(lines)


def test_a_corrupt_parquet_footer_is_one_error_before_any_output(spark, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "in"
    src.mkdir()
    good = _good_docs(6)
    pq.write_table(pa.Table.from_pylist(good[:3]), src / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(good[3:]), src / "part-1.parquet")
    data = (src / "part-1.parquet").read_bytes()
    (src / "part-1.parquet").write_bytes(data[:-12] + b"\x00" * 12)  # footer length + magic
    with pytest.raises(InputError, match=r"part-1\.parquet.*footer"):
        _run(spark, src, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_an_empty_input_folder_is_one_error_before_any_output(spark, tmp_path):
    (tmp_path / "batch").mkdir()
    with pytest.raises(ConfigError, match=r"--input: no data files under .*batch"):
        _run(spark, tmp_path / "batch", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch"]


# -- WARC batches ------------------------------------------------------------------
RUSSIAN = (
    "Съешь же ещё этих мягких французских булок, да выпей чаю. Широкая "
    "электрификация южных губерний даст мощный толчок подъёму сельского хозяйства."
)


def _warc_batch(root) -> dict:
    """A batch folder: a.warc.gz (a page, a page with NUL bytes in its HTML, a
    windows-1251 page whose charset nobody declares), the same file again under
    copy/, and a zero-byte file."""
    from crawlgen import day, page, record_id, write_warc

    nul_html = b"<html><body><p>" + b"\x00".join(b"plain words around nul bytes".split()) + b"</p>"
    nul_html += b"<p>" + b" ".join([b"filler"] * 30) + b"</p></body></html>"
    cp1251 = f"<html><body><p>{RUSSIAN}</p></body></html>".encode("cp1251")
    records = [
        dict(url="https://a.example/ars", date=day(1), html=page("ars-1")),
        dict(url="https://a.example/nul", date=day(1), html=nul_html),
        dict(url="https://a.example/ru", date=day(1), type="text/html", html=cp1251),
    ]
    write_warc(str(root / "a.warc.gz"), records)
    (root / "copy").mkdir()
    (root / "copy" / "a.warc.gz").write_bytes((root / "a.warc.gz").read_bytes())
    (root / "empty.warc.gz").write_bytes(b"")
    return {r["url"]: record_id(r["url"], r["date"]) for r in records}


def _check_warc_batch_rejects(rejects: list, ids: dict) -> None:
    """Three duplicate_record rejects (the copy's records, naming both files)
    and one invalid_record (the empty file); nothing else."""
    reasons = sorted(r for _, r in rejects)
    assert [_code(r) for r in reasons] == ["duplicate_record"] * 3 + ["invalid_record"]
    assert all(rid is None for rid, _ in rejects)
    for rid in ids.values():
        (reason,) = [r for r in reasons if rid in r]
        assert re.fullmatch(
            rf"duplicate_record: WARC-Record-ID {re.escape(rid)} at file:\S+/copy/a\.warc\.gz "
            r"offset \d+ was read at file:\S+/a\.warc\.gz offset \d+",
            reason,
        ), reason
    assert reasons[-1] == "invalid_record: no WARC record in empty.warc.gz"


@pytest.mark.heavy
def test_warc_batch_with_nul_bytes_undeclared_charset_a_repeated_and_an_empty_file(spark, tmp_path):
    src = tmp_path / "batch"
    src.mkdir()
    ids = _warc_batch(src)
    report = _run(spark, src, tmp_path / "out")
    clusters, rejects = _clustered_and_rejected(spark, tmp_path / "out")
    assert clusters == set(ids.values())
    _check_warc_batch_rejects(rejects, ids)
    assert report["counts"]["input_records"] == 7
    texts = {r["url"]: r["text"] for r in _read(spark, tmp_path / "out", "deduped").collect()}
    assert RUSSIAN in texts["https://a.example/ru"]
    # The HTML parser drops NUL characters in text, as browsers do (HTML5: "in
    # body", a NUL character token is ignored): the page reads as a browser shows it.
    assert texts["https://a.example/nul"].split()[:2] == ["plainwordsaroundnulbytes", "filler"]


@pytest.mark.heavy
def test_crawl_batch_with_a_repeated_and_an_empty_file(spark, tmp_path):
    from lsh_spark.crawl import run_crawl_batch
    from lsh_spark.index import CrawlIndex

    src = tmp_path / "batch"
    src.mkdir()
    ids = _warc_batch(src)
    index = tmp_path / "index"
    report = run_crawl_batch(spark, str(src), str(index), str(tmp_path / "out"), DedupConfig())
    kept = {r["id"] for r in _read(spark, tmp_path / "out", "deduped").collect()}
    assert kept == set(ids.values())
    rejects = [(r["id"], r["reason"]) for r in _read(spark, tmp_path / "out", "rejects").collect()]
    _check_warc_batch_rejects(rejects, ids)
    assert report["counts"]["new_documents"] == 3
    assert report["counts"]["input_records"] == 7
    manifest = CrawlIndex(spark, str(index)).current()
    assert manifest is not None and manifest.version == 1
    # An empty batch folder: one clear error naming --batch, the index unchanged.
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"--batch: no data files under .*empty"):
        run_crawl_batch(
            spark, str(tmp_path / "empty"), str(index), str(tmp_path / "o2"), DedupConfig()
        )
    assert CrawlIndex(spark, str(index)).current().version == 1
    assert not (tmp_path / "o2").exists()
