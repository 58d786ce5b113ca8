"""Stage 1: read and validate the input, shingle, MinHash -> shingles/, signatures/, rejects/."""

import sys

from lsh_spark.cli import run_stage
from lsh_spark.pipeline import stage_signatures

# The datasets of earlier stages this stage reads, with the job that writes each.
REQUIRES = ()


def main(argv=None, spark=None) -> int:
    """Run the stage with the flags ``argv`` (``sys.argv`` when None), in ``spark``
    if given (see :func:`lsh_spark.cli.run_job`)."""
    return run_stage("signatures.py", __doc__, stage_signatures, REQUIRES, argv, spark)


if __name__ == "__main__":
    sys.exit(main())
