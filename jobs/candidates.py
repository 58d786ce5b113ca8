"""Stage 2: LSH band keys and bucket grouping -> candidates/, blocks/ (reads signatures/)."""

import sys

from lsh_spark.cli import run_stage
from lsh_spark.pipeline import stage_candidates

if __name__ == "__main__":
    sys.exit(
        run_stage(
            "candidates.py", __doc__, stage_candidates, (("signatures", "jobs/signatures.py"),)
        )
    )
