"""``lsh-spark inspect OUT --input CORPUS``: what a run merged and why, in one
self-contained HTML file (no server, no files beside it: plots are embedded).

For a dedup run (the command's output, or :meth:`lsh_spark.api.Duplicates.inspect`
in memory) the page shows the largest clusters with their kept document and a
few members, a sample of removed documents each beside the document kept in its
place (the words that differ highlighted, the exact Jaccard of their shingle
sets), the similarity histogram, the S-curve, the counts per stage and the
rejects by reason.  For a crawl batch it shows a sample of its duplicates beside
the document kept in their place; for a decontamination run, a sample of
removed documents beside the reference item that matched them.  Only a bounded
number of documents is read back to the driver (:data:`LARGEST_CLUSTERS`,
:data:`MEMBERS_SHOWN`, :data:`REMOVED_SAMPLE`), whatever the corpus size.
"""

from __future__ import annotations

import base64
import difflib
import html
import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lsh_spark.config import VECTOR_METHODS, ConfigError, DedupConfig, recorded_tokens
from lsh_spark.errors import LshSparkError
from lsh_spark.readers import read_corpus
from lsh_spark.removals import chosen_texts, shingled, with_jaccard
from lsh_spark.session import local_frame
from lsh_spark.store import FileSystem

LARGEST_CLUSTERS = 10
MEMBERS_SHOWN = 4  # besides the kept document, per large cluster
REMOVED_SAMPLE = 20
PAIR_WORDS = 180  # of each document of a removed pair shown
SHOWN_CHARS = 20_000  # of a document read back to the driver, at most
CLUSTER_TEXT_CHARS = 400  # of a large cluster's kept document


def recorded_config(report: dict[str, Any]) -> DedupConfig:
    """The config a dedup output was written with, from its ``report.json``; the
    words as it cut them (an output of lsh-spark 0.2.0 records no tokens: ``space``)."""
    params = report["parameters"]
    return DedupConfig.from_mapping({**params, "tokens": recorded_tokens(params)}, "report.json")


class Page(str):
    """The page's HTML, a string that notebooks (Jupyter, Databricks) render inline
    (in an ``iframe``, so that the page's style stays inside it)."""

    def _repr_html_(self) -> str:
        return (
            f'<iframe srcdoc="{html.escape(self, quote=True)}" '
            'style="width:100%;height:900px;border:1px solid #ddd"></iframe>'
        )


def inspect_output(
    spark: SparkSession,
    output: str,
    source: str | DataFrame | None,
    html_path: str | None = None,
) -> dict[str, Any]:
    """Write the inspection page of the output ``output`` of a dedup run, a crawl
    batch or a decontamination run (whose input was ``source``: a path or a
    DataFrame, such as a catalog table; None for a decontamination run, whose
    ``removed/`` holds the texts) to ``html_path`` (default
    ``OUT/inspect.html``); return what it shows in numbers."""
    fs = FileSystem(spark, output)
    report = _complete_report(fs, output)
    if source is None and "references" not in report:
        raise ConfigError("--input or --input-table: required (the run's input, for the texts)")
    if "batch_id" in report:
        page, shown = crawl_page(spark, output, report, source)
    elif "references" in report:
        page, shown = decontam_page(spark, output, report)
    else:
        clusters = spark.read.parquet(f"{output}/clusters")
        page, shown = dedup_page(spark, output, report, clusters, source, saved_s_curve(fs, output))
    target = html_path or f"{output}/inspect.html"
    FileSystem(spark, target).write_text(target, page)
    return {"html": target, **shown}


# What each kind of output must hold (a committed dataset) to be inspected.
COMPLETE_MARK = {"dedup": "clusters", "crawl": "duplicates", "decontaminate": "matches"}


