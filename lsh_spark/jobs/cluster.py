"""Stage 4: connected components, keep policy -> clusters/, deduped/ (reads pairs/, input)."""

import sys

from lsh_spark.commands import cluster as main

if __name__ == "__main__":
    sys.exit(main())
