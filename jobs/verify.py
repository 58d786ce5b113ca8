"""Stage 3: exact Jaccard of every candidate -> pairs/ (reads candidates/, signatures/, input)."""

import sys

from lsh_spark.cli import run_stage
from lsh_spark.pipeline import stage_verify

if __name__ == "__main__":
    sys.exit(run_stage("verify", __doc__, stage_verify, True,
                       (("signatures", "jobs/signatures.py"),
                        ("candidates", "jobs/candidates.py"))))
