"""Peak memory of a Python worker while the WARC reader extracts one large file.

    python bench/warc_memory.py --records 1000 --records 3000 [--work bench/out/warc]

Writes one WARC.gz file per ``--records`` value (that many gzip members, each a
copy of one real page of about 490 KB of HTML, from the tests' pages), runs
``lsh_spark.warc.extract_warc`` on it in ``local[1]`` and samples, every 0.2 s,
the resident memory of the Python worker processes this run started (found by
walking the process tree from this process).  Prints the file size, the records
extracted, the seconds and the largest worker's peak RSS.  Run it with
``PYTHONPATH`` pointing at another checkout of ``lsh_spark`` to compare two
versions of the reader.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))


def write_file(path: str, records: int) -> None:
    from crawlgen import day, page, write_warc

    one = path + ".one"
    write_warc(one, [dict(url="https://a.example/x", date=day(1), html=page("nytimes-3"))])
    with open(one, "rb") as fh:
        member = fh.read()
    os.remove(one)
    with open(path, "wb") as fh:
        for _ in range(records):
            fh.write(member)


def worker_rss_mb() -> float:
    """The largest RSS among this process's descendant PySpark Python workers."""
    out = subprocess.run(["ps", "-eo", "pid,ppid,rss,args"], capture_output=True, text=True)
    procs = [line.split(None, 3) for line in out.stdout.splitlines()[1:]]
    children: dict[int, list[int]] = {}
    for pid, ppid, _, _ in procs:
        children.setdefault(int(ppid), []).append(int(pid))
    mine, todo = set(), [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            mine.add(child)
            todo.append(child)
    sizes = [
        int(rss) / 1024
        for pid, _, rss, args in procs
        if int(pid) in mine and "pyspark" in args and "java" not in args
    ]
    return max(sizes, default=0.0)


def measure(spark, directory: str) -> tuple[int, float, float]:
    from lsh_spark.warc import extract_warc

    peak, done = [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], worker_rss_mb())
            time.sleep(0.2)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    try:
        n = extract_warc(spark, directory).filter("text IS NOT NULL").count()
    finally:
        done.set()
        sampler.join()
    return n, time.perf_counter() - started, peak[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, action="append", required=True)
    parser.add_argument("--work", default=os.path.join(HERE, "out", "warc"))
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    print("file MB | records | seconds | peak worker RSS MB")
    for records in args.records:
        directory = os.path.join(args.work, f"records-{records}")
        path = os.path.join(directory, "one.warc.gz")
        if not os.path.exists(path):
            os.makedirs(directory, exist_ok=True)
            write_file(path, records)
        n, seconds, peak = measure(spark, directory)
        print(f"{os.path.getsize(path) / 1e6:.0f} | {n} | {seconds:.1f} | {peak:.0f}")


if __name__ == "__main__":
    main()
