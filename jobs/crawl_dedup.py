"""Deduplicate one crawl batch within itself and against an incremental index.

Deduplicates the batch (WARC, WARC.gz, WET, or any --format of jobs/dedup.py)
within itself and against every document kept in --index before, with exact
Jaccard verification; writes deduped/, duplicates/, superseded/, rejects/ and
report.json under --output; then adds the batch's new documents to the index as
one atomic commit. Re-running a committed batch (same --batch-id) changes nothing.

Example:
  spark-submit jobs/crawl_dedup.py --batch crawl/2026-11-29/ --index index/ \\
      --output out/2026-11-29/
"""

import json
import sys

from lsh_spark.cli import build_parser, fail, parse
from lsh_spark.config import ConfigError
from lsh_spark.crawl import CRAWL_KEEP, run_crawl_batch
from lsh_spark.index import IndexConflict
from lsh_spark.io import InputError
from lsh_spark.session import build_session, stop_session


def build_crawl_parser():
    parser = build_parser("crawl_dedup.py", __doc__.split("\n\n")[1].replace("\n", " "),
                          need_input=False, exclude=("keep",))
    parser.add_argument("--batch", required=True,
                        help="the batch: a crawl file or directory (local, hdfs://, s3a://)")
    parser.add_argument("--index", required=True,
                        help="index directory; created by the first batch")
    parser.add_argument("--batch-id", dest="batch_id", default=None,
                        help="id recorded in the index (default: derived from the batch's "
                             "directory name and its files' names and sizes)")
    parser.add_argument("--keep", dest="crawl_keep", default=None, choices=CRAWL_KEEP,
                        help="which copy stays when a batch page duplicates an indexed one: "
                             "'oldest' (default; by fetch time, then batch order) or 'newest'")
    return parser


def main(argv=None) -> int:
    parser = build_crawl_parser()
    args, cfg = parse(parser, argv, job_keys={"keep": "crawl_keep"})
    keep = args.crawl_keep or "oldest"
    if keep not in CRAWL_KEEP:
        parser.exit(2, f"crawl_dedup.py: error: --keep: got {keep!r}; allowed: "
                       f"{' | '.join(CRAWL_KEEP)}\n")
    spark = build_session("lsh-spark crawl_dedup")
    try:
        report = run_crawl_batch(spark, args.batch, args.index, args.output, cfg,
                                 batch_id=args.batch_id, keep=keep)
    except (ConfigError, InputError, IndexConflict) as exc:
        fail("crawl_dedup.py", exc)
    finally:
        stop_session(spark)
    c = report["counts"]
    print(json.dumps({"batch_id": report["batch_id"], "status": report["status"],
                      "index_version": report["index"]["after"]["version"],
                      "index_documents": report["index"]["after"]["documents"], **c}))
    if report["status"] == "already_applied":
        print(report["message"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
