"""A small Spark job whose driver JVM, run as ``spark-submit --driver-java-options
-XX:ArchiveClassesAtExit=ARCHIVE scripts/jvm_classes.py``, writes a class-data-sharing
archive of the classes it loaded when it exits (Java 13+), for ``scripts/test.sh``.

A later JVM with the same class path maps the archive (``-XX:SharedArchiveFile``)
instead of loading and verifying those classes again.  The job touches what the
tests' jobs touch: Parquet and JSON files, a shuffle, a join, Arrow batches to
Python.
"""

from __future__ import annotations

import tempfile

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    )
    with tempfile.TemporaryDirectory() as d:
        spark.range(1000).select(
            (F.col("id") % 7).alias("k"),
            F.concat(F.lit("x"), F.col("id").cast("string")).alias("t"),
        ).write.parquet(f"{d}/p")
        rows = spark.read.parquet(f"{d}/p")
        joined = rows.groupBy("k").agg(F.collect_list("t").alias("ts")).join(rows, "k")
        joined.mapInArrow(lambda batches: batches, joined.schema).write.json(f"{d}/j")
        spark.read.json(f"{d}/j").count()
    spark.stop()


if __name__ == "__main__":
    main()
