"""Crawl batches for the tests: WARC.gz files written with warcio from the
bundled real pages (``tests/data/pages``, Mozilla Readability test fixtures,
Apache-2.0).  Near copies change a few words of the article text."""

from __future__ import annotations

import gzip
import io
import os
import re
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
PAGES = os.path.join(HERE, "data", "pages")


def page(name: str) -> bytes:
    with gzip.open(os.path.join(PAGES, name + ".html.gz")) as fh:
        return fh.read()


def near_copy(html: bytes, edits: int = 4) -> bytes:
    """The page with ``edits`` occurrences of ' the ' inside <p> text replaced."""
    count = 0

    def edit(m: re.Match) -> bytes:
        nonlocal count
        if count >= edits:
            return m.group(0)
        count += 1
        return m.group(0).replace(b" the ", b" this ", 1)

    out = re.sub(rb"<p[ >][^<]{0,400}? the ", edit, html)
    assert count == edits, f"only {count} edits possible"
    return out


def record_id(url: str, date: str) -> str:
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, url + '@' + date)}>"


def write_warc(path: str, records: list[dict]) -> None:
    """Write ``records`` ({url, date, html | status | kind}) as one WARC.gz file.

    ``kind`` is 'response' (default), 'request' or 'truncated' (a response whose
    gzip member is cut short, which ends the file's readable part).
    """
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True)
    for r in records:
        kind = r.get("kind", "response")
        headers = {"WARC-Date": r["date"], "WARC-Record-ID": record_id(r["url"], r["date"])}
        if kind == "request":
            http = StatusAndHeaders(
                "GET / HTTP/1.1", [("Host", "example.org")], is_http_request=True
            )
            rec = writer.create_warc_record(
                r["url"],
                "request",
                payload=io.BytesIO(b""),
                http_headers=http,
                warc_headers_dict=headers,
            )
        else:
            status = r.get("status", 200)
            http = StatusAndHeaders(
                f"{status} {'OK' if status == 200 else 'Not Found'}",
                [("Content-Type", r.get("type", "text/html; charset=utf-8"))],
                protocol="HTTP/1.1",
            )
            rec = writer.create_warc_record(
                r["url"],
                "response",
                payload=io.BytesIO(r.get("html", b"")),
                http_headers=http,
                warc_headers_dict=headers,
            )
        writer.write_record(rec)
        if kind == "truncated":
            data = buf.getvalue()
            buf = io.BytesIO(data[: len(data) - 200])
            writer = WARCWriter(buf, gzip=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(buf.getvalue())


def day(n: int, hour: int = 3) -> str:
    return f"2026-11-{n:02d}T{hour:02d}:00:00Z"


def batches(root: str) -> dict[str, str]:
    """Three nightly batches under ``root``; returns {name: directory}.

    batch 1 (day 10): five articles (two sites with several pages each), a
      mirror (exact copy under another URL, same batch), a 404, a request record,
      a non-HTML response and a page with no text.
    batch 2 (day 11): an exact copy of a batch-1 page, a near copy of another,
      a second nytimes article (same template, different article: new), a new
      page and a within-batch near pair (the copy fetched two hours later).
    batch 3 (day 12): a near copy of the batch-2 nytimes article, a third
      nytimes article, a new page, and a copy of a batch-1 page whose fetch time
      is older than the indexed one (supersedes it with --keep oldest).
    """
    u = "https://news.example/"
    b1 = [
        dict(url=u + "nyt/1", date=day(10), html=page("nytimes-1")),
        dict(url=u + "wapo/1", date=day(10), html=page("wapo-1")),
        dict(url=u + "medium/1", date=day(10), html=page("medium-1")),
        dict(url=u + "lemonde/1", date=day(10), html=page("lemonde-1")),
        dict(url=u + "ars/1", date=day(10), html=page("ars-1")),
        dict(url="https://mirror.example/nyt/1", date=day(10), html=page("nytimes-1")),
        dict(url=u + "gone", date=day(10), status=404, html=b"<html>gone</html>"),
        dict(url=u + "nyt/1", date=day(10), kind="request"),
        dict(url=u + "feed.json", date=day(10), type="application/json", html=b"{}"),
        dict(url=u + "blank", date=day(10), html=b"<html><body><script>x()</script></body></html>"),
    ]
    b2 = [
        dict(url="https://copy.example/wapo-1", date=day(11), html=page("wapo-1")),
        dict(url="https://copy.example/medium-1", date=day(11), html=near_copy(page("medium-1"))),
        dict(url=u + "nyt/2", date=day(11), html=page("nytimes-2")),
        dict(url=u + "moz/1", date=day(11), html=page("mozilla-1")),
        dict(url=u + "wapo/2", date=day(11), html=page("wapo-2")),
        dict(url="https://copy.example/wapo-2", date=day(11, 5), html=near_copy(page("wapo-2"))),
    ]
    b3 = [
        dict(url="https://copy.example/nyt-2", date=day(12), html=near_copy(page("nytimes-2"))),
        dict(url=u + "nyt/3", date=day(12), html=page("nytimes-3")),
        dict(url=u + "lwn/1", date=day(12), html=page("lwn-1")),
        dict(
            url="https://archive.example/ars-1",
            date="2026-11-01T00:00:00Z",
            html=near_copy(page("ars-1"), 2),
        ),
    ]
    out = {}
    for name, recs in (("batch-1", b1), ("batch-2", b2), ("batch-3", b3)):
        d = os.path.join(root, name)
        half = len(recs) // 2
        write_warc(os.path.join(d, "crawl-00000.warc.gz"), recs[:half])
        write_warc(os.path.join(d, "crawl-00001.warc.gz"), recs[half:])
        out[name] = d
    return out
