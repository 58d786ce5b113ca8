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

import argparse
import json
import sys

from lsh_spark.cli import fail
from lsh_spark.config import ConfigError
from lsh_spark.index import IndexConflict, compact
from lsh_spark.session import build_session, stop_session


def build_compact_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="index_compact.py",
                                     description=__doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("--index", required=True, help="index directory")
    parser.add_argument("--target-file-mb", type=int, default=256,
                        help="approximate size of each rewritten Parquet file (default: 256)")
    return parser


def main(argv=None) -> int:
    parser = build_compact_parser()
    args = parser.parse_args(argv)
    if args.target_file_mb < 1:
        parser.exit(2, f"index_compact.py: error: --target-file-mb: got {args.target_file_mb}; "
                       "allowed: a positive integer\n")
    spark = build_session("lsh-spark index_compact")
    try:
        result = compact(spark, args.index, args.target_file_mb << 20)
    except (ConfigError, IndexConflict) as exc:
        fail("index_compact.py", exc)
    finally:
        stop_session(spark)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
