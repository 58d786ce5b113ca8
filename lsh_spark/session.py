"""SparkSession construction for the jobs (never at import time), and their
small jobs run in the background."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

T_ = TypeVar("T_")

ADAPTIVE_KEY = "spark.sql.adaptive.enabled"
# Applied only where the user (spark-submit --conf, spark-defaults) set nothing.
DEFAULTS = {
    # Adaptive execution sizes shuffle partitions from the data and splits skewed joins
    # (a job that sizes its partitions switches it off at the floor: size_adaptive_execution).
    ADAPTIVE_KEY: "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.sql.adaptive.skewJoin.enabled": "true",
    # Bounds the rows per Arrow batch sent to Python: documents can be megabytes each.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "2048",
    "spark.sql.parquet.compression.codec": "zstd",
}


# Task results above this size (Spark's default: 1 MiB) leave the executor through
# its block manager instead of the task's status message.
DIRECT_RESULT_KEY = "spark.task.maxDirectResultSize"
# In local mode: 64 MiB, half of Spark's default largest RPC message (128 MiB).
LOCAL_DIRECT_RESULT = "64m"
# Spark's web UI (on by default, http://<driver>:4040).
UI_KEY = "spark.ui.enabled"
# PySpark's DataFrame debugging (pyspark/errors/utils.py, ``_with_origin``): on
# by default, every Column and functions call first asks the JVM for the active
# session, reads a setting, walks the Python stack for its call site (trying
# to import IPython each time) and sends it to the JVM, about six Py4J calls
# around the one that does the work.  It only adds that call site to the
# context of an analysis error.  Read once, at the first such call, so it can
# only be set before the session starts.
DEBUGGING_KEY = "spark.python.sql.dataFrameDebugging.enabled"
# Inputs up to this size per core get one shuffle partition per core
# (size_shuffle_partitions).
SMALL_BYTES_PER_CORE = 64 << 20


def context_defaults(given: SparkConf) -> dict[str, str]:
    """Core settings for a SparkContext about to start with the settings ``given``
    (spark-submit's ``--conf`` and ``spark-defaults.conf``): only keys not in it.

    In local mode the driver and the executor are one JVM, so a task result
    above ``spark.task.maxDirectResultSize`` is serialized into the block
    manager and fetched back through a loopback connection for nothing.  The
    broadcasts of the verification stage collect such results: the pair
    candidates' shingle sets of the 41k comparison corpus come as two task
    results of 23-25 MB, whose tasks took 0.69 and 1.11 s with 0.15 s of run
    time, and 0.22 and 0.57 s when sent directly.  Clusters keep Spark's
    default, since their direct results travel in RPC messages.
    Local masters also run without Spark's web UI unless
    ``spark.ui.enabled`` is given: a batch job on one machine has nobody
    watching it, and six alternated pairs of 41,219-document ``dedup.py``
    runs took 0.8-2.6 s less without it (mean 1.7 s, every pair; README,
    "Spark's web UI in local mode").  ``--conf spark.ui.enabled=true`` brings
    it back; clusters keep it.

    PySpark's DataFrame debugging (:data:`DEBUGGING_KEY`) is off unless given:
    a 40,000-document run made 4,040 Py4J calls instead of 6,816 without it,
    and its driver left the cores idle 0.2-0.5 s less (three alternated
    runs).  ``--conf spark.python.sql.dataFrameDebugging.enabled=true`` turns
    it back on, for an analysis error's Python call site.
    """
    out = {}
    if not given.contains(DEBUGGING_KEY):
        out[DEBUGGING_KEY] = "false"
    if local_master(given.get("spark.master", "")):
        if not given.contains(DIRECT_RESULT_KEY):
            out[DIRECT_RESULT_KEY] = LOCAL_DIRECT_RESULT
        if not given.contains(UI_KEY):
            out[UI_KEY] = "false"
    return out


def local_master(master: str) -> bool:
    """Whether ``master`` runs every task in the driver's JVM: ``local``,
    ``local[n]``, ``local[n, retries]``; not ``local-cluster``, whose executors
    are JVMs of their own."""
    return master == "local" or master.startswith("local[")


def local_cores(master: str) -> int:
    """The task slots of a :func:`local_master`: 1 for ``local``, ``n`` for
    ``local[n]`` and ``local[n, retries]``, every core for ``local[*]``."""
    if master == "local":
        return 1
    n = master[len("local["):].split(",")[0].rstrip("]").strip()
    return (os.cpu_count() or 1) if n == "*" else int(n)


def build_session(app_name: str) -> SparkSession:
    """Get or create the session started by spark-submit, with our defaults filled in
    (:func:`context_defaults` when this starts the SparkContext, :data:`DEFAULTS`)."""
    builder = SparkSession.builder.appName(app_name)
    if SparkContext._active_spark_context is None:
        # Starts the JVM (spark-submit's settings are its system properties),
        # not the context, so core settings can still be given to it.
        SparkContext._ensure_initialized()
        for key, value in context_defaults(SparkConf()).items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    for key, value in DEFAULTS.items():
        if not submitted(spark, key):
            spark.conf.set(key, value)
    spark.sparkContext.setLogLevel("WARN")
    return spark


def submitted(spark: SparkSession, key: str) -> bool:
    """Whether the SparkContext was started with ``key`` set (spark-submit's
    ``--conf``, ``spark-defaults.conf``, the builder), as opposed to a value
    the job set at run time.

    One call to the JVM's configuration: ``SparkContext.getConf()`` copies
    every setting into Python, two Py4J calls per entry, which took 0.16-0.20 s
    a time early in a run, while the driver plans the first query.
    """
    sc = spark.sparkContext
    # The context's live SparkConf; getConf()'s copy where a PySpark release
    # (or a stand-in context) keeps none there.
    conf = getattr(sc, "_conf", None)
    return (conf if conf is not None else sc.getConf()).contains(key)


def stop_session(spark: SparkSession) -> None:
    """Stop the session at the end of a job, without PySpark's idle wait.

    ``SparkSession.stop()`` stops the JVM side, then shuts down PySpark's
    accumulator server, whose request handler checks for shutdown once per
    second of ``select`` (``pyspark/accumulators.py``): the call waits up to a
    second, 0.6 s on average over six 41k-document runs, after all work is
    done.  Here the server is left out of ``stop()``, told to shut down, and its
    daemon thread ends with its next poll or with the process.  If a PySpark
    release stores the server elsewhere, this is an ordinary ``stop()``.
    """
    sc = spark.sparkContext
    server = getattr(sc, "_accumulatorServer", None)
    if server is not None and hasattr(server, "server_shutdown"):
        sc._accumulatorServer = None
        try:
            spark.stop()
        finally:
            server.server_shutdown = True
    else:
        spark.stop()


def size_shuffle_partitions(spark: SparkSession, data_bytes: int,
                            bytes_per_partition: int = 32 << 20, cap: int = 10_000) -> int:
    """Set ``spark.sql.shuffle.partitions`` from the data size, unless the user set it.

    An input of up to ``SMALL_BYTES_PER_CORE`` per core gets one partition per
    core; a larger one one partition per 32 MiB (so at least two per core), at
    most ``cap``, and adaptive execution then coalesces small ones and splits
    skewed ones.  The fixed default of 200 costs seconds of task overhead on
    small inputs and is too few for terabytes.  Adaptive execution itself is
    then switched by :func:`size_adaptive_execution`.

    Below the threshold a second partition per core only adds tasks: every
    one of them deserializes its stage's plan, and each Python stage's task
    opens an Arrow stream to a worker.  Alternated ``dedup.py`` runs on 2 cores
    (README, "Adaptive execution"): 112 MB of JSON lines, 21.9, 21.1, 19.8 s
    with 2 partitions against 22.8, 20.3, 22.8 s with 4; 45 MB, 21.8, 22.2,
    20.5 s against 24.0, 23.0, 21.7 s; the same outputs.
    """
    if submitted(spark, "spark.sql.shuffle.partitions"):
        n = int(spark.conf.get("spark.sql.shuffle.partitions"))
    else:
        cores = spark.sparkContext.defaultParallelism
        if data_bytes <= SMALL_BYTES_PER_CORE * cores:
            n = cores
        else:
            n = max(_partition_floor(spark), min(cap, -(-data_bytes // bytes_per_partition)))
        spark.conf.set("spark.sql.shuffle.partitions", str(n))
    size_adaptive_execution(spark, n)
    return n


def _partition_floor(spark: SparkSession) -> int:
    """Two partitions per core: the most a job runs without adaptive execution
    (see :func:`size_adaptive_execution`), the fewest :func:`size_shuffle_partitions`
    gives an input above ``SMALL_BYTES_PER_CORE`` per core."""
    return 2 * spark.sparkContext.defaultParallelism


def adaptive_enabled(spark: SparkSession) -> bool:
    """Whether the session's queries run with adaptive execution."""
    return spark.conf.get(ADAPTIVE_KEY).strip().lower() == "true"


def size_adaptive_execution(spark: SparkSession, shuffle_partitions: int) -> bool:
    """Adaptive query execution on, unless the shuffles have at most two
    partitions per core; the user's ``spark.sql.adaptive.enabled`` always wins.

    Adaptive execution coalesces small shuffle partitions and splits skewed
    ones, which pays where there are many partitions of data.  With that few
    (inputs up to 64 MiB per core) there is nothing to coalesce, and it only
    makes every query stage a job of its own, planned again after the stage
    before it: the verification stage of a 41,219-document run has about 20
    of them, each 0.1-0.3 s of latency on 2 cores.  Alternated runs there
    (README, "Adaptive execution"): median wall 33.8 s with it, 31.1 s without;
    verification 10.6 s against 8.4 s; identical outputs.  Returns whether it
    is on.
    """
    if submitted(spark, ADAPTIVE_KEY):
        return adaptive_enabled(spark)
    on = shuffle_partitions > _partition_floor(spark)
    spark.conf.set(ADAPTIVE_KEY, "true" if on else "false")
    return on


def in_background(spark: SparkSession, name: str, group: str, description: str,
                  work: Callable[[], T_]) -> Future[T_]:
    """Run ``work`` in a daemon thread ``name`` whose Spark jobs carry job group
    ``group`` (``description`` in the UI and event log), and return its future:
    ``Future.result`` gives what ``work`` returned or re-raises what it raised.

    For a small job beside the run's own (a check, a report figure, the input's
    schema): it spends most of its 0.3 to 0.8 s in planning and scheduling with
    the cores idle, and beside another job those gaps overlap that job's tasks.
    """
    future: Future[T_] = Future()

    def run() -> None:
        spark.sparkContext.setJobGroup(group, description)
        try:
            future.set_result(work())
        except BaseException as exc:  # noqa: BLE001 (re-raised by future.result())
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
