"""What one batch's index lookup reads as the history grows, against a full scan.

    python bench/index_lookup.py --work bench/out/index-lookup [--sizes 250000,1000000,4000000]

For each history size N the script writes one index segment of N synthetic
documents through ``CrawlIndex.write_segment`` (the crawl's own writer: range
partitioned, sorted, small row groups): ``docs`` with a 50-value shingle set
each (about 500 bytes per document) and ``bands`` with 16 band keys each.  It then
looks up what a nightly batch of ``--batch`` documents would: ``16 x --batch``
band keys, of which ``--matches`` documents' keys are in the index, and the
``--matches`` documents they lead to, through ``CrawlIndex.lookup`` (what
``jobs/crawl_dedup.py`` runs), and compares the bytes read with those of a scan
of the same tables (the peer: what every batch read before the index was range
partitioned).  Bytes are Hadoop FileSystem statistics in one ``local[2]``
session.  Writes ``index_lookup.json`` under ``--work``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from lsh_spark.config import DedupConfig  # noqa: E402
from lsh_spark.index import (  # noqa: E402
    CrawlIndex,
    Manifest,
    doc_key,
    index_params,
    segment_entry,
)

BANDS = 16
SHINGLES = 50


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True)
    p.add_argument("--sizes", default="250000,1000000,4000000")
    p.add_argument("--batch", type=int, default=1000, help="documents in the batch")
    p.add_argument(
        "--matches", type=int, default=500, help="batch documents with a near copy in the index"
    )
    p.add_argument("--driver-memory", default="6g")
    args = p.parse_args()
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench index_lookup")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.parquet.compression.codec", "zstd")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    stats = spark.sparkContext._jvm.org.apache.hadoop.fs.FileSystem

    def read_bytes() -> int:
        return sum(int(s.getBytesRead()) for s in stats.getAllStatistics())

    def measure(df) -> tuple[int, float, int]:
        """(bytes read, seconds, rows) of reading every column of ``df`` once."""
        b0, t0 = read_bytes(), time.perf_counter()
        n = (
            df.groupBy()
            .agg(F.count(F.lit(1)).alias("n"), *[F.count(c).alias(c) for c in df.columns])
            .first()["n"]
        )
        return read_bytes() - b0, time.perf_counter() - t0, n

    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        root = os.path.join(args.work, f"index-{n}")
        index = CrawlIndex(spark, root)
        ids = spark.range(n).select(F.format_string("page-%09d", "id").alias("id"))
        docs = ids.select(
            doc_key(F.col("id")).alias("doc"),
            "id",
            F.lit("b-0").alias("batch_id"),
            F.concat(F.lit("https://example.org/"), "id").alias("url"),
            F.lit(None).cast("timestamp").alias("fetch_time"),
            F.lit(1).alias("added_version"),
            F.lit(1000).alias("text_len"),
            F.transform(F.sequence(F.lit(1), F.lit(SHINGLES)), lambda i: F.xxhash64("id", i)).alias(
                "shingles"
            ),
            F.lit(None).cast("string").alias("content_digest"),
            F.lit(None).cast("binary").alias("text_hash"),
            F.lit(SHINGLES).alias("num_shingles"),
        )
        bands = ids.select(
            F.explode(F.sequence(F.lit(0), F.lit(BANDS - 1))).alias("b"), "id"
        ).select(F.xxhash64("b", "id").alias("bucket"), doc_key(F.col("id")).alias("doc"))
        removed = spark.createDataFrame([], "doc bigint, id string")
        t0 = time.perf_counter()
        name = index.new_segment_name(1)
        entry = index.write_segment(name, docs, bands, removed, n * 700)
        index.commit(
            None,
            Manifest(
                version=1,
                params=index_params(DedupConfig()),
                segments=[segment_entry(entry, 1, "b-0", "batch")],
            ),
        )
        write_s = time.perf_counter() - t0
        manifest = index.current()

        # The batch: `matches` documents whose band keys are in the index (spread
        # over the key space), the others with keys that are not.
        step = max(1, n // args.matches)
        hit_ids = spark.range(0, step * args.matches, step).select(
            F.format_string("page-%09d", "id").alias("id")
        )
        new_ids = spark.range(args.batch - args.matches).select(
            F.format_string("new-%09d", "id").alias("id")
        )
        batch_keys = (
            hit_ids.unionByName(new_ids)
            .select(F.explode(F.sequence(F.lit(0), F.lit(BANDS - 1))).alias("b"), "id")
            .select(F.xxhash64("b", "id").alias("bucket"))
        )
        batch_keys = spark.createDataFrame(batch_keys.collect(), batch_keys.schema)
        n_keys = batch_keys.count()
        matched, band_how = index.lookup(
            manifest, "bands", "bucket", F.broadcast(batch_keys), n_keys
        )
        band_read, band_s, band_rows = measure(matched)
        want = spark.createDataFrame(
            [(r["doc"],) for r in matched.select("doc").distinct().collect()], "doc bigint"
        )
        n_docs = want.count()
        found, doc_how = index.lookup(manifest, "docs", "doc", F.broadcast(want), n_docs)
        doc_read, doc_s, doc_rows = measure(found.select("doc", "id", "url", "shingles"))
        # The peer: the same lookups as scans of the whole tables.
        scan_band, scan_band_s, _ = measure(
            index.bands(manifest).join(F.broadcast(batch_keys), "bucket", "left_semi")
        )
        scan_doc, scan_doc_s, _ = measure(
            index.docs(manifest)
            .join(F.broadcast(want), "doc", "left_semi")
            .select("doc", "id", "url", "shingles")
        )
        t = entry["tables"]
        row = {
            "history_documents": n,
            "write_seconds": round(write_s, 1),
            "band_table_bytes": t["bands"]["bytes"],
            "band_row_groups": t["bands"]["row_groups"],
            "doc_table_bytes": t["docs"]["bytes"],
            "doc_row_groups": t["docs"]["row_groups"],
            "band_keys": n_keys,
            "band_rows_matched": band_rows,
            "band_lookup": band_how,
            "band_bytes_read": band_read,
            "band_seconds": round(band_s, 2),
            "documents_looked_up": doc_rows,
            "document_lookup": doc_how,
            "document_bytes_read": doc_read,
            "document_seconds": round(doc_s, 2),
            "scan_band_bytes_read": scan_band,
            "scan_band_seconds": round(scan_band_s, 2),
            "scan_document_bytes_read": scan_doc,
            "scan_document_seconds": round(scan_doc_s, 2),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
        shutil.rmtree(root, ignore_errors=True)
    spark.stop()

    print(
        "\n| history documents | index MB | band table: lookup reads MB (how) | scan MB "
        "| document table: lookup reads MB (how) | scan MB | lookup s | scan s |"
        "\n|---|---|---|---|---|---|---|---|"
    )
    for r in rows:
        mb = (r["band_table_bytes"] + r["doc_table_bytes"]) / 1e6
        print(
            f"| {r['history_documents']:,} | {mb:.0f} | {r['band_bytes_read'] / 1e6:.1f} "
            f"({r['band_lookup']['how']}, {r['band_keys']:,} keys) | "
            f"{r['scan_band_bytes_read'] / 1e6:.1f} | {r['document_bytes_read'] / 1e6:.1f} "
            f"({r['document_lookup']['how']}, {r['documents_looked_up']:,} docs) | "
            f"{r['scan_document_bytes_read'] / 1e6:.1f} | "
            f"{r['band_seconds'] + r['document_seconds']:.1f} | "
            f"{r['scan_band_seconds'] + r['scan_document_seconds']:.1f} |"
        )
    with open(os.path.join(args.work, "index_lookup.json"), "w", encoding="utf-8") as fh:
        json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