def _complete_report(fs: FileSystem, output: str) -> dict[str, Any]:
    """The output's report; a :class:`ConfigError` unless it is a complete output
    of a dedup run, a crawl batch or a decontamination run."""
    report = None
    if fs.exists(f"{output}/report.json"):
        report = json.loads(fs.read_text(f"{output}/report.json"))
    kind = (
        None
        if report is None
        else "crawl"
        if "batch_id" in report
        else "decontaminate"
        if "references" in report
        else "dedup"
    )
    if kind is None or not fs.exists(f"{output}/{COMPLETE_MARK[kind]}/_SUCCESS"):
        raise ConfigError(
            f"OUT: {output} is not a complete dedup output (report.json, clusters/), "
            "crawl batch output (duplicates/) or decontamination output (matches/)"
        )
    return report


def dedup_page(
    spark: SparkSession,
    title: str,
    report: dict[str, Any],
    clusters: DataFrame,
    source: str | DataFrame,
    s_curve: bytes | None = None,
) -> tuple[Page, dict[str, int]]:
    """The page of a dedup run from its ``report``, its ``clusters`` (``clusters/``
    or the API's) and its input ``source``; what it shows in numbers."""
    cfg = recorded_config(report)
    if cfg.method in VECTOR_METHODS:
        raise ConfigError(f"OUT: a --method {cfg.method} output holds vectors, not texts")
    largest = [
        r.asDict()
        for r in clusters.filter("keep AND cluster_size > 1")
        .orderBy(F.desc("cluster_size"), "cluster_id")
        .limit(LARGEST_CLUSTERS)
        .select("cluster_id", "cluster_size", "id")
        .collect()
    ]
    members = _members(clusters, [c["cluster_id"] for c in largest])
    removed = [
        r.asDict()
        for r in clusters.filter(~F.col("keep"))
        .orderBy(F.xxhash64(F.col("id").cast("string")), "id")
        .limit(REMOVED_SAMPLE)
        .select("id", "cluster_id")
        .collect()
    ]
    kept_of = {
        r.cluster_id: r.id
        for r in clusters.filter(
            F.col("keep") & F.col("cluster_id").isin(_ids(removed, "cluster_id"))
        )
        .select("cluster_id", "id")
        .collect()
    }
    wanted = {c["id"] for c in largest} | {m["id"] for m in members}
    wanted |= {r["id"] for r in removed} | set(kept_of.values())
    shingled = _shingled(spark, source, cfg, wanted)
    docs = _texts(shingled)
    links = [(kept_of.get(r["cluster_id"]), r["id"]) for r in removed]
    scores = _jaccards(spark, shingled, [(a, b) for a, b in links if a in docs and b in docs])
    pairs = [(docs[a], docs[b], scores[(a, b)]) for a, b in links if (a, b) in scores]
    shingled.unpersist()
    body = _removed_section(pairs) + _largest_section(largest, members, docs)
    page = render(title, report, body, s_curve or _s_curve_of(cfg))
    shown = {"largest_clusters": len(largest), "removed_shown": len(pairs)}
    return page, {**shown, "documents_read": len(docs)}


def crawl_page(
    spark: SparkSession, output: str, report: dict[str, Any], source: str | DataFrame
) -> tuple[Page, dict[str, int]]:
    """The page of a crawl batch: a sample of its duplicates, each beside the
    document kept in its place (a batch document, or an indexed one whose text
    the index does not hold), with the Jaccard ``duplicates/`` records."""
    cfg = recorded_config(report)
    removed = [
        r.asDict()
        for r in spark.read.parquet(f"{output}/duplicates")
        .orderBy(F.xxhash64(F.col("id").cast("string")), "id")
        .limit(REMOVED_SAMPLE)
        .collect()
    ]
    wanted = {r["id"] for r in removed}
    wanted |= {r["duplicate_of"] for r in removed if r["duplicate_of_source"] == "batch"}
    # The Jaccards are in duplicates/: only the texts are read, nothing shingled.
    docs = _texts(chosen_texts(spark, source, cfg, sorted(wanted, key=str)))
    pairs = []
    for r in removed:
        kept = docs.get(r["duplicate_of"]) or {
            "id": r["duplicate_of"],
            "text": "(indexed by an earlier batch: the index keeps no text)",
        }
        if r["id"] in docs:
            pairs.append((kept, docs[r["id"]], r["jaccard"]))
    body = _removed_section(pairs, "kept")
    page = render(output, report, body, _s_curve_of(cfg))
    return page, {"removed_shown": len(pairs), "documents_read": len(docs)}


