"""Stage 2: LSH band keys and bucket grouping -> candidates/, blocks/ (reads signatures/)."""

import sys

from lsh_spark.cli import run_stage
from lsh_spark.pipeline import stage_candidates

# The datasets of earlier stages this stage reads, with the job that writes each.
REQUIRES = (("signatures", "jobs/signatures.py"),)


def main(argv=None, spark=None) -> int:
    """Run the stage with the flags ``argv`` (``sys.argv`` when None), in ``spark``
    if given (see :func:`lsh_spark.cli.run_job`)."""
    return run_stage("candidates.py", __doc__, stage_candidates, REQUIRES, argv, spark)


if __name__ == "__main__":
    sys.exit(main())
