"""Incremental crawl dedup against its alternative, recomputing the whole history.

    python bench/crawl_incremental.py --corpus bench/out/scaling/corpus-100000-t0/corpus.jsonl \\
        --work bench/out/incremental [--sizes 40000,10000,10000,1000,1000]

The corpus (JSON lines with planted near-duplicate families, from
bench/make_corpus.py) is shuffled with a fixed seed and cut into batches of
``--sizes`` documents (the first builds the index), so later batches hold
copies of pages kept earlier.  Every batch runs through
``lsh_spark.crawl.run_crawl_batch`` (what ``jobs/crawl_dedup.py`` runs) in one
``local[2]`` session; the bytes read from the file system are taken from
Hadoop's FileSystem statistics around each pipeline stage (in local mode every
task runs in the driver's JVM, so these are all reads).  Per batch the table
gives wall time, the index before the batch (documents, bytes), the bytes the
index stages read (``index_ids`` + ``lookup``; they also read the batch's own
signatures, listed apart), the index documents looked up, and what was found.

The peer is ``lsh_spark.pipeline.run_dedup`` (``jobs/dedup.py``) over
everything seen up to the last batch, in the same session: what a pipeline
without an index runs every night.  Its kept-document count is printed next
to the index's.  Writes ``incremental.json`` under ``--work``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from lsh_spark import pipeline  # noqa: E402
from lsh_spark.config import DedupConfig  # noqa: E402
from lsh_spark.crawl import run_crawl_batch  # noqa: E402
from lsh_spark.pipeline import run_dedup  # noqa: E402


class ReadMeter:
    """Bytes read from Hadoop file systems per pipeline stage (Timer section)."""

    def __init__(self, spark) -> None:
        self.jvm = spark.sparkContext._jvm
        self.by_stage: dict[str, int] = {}
        meter, original = self, pipeline.Timer.__call__

        @contextlib.contextmanager
        def timed(timer, name):
            before = meter.total()
            with original(timer, name):
                yield
            meter.by_stage[name] = meter.by_stage.get(name, 0) + meter.total() - before

        pipeline.Timer.__call__ = timed

    def total(self) -> int:
        fs = self.jvm.org.apache.hadoop.fs.FileSystem
        return sum(int(s.getBytesRead()) for s in fs.getAllStatistics())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--work", required=True)
    p.add_argument(
        "--sizes",
        default="40000,10000,10000,1000,1000",
        help="documents per batch, the first one builds the index",
    )
    p.add_argument("--driver-memory", default="4g")
    args = p.parse_args()
    from pyspark.sql import SparkSession

    sizes = [int(x) for x in args.sizes.split(",")]
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    with open(args.corpus, encoding="utf-8") as fh:
        lines = fh.readlines()
    random.Random(7).shuffle(lines)
    if sum(sizes) > len(lines):
        sys.exit(f"the corpus has {len(lines)} documents; --sizes needs {sum(sizes)}")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench crawl_incremental")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2048")
        .config("spark.sql.parquet.compression.codec", "zstd")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    meter = ReadMeter(spark)
    index = os.path.join(args.work, "index")
    cfg = DedupConfig()
    rows, start = [], 0
    for n, size in enumerate(sizes):
        batch_dir = os.path.join(args.work, "batches", f"day-{n:02d}")
        os.makedirs(batch_dir)
        with open(os.path.join(batch_dir, "part-0.jsonl"), "w", encoding="utf-8") as fh:
            fh.writelines(lines[start : start + size])
        start += size
        meter.by_stage.clear()
        t0 = time.perf_counter()
        report = run_crawl_batch(
            spark, batch_dir, index, os.path.join(args.work, "results", f"day-{n:02d}"), cfg
        )
        secs = time.perf_counter() - t0
        before, after = report["index"]["before"], report["index"]["after"]
        read = meter.by_stage.get("index_ids", 0) + meter.by_stage.get("lookup", 0)
        row = {
            "batch": n,
            "documents": size,
            "seconds": round(secs, 1),
            "index_documents_before": before["documents"],
            "index_bytes_before": before["bytes"],
            "index_documents_after": after["documents"],
            "index_bytes_per_document": after["bytes_per_document"],
            "index_stage_bytes_read": read,
            "read_per_index_byte": round(read / before["bytes"], 3) if before["bytes"] else None,
            "index_documents_looked_up": report["lookup"].get("index_documents_looked_up", 0),
            "band_table_read": report["lookup"].get("band_table_read"),
            "document_table_read": report["lookup"].get("document_table_read"),
            "new": report["counts"]["new_documents"],
            "duplicates_of_index": report["counts"]["duplicates_of_index"],
            "duplicates_within_batch": report["counts"]["duplicates_within_batch"],
            "bytes_read_by_stage": dict(meter.by_stage),
            "stage_seconds": report["seconds"],
        }
        rows.append(row)
        print(
            json.dumps(
                {k: row[k] for k in row if k not in ("stage_seconds", "bytes_read_by_stage")}
            ),
            flush=True,
        )

    seen = os.path.join(args.work, "all-seen.jsonl")
    with open(seen, "w", encoding="utf-8") as fh:
        fh.writelines(lines[:start])
    t0 = time.perf_counter()
    full = run_dedup(spark, seen, os.path.join(args.work, "full"), cfg)
    full_secs = time.perf_counter() - t0
    spark.stop()
    last = rows[-1]
    result = {
        "batches": rows,
        "full_recompute": {
            "documents": start,
            "seconds": round(full_secs, 1),
            "deduped_documents": full["counts"]["deduped_documents"],
        },
    }
    print(
        "\n| batch | documents | seconds | index docs before | index MB before "
        "| MB read by index stages | read / index bytes | band table | document table "
        "| index docs looked up | new | dups of index | dups in batch |"
        "\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )

    def how(read):
        return (
            f"{read['how']} ({read['keys']:,} keys, expected {read['expected_read_fraction']:.0%})"
            if read
            else "-"
        )

    for r in rows:
        print(
            f"| {r['batch']} | {r['documents']:,} | {r['seconds']} | "
            f"{r['index_documents_before']:,} | {r['index_bytes_before'] / 1e6:.1f} | "
            f"{r['index_stage_bytes_read'] / 1e6:.1f} | {r['read_per_index_byte']} | "
            f"{how(r['band_table_read'])} | {how(r['document_table_read'])} | "
            f"{r['index_documents_looked_up']:,} | {r['new']:,} | "
            f"{r['duplicates_of_index']:,} | {r['duplicates_within_batch']:,} |"
        )
    print(
        f"\nlast batch: {last['documents']:,} documents against "
        f"{last['index_documents_before']:,} indexed: {last['seconds']} s; dedup.py over "
        f"all {start:,} documents seen: {full_secs:.1f} s"
    )
    print(
        f"kept documents: index {last['index_documents_after']:,}, one full run "
        f"{full['counts']['deduped_documents']:,}"
    )
    with open(os.path.join(args.work, "incremental.json"), "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
