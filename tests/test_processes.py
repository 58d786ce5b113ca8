"""CPU per stage in local mode: the driver, the JVM and the Python workers, each
measured where it is spent (lsh_spark/processes.py, Timer)."""

from __future__ import annotations

import os
import time

import pandas as pd

from lsh_spark import processes
from lsh_spark.stages.common import Timer


def _burn(seconds: float) -> int:
    """Spin this process's CPU for about ``seconds``."""
    end, n = time.process_time() + seconds, 0
    while time.process_time() < end:
        n += 1
    return n


def test_the_jvm_of_this_driver_is_found(spark):
    jvm = processes.jvm_pid()
    assert jvm is not None and jvm != os.getpid()
    with open(f"/proc/{jvm}/cmdline", "rb") as fh:
        assert b"org.apache.spark.deploy.SparkSubmit" in fh.read()


def test_cpu_of_python_workers_is_counted_in_their_stage(spark):
    timer = Timer(spark)

    def busy(frames):  # self-contained: the worker cannot import this test module
        import time

        for frame in frames:
            end = time.process_time() + 1.5
            while time.process_time() < end:
                pass
            yield pd.DataFrame({"n": [len(frame)]})

    with timer("udf"):
        spark.range(1, numPartitions=1).mapInPandas(busy, "n long").collect()
    with timer("driver"):
        _burn(1.0)
    udf, driver = timer.cpu["udf"], timer.cpu["driver"]
    assert set(udf) == {"driver", "jvm", "python_workers"}
    assert udf["python_workers"] >= 1.3  # the worker's 1.5 s, whatever else ran
    assert udf["driver"] < 1.0
    assert driver["driver"] >= 0.9 and driver["python_workers"] < 0.5


def test_spent_is_the_difference_of_two_snapshots():
    before = {"driver": 1.0, "jvm": 10.0, "python_workers": 3.0}
    after = {"driver": 1.25, "jvm": 12.5, "python_workers": 2.0}  # a worker's parent gone
    assert processes.spent(before, after) == {"driver": 0.25, "jvm": 2.5, "python_workers": 0.0}
    assert processes.spent(None, after) == {}
