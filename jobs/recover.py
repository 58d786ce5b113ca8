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

import argparse
import json
import sys

from lsh_spark.cli import run_job

PROG = "recover.py"


def recover(spark, output: str) -> dict:
    """Recover ``output`` as a whole-run output and as a stage jobs' output."""
    from lsh_spark.io import FileSystem, recover_output, recover_stages

    actions = recover_output(spark, output)
    if FileSystem(spark, output).is_dir(output):
        actions += recover_stages(spark, output)
    return {"output": output, "actions": actions}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1])
    parser.add_argument("output", metavar="OUT", help="the output directory to recover")
    parser.add_argument("--remote", help="a Spark Connect server (sc://host:port)")
    args = parser.parse_args(argv)
    print(json.dumps(run_job(PROG, lambda spark: recover(spark, args.output), remote=args.remote)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
