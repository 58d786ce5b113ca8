"""Shingle bytes that pair verification moves, by layout, for a finished dedup run.

    python bench/verify_shipping.py --run bench/out/web/run-1000000-web --tasks 28,200

Reads the run's ``candidates/`` (the candidate pairs outside blocks, which
``lsh_spark.jaccard.verify_pairs`` verifies) and ``signatures/`` (``num_shingles``
of every document; a shingle set is 8 bytes a shingle in ``shingles/``), and
counts, without running any verification, the shingle-set bytes each layout
ships through shuffles:

* ``pair joins`` (what verify_pairs does): the candidate documents' sets
  shuffled once for each of the two joins, plus the first side's set carried
  with every pair into the second join;
* ``requests by first id``: every pair goes to task ``hash(id_a) % tasks``; each
  task receives the set of every document its pairs name, once;
* ``requests by anchor``: the same, with the task chosen by the pair's anchor, the
  smallest id among both documents and their candidate partners, so that a
  group of near copies that pair with one another lands in one task.

Prints one row per layout with bytes per candidate document, the ratio to the
pair joins, and the largest task's bytes (the memory one task would hold).
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

SHINGLE_BYTES = 8


def _task(key: str, tasks: int):
    return F.pmod(F.xxhash64(key), F.lit(tasks))


def _by_task(pairs: DataFrame, sizes: DataFrame, tasks: int, key: str) -> tuple[int, int]:
    """(bytes shipped, largest task's bytes) when each pair goes to the task of
    ``key`` and each task receives every set its pairs name once."""
    keyed = pairs.withColumn("t", _task(key, tasks))
    needs = (
        keyed.select("t", F.col("id_a").alias("id"))
        .union(keyed.select("t", F.col("id_b").alias("id")))
        .distinct()
        .join(sizes, "id")
    )
    per_task = needs.groupBy("t").agg(F.sum("bytes").alias("bytes"))
    row = per_task.agg(F.sum("bytes"), F.max("bytes")).first()
    return int(row[0]), int(row[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a dedup output directory")
    ap.add_argument("--tasks", default="28,200", help="task counts to try, comma-separated")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pairs = spark.read.parquet(os.path.join(args.run, "candidates")).select("id_a", "id_b")
    pairs = pairs.persist()
    ids = pairs.select(F.col("id_a").alias("id")).union(pairs.select(F.col("id_b").alias("id")))
    sizes = (
        spark.read.parquet(os.path.join(args.run, "signatures"))
        .join(ids.distinct(), "id", "left_semi")
        .select("id", (F.col("num_shingles") * SHINGLE_BYTES).alias("bytes"))
        .persist()
    )
    docs, doc_bytes = sizes.agg(F.count("id"), F.sum("bytes")).first()
    n_pairs = pairs.count()
    side_a = pairs.join(sizes.withColumnRenamed("id", "id_a"), "id_a").agg(F.sum("bytes"))
    joins = 2 * doc_bytes + int(side_a.first()[0])
    # The anchor of a document: the smallest id among it and its candidate partners.
    anchor = (
        pairs.select(F.col("id_a").alias("id"), F.col("id_b").alias("other"))
        .union(pairs.select("id_b", "id_a"))
        .groupBy("id")
        .agg(F.least(F.min("other"), F.col("id")).alias("anchor"))
    )
    anchored = (
        pairs.join(anchor.withColumnRenamed("id", "id_a").withColumnRenamed("anchor", "x"), "id_a")
        .join(anchor.withColumnRenamed("id", "id_b").withColumnRenamed("anchor", "y"), "id_b")
        .withColumn("anchor", F.least("x", "y"))
        .persist()
    )
    group = (
        anchored.select("anchor", F.col("id_a").alias("id"))
        .union(anchored.select("anchor", F.col("id_b").alias("id")))
        .distinct()
        .join(sizes, "id")
        .groupBy("anchor")
        .agg(F.sum("bytes").alias("bytes"), F.count("id").alias("docs"))
        .orderBy(F.desc("bytes"))
        .first()
    )
    print(
        f"{n_pairs:,} candidate pairs over {docs:,} documents; sets {doc_bytes / docs:,.0f} B/doc"
    )
    print(f"{'layout':<28} {'tasks':>6} {'shipped B/doc':>14} {'vs joins':>9} {'largest task':>13}")
    print(f"{'pair joins':<28} {'':>6} {joins / docs:>14,.0f} {1.0:>9.2f} {'(streamed)':>13}")
    for tasks in (int(t) for t in args.tasks.split(",")):
        for name, frame, key in (
            ("requests by first id", pairs, "id_a"),
            ("requests by anchor", anchored, "anchor"),
        ):
            shipped, largest = _by_task(frame, sizes, tasks, key)
            total = doc_bytes + shipped  # the sets' shuffle to the requests, then to the tasks
            print(
                f"{name:<28} {tasks:>6} {total / docs:>14,.0f} {total / joins:>9.2f} "
                f"{largest / 2**20:>10,.1f} MiB"
            )
    print(
        f"largest anchor group: {group['docs']:,} documents, {group['bytes'] / 2**20:,.1f} MiB "
        "of sets (what one group of the anchor layout would hold)"
    )
    spark.stop()


if __name__ == "__main__":
    main()
