"""A notebook's use of the Python API, as a Spark Connect client.

``python tests/api_client.py sc://HOST:PORT WORKDIR OUT`` builds the sample
corpus as a DataFrame in the client's memory, calls
``lsh_spark.find_duplicates`` with ``WORKDIR``, writes ``Duplicates.remove``
to ``OUT`` and prints the report's counts, the session settings before and
after, and what ``removals`` and ``inspect()`` found as one JSON line
(tests/test_connect.py).
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession

import lsh_spark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")
KEYS = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled", "spark.lsh_spark.filledIn")


def main(remote: str, workdir: str, out: str) -> None:
    spark = SparkSession.builder.remote(remote).getOrCreate()
    with open(SAMPLE, encoding="utf-8") as fh:
        rows = [(r["id"], r["source"], r["text"]) for r in map(json.loads, fh)]
    docs = spark.createDataFrame(rows, "id string, source string, text string")
    before = {k: spark.conf.get(k, None) for k in KEYS}
    dups = lsh_spark.find_duplicates(docs, threshold=0.8, workdir=workdir)
    dups.remove(docs, drop_rejects=True).write.parquet(out)
    after = {k: spark.conf.get(k, None) for k in KEYS}
    notebook = {
        "removals": dups.removals.count(),
        "below_threshold": dups.removals.filter("jaccard < 0.8").count(),
        "page_pairs": dups.inspect().count("Jaccard with the kept document <b"),
    }
    print(
        json.dumps({"counts": dups.report["counts"], "before": before, "after": after, **notebook})
    )
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
