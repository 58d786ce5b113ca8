"""Stage 3: exact Jaccard of every candidate -> pairs/.

Reads shingles/, signatures/ (stage 1) and candidates/, blocks/ (stage 2); not the input.
"""

import sys

from lsh_spark.commands import verify as main

if __name__ == "__main__":
    sys.exit(main())
