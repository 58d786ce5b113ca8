"""Stage 3: exact Jaccard of every candidate -> pairs/.

Reads shingles/, signatures/ (stage 1) and candidates/, blocks/ (stage 2); not the input.
"""

import sys

from lsh_spark.cli import run_stage
from lsh_spark.pipeline import stage_verify

# The datasets of earlier stages this stage reads, with the job that writes each.
REQUIRES = (
    ("signatures", "jobs/signatures.py"),
    ("shingles", "jobs/signatures.py"),
    ("candidates", "jobs/candidates.py"),
    ("blocks", "jobs/candidates.py"),
)


def main(argv=None, spark=None) -> int:
    """Run the stage with the flags ``argv`` (``sys.argv`` when None), in ``spark``
    if given (see :func:`lsh_spark.cli.run_job`)."""
    return run_stage("verify.py", __doc__, stage_verify, REQUIRES, argv, spark)


if __name__ == "__main__":
    sys.exit(main())
