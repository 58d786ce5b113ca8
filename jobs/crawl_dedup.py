"""Deduplicate one crawl batch within itself and against an incremental index.

Deduplicates the batch (WARC, WARC.gz, WET, or any --format of jobs/dedup.py)
within itself and against every document kept in --index before, with exact
Jaccard verification; writes deduped/, duplicates/, superseded/, rejects/ and
report.json under --output; then adds the batch's new documents to the index as
one compare-and-swap of its manifest (a batch that loses it to another batch or a
compaction runs again from the new version, --max-retries times); the output is
committed after the index. Re-running a committed batch (same --batch-id)
changes nothing.

Example:
  spark-submit jobs/crawl_dedup.py --batch crawl/2026-11-29/ --index index/ \\
      --output out/2026-11-29/
"""

import json
import sys

from lsh_spark.cli import build_parser, parse, run_job
from lsh_spark.crawl import run_crawl_batch

PROG = "crawl_dedup.py"


def build_crawl_parser():
    return build_parser(PROG, __doc__.split("\n\n")[1].replace("\n", " "))


def main(argv=None) -> int:
    args, cfg = parse(build_crawl_parser(), argv)
    report = run_job(
        PROG,
        lambda spark: run_crawl_batch(
            spark,
            args.batch,
            args.index,
            args.output,
            cfg,
            batch_id=args.batch_id,
            keep=args.keep,
            max_retries=args.max_retries,
        ),
        remote=args.remote,
    )
    c = report["counts"]
    print(
        json.dumps(
            {
                "batch_id": report["batch_id"],
                "status": report["status"],
                "index_version": report["index"]["after"]["version"],
                "attempts": report["index"].get("attempts", 1),
                "index_documents": report["index"]["after"]["documents"],
                **c,
            }
        )
    )
    if report["status"] == "already_applied":
        print(report["message"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
