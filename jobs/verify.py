"""Stage 3: exact Jaccard of every candidate -> pairs/.

Reads shingles/, signatures/ (stage 1) and candidates/, blocks/ (stage 2); not the input.
"""

import sys

from lsh_spark.cli import run_stage
from lsh_spark.pipeline import stage_verify

if __name__ == "__main__":
    sys.exit(
        run_stage(
            "verify.py",
            __doc__,
            stage_verify,
            (
                ("signatures", "jobs/signatures.py"),
                ("shingles", "jobs/signatures.py"),
                ("candidates", "jobs/candidates.py"),
                ("blocks", "jobs/candidates.py"),
            ),
        )
    )
