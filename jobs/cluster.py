"""Stage 4: connected components, keep policy -> clusters/, deduped/ (reads pairs/, input)."""

import sys

from lsh_spark.cli import run_stage
from lsh_spark.pipeline import stage_cluster

if __name__ == "__main__":
    sys.exit(
        run_stage(
            "cluster.py",
            __doc__,
            stage_cluster,
            (("signatures", "jobs/signatures.py"), ("pairs", "jobs/verify.py")),
        )
    )
