"""WARC/WET input: record selection, rejects, metadata, and dedup.py --format warc."""

from __future__ import annotations

import gzip
import io
import json
import os

import pytest
from crawlgen import day, near_copy, page, record_id, write_warc

from lsh_spark.config import DedupConfig
from lsh_spark.readers import detect_format
from lsh_spark.warc import extract_warc, parse_records, parse_stream, warc_schema

pytest.importorskip("warcio")


def _bytes(tmp_path, records) -> bytes:
    path = tmp_path / "x.warc.gz"
    write_warc(str(path), records)
    return path.read_bytes()


def test_keeps_200_html_and_carries_metadata(tmp_path):
    data = _bytes(tmp_path, [dict(url="https://a.example/1", date=day(3), html=page("ars-1"))])
    (row,) = list(parse_records(data, "file:/x.warc.gz"))
    assert row["id"] == record_id("https://a.example/1", day(3)) == row["warc_record_id"]
    assert row["url"] == "https://a.example/1"
    assert row["fetch_time"].isoformat() == "2026-11-03T03:00:00+00:00"
    assert row["content_digest"].startswith("sha1:")
    assert row.get("reject_reason") is None and row.get("skip_reason") is None
    # main-content extraction: article text in, navigation scripts out
    assert "function(" not in row["text"] and len(row["text"].split()) > 300


def test_skips_and_rejects_with_reasons(tmp_path):
    data = _bytes(
        tmp_path,
        [
            dict(url="https://a.example/404", date=day(1), status=404, html=b"<p>gone</p>"),
            dict(url="https://a.example/r", date=day(1), kind="request"),
            dict(url="https://a.example/j", date=day(1), type="application/json", html=b"{}"),
            dict(
                url="https://a.example/b",
                date=day(1),
                html=b"<html><body><script>var x;</script></body></html>",
            ),
            dict(url="https://a.example/ok", date=day(1), html=page("mozilla-2")),
        ],
    )
    rows = {r["url"]: r for r in parse_records(data, "f.warc.gz")}
    assert rows["https://a.example/404"]["skip_reason"] == "http_status: 404"
    assert rows["https://a.example/r"]["skip_reason"] == "record_type: request"
    assert rows["https://a.example/j"]["skip_reason"] == "not_html: application/json"
    assert rows["https://a.example/b"]["reject_reason"].startswith("empty_text:")
    assert rows["https://a.example/ok"]["text"]
    assert (
        sum(
            1
            for r in rows.values()
            if r.get("skip_reason") is None and r.get("reject_reason") is None
        )
        == 1
    )


def test_truncated_and_garbage_files_become_one_reject(tmp_path):
    good = _bytes(
        tmp_path,
        [
            dict(url="https://a.example/1", date=day(1), html=page("ars-1")),
            dict(url="https://a.example/2", date=day(1), html=page("lwn-1")),
        ],
    )
    cut = list(parse_records(good[: len(good) - 3000], "dir/cut.warc.gz"))
    assert [r.get("url") for r in cut if r.get("text")] == ["https://a.example/1"]
    assert cut[-1]["url"] == "https://a.example/2"
    assert cut[-1]["reject_reason"].startswith("truncated_record: the file ends ")
    junk = list(parse_records(gzip.compress(b"this is not a WARC file\r\n" * 50), "d/junk.warc.gz"))
    assert len(junk) == 1
    assert junk[0]["reject_reason"] == (
        "invalid_record: WARC parse error in junk.warc.gz after "
        "0 records: OSError: Invalid WARC header"
    )


def test_wet_conversion_records_are_plain_text(tmp_path):
    from warcio.warcwriter import WARCWriter

    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True)
    rec = writer.create_warc_record(
        "https://a.example/t",
        "conversion",
        payload=io.BytesIO("héllo wörld\nline two".encode()),
        warc_headers_dict={
            "WARC-Date": day(2),
            "Content-Type": "text/plain",
            "WARC-Record-ID": "<urn:uuid:wet-1>",
        },
    )
    writer.write_record(rec)
    (row,) = list(parse_records(buf.getvalue(), "x.warc.wet.gz"))
    assert row["text"] == "héllo wörld\nline two"
    assert row["id"] == "<urn:uuid:wet-1>"


def test_format_detection():
    assert detect_format(["a/CC-MAIN-1.warc.gz", "a/b.warc"]) == "warc"
    assert detect_format(["a/CC-MAIN-1.warc.wet.gz"]) == "warc"
    with pytest.raises(Exception, match="--format"):
        DedupConfig(format="arc")


