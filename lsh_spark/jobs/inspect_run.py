"""spark-submit jobs/inspect_run.py OUT --input CORPUS [--html FILE]

Writes one self-contained HTML page of what a dedup run merged and why (the
largest clusters, removed documents beside the kept ones with the differing words
highlighted, the similarity histogram, the S-curve, counts and rejects); also
``lsh-spark inspect``.
"""

import sys

from lsh_spark.commands import inspect as main

if __name__ == "__main__":
    sys.exit(main())
