"""Rewrite a crawl index into fewer, larger files without changing its content.

Every nightly batch adds one small segment; compaction merges all live segments
into one (documents sorted by key, files of about --target-file-mb), drops the
documents later batches superseded, commits the result as a new index version
and deletes segment and staging directories no version needs any more. Run it
when no batch is running (a batch that was running fails cleanly with a
version conflict and can be re-run).

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
        lambda spark: compact(spark, args.index, args.target_file_mb << 20),
        remote=args.remote,
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
