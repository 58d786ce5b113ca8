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

import sys

from lsh_spark.commands import crawl as main

if __name__ == "__main__":
    sys.exit(main())
