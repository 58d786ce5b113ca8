"""Stage 1: read and validate the input, shingle, MinHash -> shingles/, signatures/, rejects/."""

import sys

from lsh_spark.commands import signatures as main

if __name__ == "__main__":
    sys.exit(main())