def decontam_page(
    spark: SparkSession, output: str, report: dict[str, Any]
) -> tuple[Page, dict[str, int]]:
    """The page of a decontamination run: a sample of removed documents (their
    text from ``removed/``), each beside the reference item that matched it,
    with the match's kind and score."""
    params = report["parameters"]
    matches = spark.read.parquet(f"{output}/matches")
    first = F.row_number().over(Window.partitionBy("id").orderBy(F.desc("score"), "reference_id"))
    shown = (
        matches.select("*", first.alias("_n"))
        .filter("_n = 1")
        .orderBy(F.xxhash64(F.col("id").cast("string")), "id")
        .limit(REMOVED_SAMPLE)
        .collect()
    )
    id_col, text_col = params["id_col"], params["text_col"]
    removed = spark.read.parquet(f"{output}/removed")
    texts = {
        r[0]: r[1] or ""
        for r in removed.filter(F.col(id_col).isin(sorted({m.id for m in shown}, key=str)))
        .select(id_col, F.substring(text_col, 1, SHOWN_CHARS))
        .collect()
    }
    refs = _reference_texts(spark, report, shown)
    pairs = []
    for m in shown:
        ref = refs.get((m.reference_source, m.reference_id), "(reference text not read)")
        label = f"{m.reference_source}: {m.reference_id} ({m.kind})"
        pairs.append(
            ({"id": label, "text": ref}, {"id": m.id, "text": texts.get(m.id, "")}, m.score)
        )
    body = _removed_section(pairs, "reference", "score")
    return render(output, report, body, None), {"removed_shown": len(pairs)}


def _reference_texts(spark: SparkSession, report: dict[str, Any], shown: list) -> dict:
    """The texts of the reference items of ``shown`` whose source is a readable
    path (the command line names references by path; the API by name)."""
    params = report["parameters"]
    cfg = DedupConfig(
        id_col=params["reference_id_col"],
        text_col=params["reference_text_col"],
        format=params.get("reference_format"),
    )
    out: dict = {}
    for source in sorted({m.reference_source for m in shown}):
        ids = sorted({m.reference_id for m in shown if m.reference_source == source}, key=str)
        try:
            raw, _ = read_corpus(spark, source, cfg)
            rows = raw.filter(F.col("id").cast("string").isin([str(i) for i in ids]))
            texts = rows.select("id", F.substring(cfg.text_col, 1, SHOWN_CHARS)).collect()
        except LshSparkError:  # a name, not a path: the API's references
            continue
        out.update({(source, str(r[0])): r[1] or "" for r in texts})
    return out


def _texts(shingled: DataFrame) -> dict[Any, dict]:
    return {
        r.id: {"id": r.id, "text": r.text or ""}
        for r in shingled.select("id", F.substring("text", 1, SHOWN_CHARS).alias("text")).collect()
    }


def _ids(rows: list[dict], key: str) -> list[Any]:
    return sorted({r[key] for r in rows}, key=str)


def _members(clusters: DataFrame, cluster_ids: list[Any]) -> list[dict]:
    """Up to :data:`MEMBERS_SHOWN` removed members of each of ``cluster_ids``."""
    if not cluster_ids:
        return []
    rank = F.row_number().over(Window.partitionBy("cluster_id").orderBy("id"))
    rows = (
        clusters.filter(~F.col("keep") & F.col("cluster_id").isin(cluster_ids))
        .select("cluster_id", "id", rank.alias("rank"))
        .filter(F.col("rank") <= MEMBERS_SHOWN)
        .collect()
    )
    return [r.asDict() for r in rows]


