"""spark-submit jobs/advise.py [flags]: lsh_spark/jobs/advise.py, the entry point
that the wheel ships too (`lsh-spark submit-path` prints its path); see its docstring."""

import sys

from lsh_spark.jobs.advise import main

if __name__ == "__main__":
    sys.exit(main())
