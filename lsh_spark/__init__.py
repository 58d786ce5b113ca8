"""lsh-spark: near-duplicate detection for web-scale text on Apache Spark."""

from lsh_spark.worker_process import drop_shadowed_archives as _drop_shadowed_archives

__version__ = "0.1.0"

# In a PySpark worker, where this is imported with the first lsh-spark function
# of a task: fewer archives for PySpark to read again before every later task
# (lsh_spark.worker_process).  In any other process, nothing.
_drop_shadowed_archives()
