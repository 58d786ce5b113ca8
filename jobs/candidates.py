"""spark-submit jobs/candidates.py [flags]: lsh_spark/jobs/candidates.py, the entry point
that the wheel ships too (`lsh-spark submit-path` prints its path); see its docstring."""

import sys

from lsh_spark.jobs.candidates import main

if __name__ == "__main__":
    sys.exit(main())
