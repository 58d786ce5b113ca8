"""Stage 1: read and validate the input, shingle, MinHash -> shingles/, signatures/, rejects/."""

import sys

from lsh_spark.cli import run_stage
from lsh_spark.pipeline import stage_signatures

if __name__ == "__main__":
    sys.exit(run_stage("signatures.py", __doc__, stage_signatures, ()))
