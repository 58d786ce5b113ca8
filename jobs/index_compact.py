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

import json
import sys

from lsh_spark.cli import build_parser, parse, run_job
from lsh_spark.index import compact

PROG = "index_compact.py"


def main(argv=None) -> int:
    args, _ = parse(build_parser(PROG, __doc__.split("\n\n")[1].replace("\n", " ")), argv)
    result = run_job(
        PROG,
        lambda spark: compact(
            spark, args.index, args.target_file_mb << 20, args.retention_hours * 3600
        ),
        remote=args.remote,
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
