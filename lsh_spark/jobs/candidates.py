"""Stage 2: LSH band keys and bucket grouping -> candidates/, blocks/ (reads signatures/)."""

import sys

from lsh_spark.commands import candidates as main

if __name__ == "__main__":
    sys.exit(main())
