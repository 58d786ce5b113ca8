"""Rewrite a crawl index into fewer, larger files without changing its content.

Every nightly batch adds one small segment; compaction merges all live segments
into one (documents sorted by key, files of about --target-file-mb), drops the
documents later batches superseded, commits the result as a new index version
through the same compare-and-swap as a batch, and deletes the manifests and
segments no reader needs that are older than --retention-hours. A batch running
meanwhile is not harmed: the one that commits second runs again (a batch) or
fails with a version conflict and changes nothing (compaction).

Example:
  spark-submit jobs/index_compact.py --index index/
"""

import sys

from lsh_spark.commands import compact as main

if __name__ == "__main__":
    sys.exit(main())
