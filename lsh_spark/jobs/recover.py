"""Finish an interrupted commit of an output directory and delete what killed runs left.

A run killed while it committed --output may leave the old output renamed aside, the
new one under a hidden staging name, or a stage job's half-swapped dataset; the next
run into the same output repairs this by itself, and this job does it on demand. Run
it when no job is writing OUT: it treats every staging directory of another host as
abandoned.

Example:
  python jobs/recover.py out/run1
  spark-submit jobs/recover.py s3a://bucket/dedup/run1
"""

import sys

from lsh_spark.commands import recover as main

if __name__ == "__main__":
    sys.exit(main())