@pytest.mark.heavy
def test_dedup_job_reads_warc(spark, tmp_path):
    from lsh_spark.pipeline import run_dedup

    src = tmp_path / "crawl"
    write_warc(
        str(src / "a.warc.gz"),
        [
            dict(url="https://a.example/1", date=day(1), html=page("wapo-1")),
            dict(url="https://a.example/2", date=day(1), html=page("wapo-2")),
            dict(url="https://a.example/404", date=day(1), status=404, html=b"<p>x</p>"),
        ],
    )
    write_warc(
        str(src / "b.warc.gz"),
        [
            dict(url="https://b.example/1", date=day(2), html=near_copy(page("wapo-1"))),
            dict(url="https://b.example/e", date=day(2), html=b"<html><body></body></html>"),
        ],
    )
    (src / "c.warc.gz").write_bytes(gzip.compress(b"GET / HTTP/1.0\r\n" * 20))
    out = tmp_path / "out"
    report = run_dedup(spark, str(src), str(out), DedupConfig())
    c = report["counts"]
    assert report["input"]["format"] == "warc"
    assert report["warc"]["skipped_by_reason"] == {"http_status: 404": 1}
    assert c["input_records"] == c["accepted"] + c["rejected"]
    assert c["accepted"] == 3 and c["deduped_documents"] == 2
    reasons = sorted(r.split(":")[0] for r in report["rejects_by_reason"])
    assert reasons == ["empty_text", "invalid_record"]
    deduped = spark.read.parquet(str(out / "deduped"))
    assert {"url", "fetch_time", "content_digest", "warc_record_id"} <= set(deduped.columns)
    urls = {r["url"] for r in deduped.collect()}
    assert urls == {"https://a.example/1", "https://a.example/2"}  # the near copy is removed
    assert not os.path.exists(out / "extracted")
    assert json.loads((out / "report.json").read_text())["warc"]["skipped"] == 1


# -- streamed reading (issue 50) ---------------------------------------------------
def test_a_record_over_max_record_bytes_is_rejected_unread(tmp_path):
    data = _bytes(
        tmp_path,
        [
            dict(url="https://a.example/big", date=day(1), html=page("lwn-1")),
            dict(url="https://a.example/small", date=day(1), html=page("ars-1")),
        ],
    )
    small = len(page("ars-1"))
    rows = {r["url"]: r for r in parse_records(data, "f.warc.gz", max_record_bytes=small)}
    size = len(page("lwn-1"))
    assert rows["https://a.example/big"]["reject_reason"] == (
        f"too_large: WARC record payload of {size} bytes > max_record_bytes {small}"
    )
    assert rows["https://a.example/big"]["id"] == record_id("https://a.example/big", day(1))
    # The stream goes on after the skipped payload: the next page is read whole.
    assert rows["https://a.example/small"]["text"]
    assert rows["https://a.example/small"].get("reject_reason") is None


def test_a_stream_is_read_in_bounded_pieces(tmp_path):
    # parse_stream pulls the file through the stream's read(), never all at once.
    html = page("ars-1")
    data = _bytes(
        tmp_path, [dict(url=f"https://a.example/{i}", date=day(1), html=html) for i in range(40)]
    )

    class Spy(io.BytesIO):
        largest = 0

        def read(self, n=-1):
            out = super().read(n)
            Spy.largest = max(Spy.largest, len(out))
            return out

    rows = list(parse_stream(Spy(data), "f.warc.gz"))
    assert [r["text"] for r in rows] == [r["text"] for r in parse_records(data, "f.warc.gz")]
    assert len(rows) == 40 and 0 < Spy.largest < len(data) / 4