def _shingled(
    spark: SparkSession, source: str | DataFrame, cfg: DedupConfig, ids: set
) -> DataFrame:
    """``(id, text, shingles)`` of the input documents ``ids`` (a few), cached:
    read for the texts and the Jaccards."""
    return shingled(spark, source, cfg, sorted(ids, key=str)).cache()


def _jaccards(
    spark: SparkSession, shingled: DataFrame, pairs: list[tuple[Any, Any]]
) -> dict[tuple[Any, Any], float]:
    """The exact Jaccard of each ``(kept, removed)`` pair of ids, computed by Spark
    (a document's shingle set never travels to the driver)."""
    if not pairs:
        return {}
    id_type = shingled.schema["id"].dataType.simpleString()
    wanted = local_frame(spark, pairs, f"a {id_type}, b {id_type}")
    rows = with_jaccard(wanted, shingled, "a", "b").collect()
    return {(r.a, r.b): float(r.jaccard) for r in rows}


def saved_s_curve(fs: FileSystem, output: str) -> bytes | None:
    path = f"{output}/s_curve.png"
    return fs.read_bytes(path) if fs.exists(path) else None


def _s_curve_of(cfg: DedupConfig) -> bytes:
    from lsh_spark.advisor import s_curve_png

    return s_curve_png(cfg)


# -- the page ----------------------------------------------------------------------
def highlight_differences(kept: str, removed: str) -> tuple[str, str]:
    """Both texts as HTML, the words not in the other's matching run in ``<mark>``.

    >>> highlight_differences("the cat sat", "the dog sat")
    ('the <mark>cat</mark> sat', 'the <mark>dog</mark> sat')
    """
    a, b = kept.split(), removed.split()
    out_a: list[str] = []
    out_b: list[str] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        for words, lo, hi, out in ((a, i1, i2, out_a), (b, j1, j2, out_b)):
            if hi > lo:
                text = html.escape(" ".join(words[lo:hi]))
                out.append(text if op == "equal" else f"<mark>{text}</mark>")
    return " ".join(out_a), " ".join(out_b)


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + " …"


def _words(text: str, n: int = PAIR_WORDS) -> str:
    """The first ``n`` words: both texts of a pair cut alike, so an exact copy
    shows no difference."""
    words = text.split()
    return " ".join(words[:n]) + (" …" if len(words) > n else "")


def _histogram_png(report: dict[str, Any]) -> bytes | None:
    """The report's similarity (or distance) histogram as a bar chart."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = next(
        (k for k in report if k.endswith("_histogram") and k != "cluster_size_histogram"), None
    )
    bins = report.get(key) or []
    if not bins:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    xs = [b["from"] for b in bins]
    width = min((b - a for a, b in zip(xs, xs[1:], strict=False)), default=0.05) * 0.9
    ax.bar(xs, [b["pairs"] for b in bins], width=width, align="edge", color="#1f5fbf")
    ax.set_xlabel(key.removesuffix("_histogram").replace("_", " "))
    ax.set_ylabel("pairs written")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _img(png: bytes | None, alt: str) -> str:
    if png is None:
        return f"<p>No {html.escape(alt)}.</p>"
    data = base64.b64encode(png).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _table(rows: list[tuple[Any, Any]], head: tuple[str, str]) -> str:
    rows = rows or [("none", "")]
    cells = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>" for k, v in rows
    )
    return f"<table><tr><th>{head[0]}</th><th>{head[1]}</th></tr>{cells}</table>"


STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1150px;color:#222}
h1{font-size:1.5em} h2{margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0} td,th{border:1px solid #ddd;padding:.2em .6em;
text-align:left;vertical-align:top} .pair{display:grid;grid-template-columns:1fr 1fr;gap:1em;
margin:1em 0;padding:.5em;border:1px solid #ddd} .doc{font-size:.9em;white-space:pre-wrap}
mark{background:#ffd966} .meta{color:#555;font-size:.85em}
.grid{display:flex;gap:2em;align-items:flex-start;flex-wrap:wrap}
"""


