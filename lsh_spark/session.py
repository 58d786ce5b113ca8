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


def size_shuffle_partitions(spark: SparkSession, data_bytes: int,
                            bytes_per_partition: int = 32 << 20, cap: int = 10_000) -> int:
    """Set ``spark.sql.shuffle.partitions`` from the data size, unless the user set it.

    One partition per 32 MiB of input, at least two per core, at most ``cap``;
    adaptive execution then coalesces small ones and splits skewed ones.  The
    fixed default of 200 costs seconds of task overhead on small inputs and is
    too few for terabytes.
    """
    if spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        return int(spark.conf.get("spark.sql.shuffle.partitions"))
    cores = spark.sparkContext.defaultParallelism
    n = max(2 * cores, min(cap, -(-data_bytes // bytes_per_partition)))
    spark.conf.set("spark.sql.shuffle.partitions", str(n))
    return n
