r"""WARC, WARC.gz and WET crawl files as a corpus: one row per page.

The driver lists the files; the Python workers receive their paths (a
DataFrame of one row per file) and stream each file's records with FastWARC
(``ArchiveIterator``, gzip/zstd/lz4 detected from the bytes) from a file opened
through ``pyarrow.fs`` (local, HDFS, S3), so a task holds one record at a time,
never a whole file.  The main text of an HTML page is extracted with
Resiliparse (``extract_plain_text`` with ``main_content=True``, after encoding
detection); WET ``conversion`` records already hold plain text.

Each record becomes a row with ``id`` (its WARC-Record-ID), ``url``
(WARC-Target-URI), ``fetch_time`` (WARC-Date), ``warc_record_id``,
``content_digest`` (WARC-Payload-Digest, else WARC-Block-Digest), ``warc_file``,
``warc_offset`` and the text, plus two reasons:

* ``reject_reason`` for records that are bad input: a file that stops parsing
  or holds no record at all (``invalid_record``), a record cut short by the end
  of its file (``truncated_record``), a page larger than ``max_record_bytes``
  (``too_large``, never read into memory), a page whose extraction fails
  (``extract_failed``) or yields no text (``empty_text``), a record without
  WARC-Record-ID (``null_id``), a WARC-Record-ID seen earlier in the input
  (``duplicate_record``, e.g. the same file twice).  These go to ``rejects/``.
* ``skip_reason`` for records that are valid but not pages to deduplicate:
  ``request``/``metadata``/``warcinfo``/``revisit`` records, HTTP status other
  than 200, content types other than HTML.  They are counted in the report
  (``warc.skipped_by_reason``) and dropped.

``response`` records without an HTTP envelope whose WARC Content-Type is HTML
(as some archive exports write them) and ``resource`` records are read as the
page body itself.

Example
-------
:func:`read_warc` reads every file under a path; :func:`parse_records` parses one
file's bytes (:func:`parse_stream` a file object), here a WET file of one record:

>>> wet = (
...     b"WARC/1.0\r\nWARC-Type: conversion\r\nWARC-Record-ID: <urn:uuid:1>\r\n"
...     b"WARC-Target-URI: https://example.com/\r\nContent-Length: 5\r\n\r\nhello\r\n\r\n"
... )
>>> [(row["id"], row["url"], row["text"]) for row in parse_records(wet, "page.wet")]
[('<urn:uuid:1>', 'https://example.com/', 'hello')]
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Iterator
from datetime import timezone
from typing import BinaryIO

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.session import local_frame
from lsh_spark.store import input_files, open_input, s3_endpoint

# Rows and text characters per Arrow batch handed back to Spark: a worker holds
# at most one batch of extracted texts, whatever the size of the WARC file, and
# a batch stays far below Arrow's 2 GB column limit.
OUT_BATCH_ROWS = 512
OUT_BATCH_CHARS = 32 << 20
# Read buffer of a WARC file in a worker: one request per this many bytes on an
# object store.
READ_BUFFER_BYTES = 8 << 20
# The default of max_record_bytes for callers without a config.
MAX_RECORD_BYTES = 64 << 20
_HTML_TYPES = ("text/html", "application/xhtml+xml")

# Characters of a parser's or an extractor's message kept in a reject reason.
ERROR_MESSAGE_CHARS = 160
EXTRACT_MESSAGE_CHARS = 120


def warc_schema(text_col: str) -> T.StructType:
    return T.StructType(
        [
            T.StructField("id", T.StringType(), True),
            T.StructField("url", T.StringType(), True),
            T.StructField("fetch_time", T.TimestampType(), True),
            T.StructField("warc_record_id", T.StringType(), True),
            T.StructField("content_digest", T.StringType(), True),
            T.StructField("warc_file", T.StringType(), True),
            T.StructField("warc_offset", T.LongType(), True),
            T.StructField(text_col, T.StringType(), True),
            T.StructField("reject_reason", T.StringType(), True),
            T.StructField("skip_reason", T.StringType(), True),
        ]
    )


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def _html_text(body: bytes, charset: str | None) -> str:
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.encoding import detect_encoding
    from resiliparse.parse.html import HTMLTree

    tree = HTMLTree.parse_from_bytes(body, charset or detect_encoding(body))
    return extract_plain_text(tree, main_content=True)


def _decode_text(body: bytes, charset: str | None) -> str:
    from resiliparse.parse.encoding import bytes_to_str, detect_encoding

    return bytes_to_str(body, charset or detect_encoding(body))


def parse_records(
    data: bytes, file_name: str, max_record_bytes: int = MAX_RECORD_BYTES
) -> Iterator[dict]:
    """Rows (as dicts) for every record of one WARC/WET file's bytes; see
    :func:`parse_stream`."""
    return parse_stream(io.BytesIO(data), file_name, max_record_bytes)


def parse_stream(
    stream: BinaryIO, file_name: str, max_record_bytes: int = MAX_RECORD_BYTES
) -> Iterator[dict]:
    """Rows (as dicts) for every record of one WARC/WET file, read from ``stream``
    (seekable, for the records' offsets) one record at a time.

    Never raises on bad input: a file that stops parsing yields one reject row
    naming the file, the position and the parser's message; a file without any
    record (empty, or not a WARC file) yields one reject row too.
    """
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    base = {"warc_file": file_name}
    name = posixpath.basename(file_name)
    n = 0
    pos = 0
    try:
        for rec in ArchiveIterator(stream, record_types=WarcRecordType.any_type, parse_http=True):
            n += 1
            pos = int(rec.stream_pos)
            yield _record_row(rec, dict(base, warc_offset=pos), max_record_bytes)
    except Exception as exc:  # noqa: BLE001 - the rest of the file is unreadable
        msg = " ".join(str(exc).split())[:ERROR_MESSAGE_CHARS]
        yield dict(
            base,
            warc_offset=pos,
            reject_reason=(
                f"invalid_record: WARC parse error in {name} after "
                f"{n} records: {type(exc).__name__}: {msg}"
            ),
        )
        return
    if n == 0:
        yield dict(base, warc_offset=0, reject_reason=f"invalid_record: no WARC record in {name}")


def _record_row(rec, base: dict, max_record_bytes: int) -> dict:
    """The row of one record: its header fields plus its text, a ``skip_reason``
    or a ``reject_reason``.  Reads (or skips) the record's payload; a page larger
    than ``max_record_bytes`` is skipped over without being held."""
    headers = rec.headers
    rid = headers.get("WARC-Record-ID")
    date = rec.record_date
    if date is not None and date.tzinfo is None:
        date = date.replace(tzinfo=timezone.utc)
    row = dict(
        base,
        id=rid,
        warc_record_id=rid,
        url=headers.get("WARC-Target-URI"),
        fetch_time=date,
        content_digest=headers.get("WARC-Payload-Digest") or headers.get("WARC-Block-Digest"),
    )
    skip, kind, charset = _classify(rec)
    if kind is None:
        rec.reader.consume()
        return dict(row, skip_reason=skip)
    if rec.content_length > max_record_bytes:
        rec.reader.consume()
        return dict(
            row,
            reject_reason=(
                f"too_large: WARC record payload of {rec.content_length} bytes > "
                f"max_record_bytes {max_record_bytes}"
            ),
        )
    body = rec.reader.read()
    encoded = rec.is_http and rec.http_headers.get("Content-Encoding")
    if len(body) < rec.content_length and not encoded:
        return dict(
            row,
            reject_reason=(
                f"truncated_record: the file ends {rec.content_length - len(body)} "
                f"bytes into this record's {rec.content_length}-byte payload"
            ),
        )
    if rid is None:
        return dict(row, reject_reason="null_id: record has no WARC-Record-ID")
    try:
        text = _html_text(body, charset) if kind == "html" else _decode_text(body, None)
    except Exception as exc:  # noqa: BLE001 - any extractor failure is a reject
        msg = " ".join(str(exc).split())[:EXTRACT_MESSAGE_CHARS]
        return dict(row, reject_reason=f"extract_failed: {type(exc).__name__}: {msg}")
    if not text or not text.strip():
        return dict(row, reject_reason="empty_text: no text extracted from the page")
    return dict(row, text=text)


def _classify(rec) -> tuple[str | None, str | None, str | None]:
    """``(skip_reason, kind, charset)`` of a record: ``kind`` is ``"html"`` or
    ``"text"`` for a page to read, None (with a ``skip_reason``) otherwise."""
    rtype = str(rec.record_type)
    if rtype == "response" and rec.is_http:
        status = rec.http_headers.status_code
        ctype = _media_type(rec.http_content_type)
        if status != 200:
            return f"http_status: {status}", None, None
        if ctype not in _HTML_TYPES:
            return f"not_html: {ctype or 'no content type'}", None, None
        return None, "html", rec.http_charset
    if rtype in ("response", "resource"):
        ctype = _media_type(rec.headers.get("Content-Type"))
        if ctype not in _HTML_TYPES:
            return f"not_html: {ctype or 'no content type'}", None, None
        charset = rec.headers.get("Content-Type", "").partition("charset=")[2].strip()
        return None, "html", charset.strip('"') or None
    if rtype == "conversion":
        return None, "text", None
    return f"record_type: {rtype}", None, None


class _FailedReads(io.RawIOBase):
    """A seekable file (a ``pyarrow`` one) that remembers the error a read raised:
    FastWARC reports it like a parse error."""

    def __init__(self, raw):
        self.raw, self.error = raw, None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.raw.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self.raw.seek(offset, whence)

    def readinto(self, buffer) -> int:
        try:
            return self.raw.readinto(buffer)
        except OSError as exc:
            self.error = exc
            raise


def _extract_batches(text_col: str, max_record_bytes: int, endpoint: str | None):
    """The ``mapInArrow`` function that streams the records of the files named in
    its input's ``path`` column, and its output schema."""
    schema = warc_schema(text_col)
    arrow_schema = pa.schema(
        [
            pa.field("id", pa.string()),
            pa.field("url", pa.string()),
            pa.field("fetch_time", pa.timestamp("us", tz="UTC")),
            pa.field("warc_record_id", pa.string()),
            pa.field("content_digest", pa.string()),
            pa.field("warc_file", pa.string()),
            pa.field("warc_offset", pa.int64()),
            pa.field(text_col, pa.string()),
            pa.field("reject_reason", pa.string()),
            pa.field("skip_reason", pa.string()),
        ]
    )
    names = [f.name for f in schema.fields]

    def flush(rows: list[dict]) -> pa.RecordBatch:
        cols = {name: [r.get(name) for r in rows] for name in names}
        cols[text_col] = [r.get("text") for r in rows]
        return pa.RecordBatch.from_pydict(cols, schema=arrow_schema)

    def records(path: str) -> Iterator[dict]:
        with open_input(path, endpoint) as raw:
            source = _FailedReads(raw)
            stream = io.BufferedReader(source, READ_BUFFER_BYTES)
            for row in parse_stream(stream, path, max_record_bytes):
                # A read that failed (a dropped connection, a disk error) fails
                # the task, which Spark retries, instead of ending the file as
                # an invalid_record.
                if source.error is not None:
                    raise source.error
                yield row

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows: list[dict] = []
        chars = 0
        for batch in batches:
            for path in batch.column("path").to_pylist():
                for row in records(path):
                    rows.append(row)
                    chars += len(row.get("text") or "")
                    if len(rows) >= OUT_BATCH_ROWS or chars >= OUT_BATCH_CHARS:
                        yield flush(rows)
                        rows, chars = [], 0
        if rows:
            yield flush(rows)

    return run, schema


# Extracted corpora already written by this process, by input path: the
# pipeline reads its input twice (signatures, then deduped/), and extraction is
# the expensive part, so run_dedup writes it once and registers the copy here.
_EXTRACTED: dict[str, str] = {}


def register_extracted(input_path: str, parquet_path: str | None) -> None:
    if parquet_path is None:
        _EXTRACTED.pop(input_path, None)
    else:
        _EXTRACTED[input_path] = parquet_path


def extract_warc(
    spark: SparkSession,
    path: str,
    text_col: str = "text",
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> DataFrame:
    """Every record of the WARC/WET files under ``path``, with reject and skip reasons.

    The files are listed on the driver (a list that grows with the files, not
    the records); each task streams the records of its files.
    """
    files = input_files(spark, path)
    paths = local_frame(spark, [(f,) for f in files], "path string")
    fn, schema = _extract_batches(text_col, max_record_bytes, s3_endpoint(spark))
    return paths.mapInArrow(fn, schema)


def read_warc(
    spark: SparkSession,
    path: str,
    text_col: str = "text",
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> DataFrame:
    """The pages of ``path`` (skipped records dropped), as the pipeline's input;
    a WARC-Record-ID seen before is a ``duplicate_record`` reject."""
    done = _EXTRACTED.get(path)
    if done:
        pages = ids = spark.read.parquet(done)
    else:
        pages = extract_warc(spark, path, text_col, max_record_bytes)
        # The records' ids and places without their text, to find repeated ids
        # without extracting every page twice: with a limit of 0 bytes every
        # page is skipped over unread.
        ids = extract_warc(spark, path, text_col, max_record_bytes=0)
    return _reject_repeated_ids(*(_pages(df) for df in (pages, ids)))


def _pages(extracted: DataFrame) -> DataFrame:
    return extracted.filter(F.col("skip_reason").isNull()).drop("skip_reason")


def _reject_repeated_ids(pages: DataFrame, ids: DataFrame) -> DataFrame:
    """Reject every record of ``pages`` whose WARC-Record-ID an earlier one (by
    file name and offset) carries, e.g. the same file given twice: the reason
    names both places, and its ``id`` is null (ids are unique in the outputs).
    ``ids``: the same records' ``id``, ``warc_file`` and ``warc_offset``.

    The repeated ids alone (usually none; a few thousand for a file given
    twice) are broadcast to the pages' tasks, so the pages' text is never
    shuffled; finding them shuffles the ids only.
    """
    place = F.struct("warc_file", "warc_offset")
    repeated = (
        ids.filter(F.col("id").isNotNull())
        .groupBy("id")
        .agg(F.count(F.lit(1)).alias("_n"), F.min(place).alias("_first"))
        .filter(F.col("_n") > 1)
        .drop("_n")
    )
    df = pages.join(F.broadcast(repeated), "id", "left")
    later = F.col("_first").isNotNull() & (place != F.col("_first"))
    reason = F.format_string(
        "duplicate_record: WARC-Record-ID %s at %s offset %d was read at %s offset %d",
        F.col("id"),
        F.col("warc_file"),
        F.col("warc_offset"),
        F.col("_first.warc_file"),
        F.col("_first.warc_offset"),
    )
    return df.select(
        F.when(later, F.lit(None)).otherwise(F.col("id")).alias("id"),
        *[c for c in pages.columns if c not in ("id", "reject_reason")],
        F.coalesce(F.col("reject_reason"), F.when(later, reason)).alias("reject_reason"),
    )


def skipped_counts(extracted: DataFrame) -> dict[str, int]:
    """``{reason: records}`` of the skipped records, the 50 most frequent reasons."""
    rows = (
        extracted.filter(F.col("skip_reason").isNotNull())
        .groupBy("skip_reason")
        .agg(F.count(F.lit(1)).alias("n"))
        .orderBy(F.col("n").desc(), "skip_reason")
        .limit(50)
        .collect()
    )
    return {r["skip_reason"]: int(r["n"]) for r in rows}
