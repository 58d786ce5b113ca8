"""spark-submit jobs/dedup.py --input PATH --output DIR [options]

Runs the whole near-duplicate pipeline: signatures, candidates, exact
verification, clusters and the deduplicated corpus, written atomically to
--output.  See docs/options.md for every option and README.md for the output
layout.
"""

import sys

from lsh_spark.commands import dedup as main

if __name__ == "__main__":
    sys.exit(main())
