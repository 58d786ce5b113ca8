"""SparkSession construction for the jobs (never at import time)."""

from __future__ import annotations

from pyspark.sql import SparkSession

# Applied only where the user (spark-submit --conf, spark-defaults) set nothing.
DEFAULTS = {
    # Adaptive execution sizes shuffle partitions from the data and splits skewed joins.
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.adaptive.skewJoin.enabled": "true",
    # Bounds the rows per Arrow batch sent to Python: documents can be megabytes each.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "2048",
    "spark.sql.parquet.compression.codec": "zstd",
}


def build_session(app_name: str) -> SparkSession:
    """Get or create the session started by spark-submit, with our defaults filled in."""
    builder = SparkSession.builder.appName(app_name)
    spark = builder.getOrCreate()
    conf = spark.sparkContext.getConf()
    for key, value in DEFAULTS.items():
        if not conf.contains(key):
            spark.conf.set(key, value)
    spark.sparkContext.setLogLevel("WARN")
    return spark
