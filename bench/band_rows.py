"""What the band rows of the candidate stage cost the JVM, step by step, on a finished run.

    python bench/band_rows.py --run bench/out/web/run-1000000-web

Reads the run's ``signatures/`` and writes (to Spark's ``noop`` sink, so nothing
is stored) three queries, each ``--repeats`` times, printing the CPU seconds of
the JVM and of the Python workers for each (``lsh_spark.processes``, local mode):

* ``read``: the columns the candidate stage reads (``id``, ``signature``,
  ``text_hash``);
* ``explode + keys``: plus one row per band and its key
  (``lsh_spark.banding.explode_bands``: ``xxhash64`` of a slice of the
  signature) and the 64-bit key of the text hash, as ``bucket_members`` selects;
* ``explode + keys + shuffle``: plus the shuffle by ``(band, bucket)`` that
  feeds the bucket tasks.

The differences say what computing the band keys elsewhere (in the fused Python
pass of the signature stage) could save at most: the ``explode + keys`` step.
The last repeat of each is the one to read (the first ones warm the JIT).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from lsh_spark.banding import explode_bands  # noqa: E402
from lsh_spark.processes import snapshot, spent  # noqa: E402


def _measure(name: str, df: DataFrame, repeats: int) -> None:
    for rep in range(repeats):
        before, start = snapshot(), time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        cpu = spent(before, snapshot())
        print(
            f"| {name} | {rep + 1} | {time.perf_counter() - start:.2f} | "
            f"{cpu.get('jvm', 0.0):.2f} | {cpu.get('python_workers', 0.0):.2f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, help="a dedup output with signatures/")
    parser.add_argument("--bands", type=int, default=16)
    parser.add_argument("--rows", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args()
    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    sigs = spark.read.parquet(os.path.join(args.run, "signatures"))
    keys = explode_bands(sigs, args.bands, args.rows, "text_hash").select(
        "id", "band", "bucket", F.xxhash64("text_hash").alias("text_key")
    )
    print("| query | repeat | wall s | JVM CPU s | Python workers CPU s |")
    print("|---|---|---|---|---|")
    _measure("read", sigs.select("id", "signature", "text_hash"), args.repeats)
    _measure("explode + keys", keys, args.repeats)
    _measure("explode + keys + shuffle", keys.repartition("band", "bucket"), args.repeats)


if __name__ == "__main__":
    main()