def render(output: str, report: dict[str, Any], body: list[str], s_curve: bytes | None) -> Page:
    """The page's HTML (every value escaped): the counts, ``body`` (the sections
    of documents), the histogram and the S-curve."""
    e = html.escape
    counts = report.get("counts", {})
    threshold = report.get("parameters", {}).get("threshold")
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>lsh-spark inspect: {e(output)}"
        f"</title><style>{STYLE}</style></head><body>",
        f"<h1>lsh-spark: what was merged in {e(output)}</h1>",
        f"<p class='meta'>input {e(str(report.get('input_path')))} · lsh-spark "
        f"{e(str(report.get('lsh_spark_version')))} · threshold {e(str(threshold))}</p>",
        "<h2 id='counts'>Counts</h2><div class='grid'>",
        _table(
            sorted((k, v) for k, v in counts.items() if not isinstance(v, dict)), ("count", "value")
        ),
        _table(sorted(report.get("seconds", {}).items()), ("stage", "seconds")),
        _table(
            sorted(report.get("rejects_by_reason", {}).items()), ("rejected because", "records")
        ),
        "</div>",
        *body,
        "<h2 id='plots'>Similarity histogram and S-curve</h2><div class='grid'>",
        _img(_histogram_png(report), "similarity histogram"),
        _img(s_curve, "S-curve"),
        "</div></body></html>",
    ]
    return Page("\n".join(parts))


def _removed_section(
    pairs: list[tuple[dict, dict, float]], left: str = "kept", measure: str = "Jaccard"
) -> list[str]:
    """Each removed document beside the ``left`` document (the kept one, or the
    matching reference item), the words that differ highlighted."""
    e = html.escape
    parts = [
        f"<h2 id='removed'>Removed documents ({len(pairs)} sampled)</h2>",
        f"<p class='meta'>Each beside the {left} document, the words that differ highlighted."
        + (
            " A document can join a cluster through other members, so its Jaccard with the "
            "kept one may be below the threshold (unless the clusters are anchored)."
            if left == "kept"
            else ""
        )
        + "</p>",
    ]
    for kept, gone, score in pairs:
        a, b = highlight_differences(_words(kept["text"]), _words(gone["text"]))
        parts.append(
            f"<div class='pair'><div><p class='meta'>{left} {e(str(kept['id']))}</p>"
            f"<div class='doc'>{a}</div></div><div><p class='meta'>removed {e(str(gone['id']))}"
            f" · {measure} with the {left} document <b class='jaccard'>{score:.3f}</b></p>"
            f"<div class='doc'>{b}</div></div></div>"
        )
    return parts


def _largest_section(largest: list[dict], members: list[dict], docs: dict) -> list[str]:
    e = html.escape
    parts = ["<h2 id='largest'>Largest clusters</h2>"]
    if not largest:
        parts.append("<p>No duplicate clusters.</p>")
    for c in largest:
        kept = docs.get(c["id"], {"text": "(not found in the input)"})
        shown = sorted(
            (m for m in members if m["cluster_id"] == c["cluster_id"]), key=lambda m: m["rank"]
        )
        parts.append(
            f"<h3>cluster {e(str(c['cluster_id']))}: {c['cluster_size']} documents</h3>"
            f"<p class='meta'>kept: {e(str(c['id']))}</p>"
            f"<div class='doc'>{e(_cut(kept['text'], CLUSTER_TEXT_CHARS))}</div>"
            f"<p class='meta'>removed, first {len(shown)} by id: "
            + ", ".join(e(str(m["id"])) for m in shown)
            + "</p>"
        )
    return parts
