"""``lsh-spark inspect OUT --input CORPUS``: what a dedup run merged and why, in one
self-contained HTML file (no server, no files beside it: plots are embedded).

The page shows the largest clusters with their kept document and a few members,
a sample of removed documents each beside the document kept in its place (the
words that differ highlighted, the exact Jaccard of their shingle sets), the
similarity histogram, the S-curve, the counts per stage and the rejects by
reason.  Only a bounded number of documents is read back to the driver
(:data:`LARGEST_CLUSTERS`, :data:`MEMBERS_SHOWN`, :data:`REMOVED_SAMPLE`),
whatever the corpus size.
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
from lsh_spark.readers import read_corpus
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


def inspect_output(
    spark: SparkSession, output: str, input_path: str, html_path: str | None = None
) -> dict[str, Any]:
    """Write the inspection page of the dedup output ``output`` (whose input was
    ``input_path``) to ``html_path`` (default ``OUT/inspect.html``); return what
    it shows in numbers."""
    fs = FileSystem(spark, output)
    if not fs.exists(f"{output}/report.json") or not fs.exists(f"{output}/clusters/_SUCCESS"):
        raise ConfigError(f"OUT: {output} is not a complete dedup output (report.json, clusters/)")
    report = json.loads(fs.read_text(f"{output}/report.json"))
    cfg = recorded_config(report)
    if cfg.method in VECTOR_METHODS:
        raise ConfigError(f"OUT: a --method {cfg.method} output holds vectors, not texts")
    clusters = spark.read.parquet(f"{output}/clusters")
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
    shingled = _shingled(spark, input_path, cfg, sorted(wanted, key=str))
    docs = {
        r.id: {"id": r.id, "text": r.text or ""}
        for r in shingled.select("id", F.substring("text", 1, SHOWN_CHARS).alias("text")).collect()
    }
    links = [(kept_of.get(r["cluster_id"]), r["id"]) for r in removed]
    scores = _jaccards(spark, shingled, [(a, b) for a, b in links if a in docs and b in docs])
    pairs = [(docs[a], docs[b], scores[(a, b)]) for a, b in links if (a, b) in scores]
    shingled.unpersist()
    page = render(output, report, largest, members, pairs, docs, _s_curve(fs, output, cfg))
    target = html_path or f"{output}/inspect.html"
    FileSystem(spark, target).write_text(target, page)
    return {
        "html": target,
        "largest_clusters": len(largest),
        "removed_shown": len(pairs),
        "documents_read": len(docs),
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


def _shingled(spark: SparkSession, input_path: str, cfg: DedupConfig, ids: list[Any]) -> DataFrame:
    """``(id, text, shingles)`` of the input documents ``ids``, the shingle sets as
    the run computed them (cached: read for the texts and the Jaccards)."""
    from lsh_spark.api import shingles

    raw, _ = read_corpus(spark, input_path, cfg)
    chosen = raw.filter(F.col("id").isin(ids)).select("id", F.col(cfg.text_col).alias("text"))
    return shingles(
        chosen, "text", cfg.shingle, cfg.shingle_k, cfg.seed, tokens=cfg.token_mode
    ).cache()


def _jaccards(
    spark: SparkSession, shingled: DataFrame, pairs: list[tuple[Any, Any]]
) -> dict[tuple[Any, Any], float]:
    """The exact Jaccard of each ``(kept, removed)`` pair of ids, computed by Spark
    (a document's shingle set never travels to the driver)."""
    if not pairs:
        return {}
    id_type = shingled.schema["id"].dataType.simpleString()
    wanted = local_frame(spark, pairs, f"a {id_type}, b {id_type}")
    a = shingled.select(F.col("id").alias("a"), F.col("shingles").alias("sa"))
    b = shingled.select(F.col("id").alias("b"), F.col("shingles").alias("sb"))
    common = F.size(F.array_intersect("sa", "sb"))
    union = F.size(F.array_union("sa", "sb"))
    rows = (
        wanted.join(a, "a")
        .join(b, "b")
        .select("a", "b", F.when(union > 0, common / union).otherwise(1.0).alias("j"))
        .collect()
    )
    return {(r.a, r.b): float(r.j) for r in rows}


def _s_curve(fs: FileSystem, output: str, cfg: DedupConfig) -> bytes:
    path = f"{output}/s_curve.png"
    if fs.exists(path):
        return fs.read_bytes(path)
    from lsh_spark.advise import s_curve_png

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


def render(
    output: str,
    report: dict[str, Any],
    largest: list[dict],
    members: list[dict],
    pairs: list[tuple[dict, dict, float]],
    docs: dict[Any, dict],
    s_curve: bytes,
) -> str:
    """The page's HTML (every value escaped)."""
    e = html.escape
    counts = report.get("counts", {})
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>lsh-spark inspect: {e(output)}"
        f"</title><style>{STYLE}</style></head><body>",
        f"<h1>lsh-spark: what was merged in {e(output)}</h1>",
        f"<p class='meta'>input {e(str(report.get('input_path')))} · lsh-spark "
        f"{e(str(report.get('lsh_spark_version')))} · threshold "
        f"{e(str(report.get('parameters', {}).get('threshold')))}</p>",
        "<h2 id='counts'>Counts</h2><div class='grid'>",
        _table(sorted(counts.items()), ("count", "value")),
        _table(sorted(report.get("seconds", {}).items()), ("stage", "seconds")),
        _table(
            sorted(report.get("rejects_by_reason", {}).items()), ("rejected because", "records")
        ),
        "</div>",
    ]
    parts += _removed_section(pairs)
    parts += _largest_section(largest, members, docs)
    parts += [
        "<h2 id='plots'>Similarity histogram and S-curve</h2><div class='grid'>",
        _img(_histogram_png(report), "similarity histogram"),
        _img(s_curve, "S-curve"),
        "</div></body></html>",
    ]
    return "\n".join(parts)


def _removed_section(pairs: list[tuple[dict, dict, float]]) -> list[str]:
    e = html.escape
    parts = [
        f"<h2 id='removed'>Removed documents ({len(pairs)} sampled)</h2>",
        "<p class='meta'>Each beside the document kept in its cluster, the words that differ "
        "highlighted. A document can join a cluster through other members, so its Jaccard "
        "with the kept one may be below the threshold.</p>",
    ]
    for kept, gone, score in pairs:
        a, b = highlight_differences(_words(kept["text"]), _words(gone["text"]))
        parts.append(
            f"<div class='pair'><div><p class='meta'>kept {e(str(kept['id']))}</p>"
            f"<div class='doc'>{a}</div></div><div><p class='meta'>removed {e(str(gone['id']))}"
            f" · Jaccard with the kept document <b class='jaccard'>{score:.3f}</b></p>"
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