def test_files_are_streamed_by_the_workers_with_the_same_rows(spark, tmp_path):
    # Three files, one in a subfolder, read as a DataFrame of paths: the rows are
    # those of parsing each file's bytes in memory (the reader before streaming),
    # with the file named as Spark's binaryFile source named it.
    src = tmp_path / "batch"
    write_warc(
        str(src / "a.warc.gz"),
        [
            dict(url="https://a.example/1", date=day(1), html=page("wapo-1")),
            dict(url="https://a.example/404", date=day(1), status=404, html=b"<p>x</p>"),
            dict(url="https://a.example/big", date=day(1), html=page("nytimes-1")),
        ],
    )
    write_warc(
        str(src / "b.warc.gz"), [dict(url="https://b.example/1", date=day(2), html=page("lwn-1"))]
    )
    write_warc(
        str(src / "sub" / "c.warc.gz"),
        [dict(url="https://c.example/1", date=day(3), html=near_copy(page("wapo-1")))],
    )
    limit = len(page("nytimes-1")) - 1
    assert limit > len(page("wapo-1")) > len(page("lwn-1"))
    got = extract_warc(spark, str(src), max_record_bytes=limit).collect()
    binary = spark.read.format("binaryFile").option("recursiveFileLookup", "true").load(str(src))
    expected = [
        row
        for f in binary.select("path", "content").collect()
        for row in parse_records(bytes(f["content"]), f["path"], max_record_bytes=limit)
    ]
    names = warc_schema("text").names

    def key(row: dict) -> tuple:
        # Spark gives fetch_time as a naive UTC datetime (the session's time zone).
        when = row["fetch_time"]
        return tuple(str(row.get(n)) for n in names if n != "fetch_time") + (
            when and when.replace(tzinfo=None),
        )

    streamed = [r.asDict() for r in got]
    in_memory = [dict(r, text=r.get("text")) for r in expected]
    assert sorted(map(key, streamed)) == sorted(map(key, in_memory))
    assert len(got) == 5
    assert {r["warc_file"] for r in got} == {f["path"] for f in binary.select("path").collect()}
    (big,) = [r for r in got if r["url"] == "https://a.example/big"]
    assert big["reject_reason"].startswith("too_large: WARC record payload of ")


def test_max_record_bytes_is_an_option():
    assert DedupConfig().max_record_bytes == 64 << 20
    with pytest.raises(Exception, match="--max-record-bytes"):
        DedupConfig(max_record_bytes=0)


def test_read_warc_rejects_a_repeated_record_id_when_reading_directly(spark, tmp_path):
    # The stage jobs read WARC input without an extracted/ copy: the repeated ids
    # are found from a pass that reads no page text.
    from lsh_spark.warc import read_warc

    src = tmp_path / "batch"
    records = [
        dict(url="https://a.example/1", date=day(1), html=page("wapo-1")),
        dict(url="https://a.example/2", date=day(1), html=page("lwn-1")),
    ]
    write_warc(str(src / "a.warc.gz"), records)
    write_warc(str(src / "b.warc.gz"), records[1:])
    rows = {
        (r["url"], r["warc_file"].rsplit("/", 1)[1]): r
        for r in read_warc(spark, str(src)).collect()
    }
    assert sorted(rows) == [
        ("https://a.example/1", "a.warc.gz"),
        ("https://a.example/2", "a.warc.gz"),
        ("https://a.example/2", "b.warc.gz"),
    ]
    first, repeat = (
        rows["https://a.example/2", "a.warc.gz"],
        rows["https://a.example/2", "b.warc.gz"],
    )
    assert (
        first["id"] == record_id("https://a.example/2", day(1)) and first["reject_reason"] is None
    )
    assert repeat["id"] is None and repeat["text"]
    assert repeat["reject_reason"].startswith(
        f"duplicate_record: WARC-Record-ID {first['id']} at {repeat['warc_file']} offset 0 "
        f"was read at {first['warc_file']} offset {first['warc_offset']}"
    )


def test_a_failing_read_fails_the_task_instead_of_ending_the_file(tmp_path, monkeypatch):
    # A dropped connection in the middle of a file is not bad input: the task
    # fails (and Spark retries it) rather than rejecting the rest of the file.
    import pyarrow as pa

    from lsh_spark import warc

    path = tmp_path / "a.warc.gz"
    write_warc(
        str(path),
        [dict(url=f"https://a.example/{i}", date=day(1), html=page("ars-1")) for i in range(40)],
    )
    size = path.stat().st_size

    class Dropped(io.FileIO):
        def readinto(self, buffer):
            if self.tell() > size // 2:
                raise OSError("connection reset by peer")
            return super().readinto(buffer)

    monkeypatch.setattr(warc, "open_input", lambda name, endpoint=None: Dropped(name))
    monkeypatch.setattr(warc, "READ_BUFFER_BYTES", 1 << 16)
    run, _ = warc._extract_batches("text", warc.MAX_RECORD_BYTES, None)
    paths = pa.RecordBatch.from_pydict({"path": [str(path)]})
    with pytest.raises(OSError, match="connection reset"):
        list(run(iter([paths])))
    # Without the failure, the same function reads all 40 pages.
    monkeypatch.setattr(warc, "open_input", lambda name, endpoint=None: io.FileIO(name))
    (batch,) = run(iter([paths]))
    assert batch.num_rows == 40 and batch.column("reject_reason").null_count == 40
