"""SparkSession construction for the jobs (never at import time), shuffle sizing,
and small jobs run in the background.

Only public Spark API: everything here works in classic mode and over Spark
Connect.  Settings that must be given before the session starts (the web UI,
JVM options, ...) are in ``conf/local.properties``, passed with
``spark-submit --properties-file``; settings given there or with ``--conf``
always win over the defaults filled in here.
"""

from __future__ import annotations

import logging
import os
import shlex
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar

import pyarrow as pa
from pyspark import SparkContext
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import DataType, StructType

from lsh_spark.versions import UnsupportedSpark, check_spark

log = logging.getLogger(__name__)

T_ = TypeVar("T_")

ADAPTIVE_KEY = "spark.sql.adaptive.enabled"
PARTITIONS_KEY = "spark.sql.shuffle.partitions"
# Applied only where the user (spark-submit --conf, a properties file, the builder)
# set nothing.
# (Adaptive execution, on by default in Spark, is switched by size_adaptive_execution.)
ARROW_RECORDS_KEY = "spark.sql.execution.arrow.maxRecordsPerBatch"
ARROW_BYTES_KEY = "spark.sql.execution.arrow.maxBytesPerBatch"
# At this byte bound Spark does not measure the Arrow batch after each row
# (BatchedPythonArrowInput skips the check at Int.MaxValue), see small_row_batches.
NO_BATCH_BYTE_BOUND = (1 << 31) - 1
# What a batch of small rows may hold, and the most rows it takes.
SMALL_ROW_BATCH_BYTES = 64 << 20
SMALL_ROW_BATCH_ROWS = 65536
DEFAULTS = {
    # Bound the Arrow batches sent to Python (mapInArrow, pandas_udf) by rows and
    # by bytes, whichever comes first: documents can be megabytes each, and 2,048
    # of them would reach Arrow's 2 GB column limit.  A single larger row still
    # travels, alone in its batch.  (Spark 4.0's byte bound, 256 MiB by default,
    # is an internal setting: ``SET -v`` does not list it.)
    ARROW_RECORDS_KEY: "2048",
    ARROW_BYTES_KEY: str(64 << 20),
    "spark.sql.parquet.compression.codec": "zstd",
}
# The session setting that lists the keys lsh-spark set itself (comma-separated):
# ``spark.conf`` cannot tell a value set at run time from one the user gave, and
# these may be set again (the sizing below) where the user's never are.
FILLED_KEY = "spark.lsh_spark.filledIn"
# Raised for the index's row-group skipping (lsh_spark.index).
IN_FILTER_KEY = "spark.sql.parquet.pushdown.inFilterThreshold"
# Every session setting lsh-spark changes at run time (see settings_restored).
CHANGED_KEYS = (*DEFAULTS, PARTITIONS_KEY, ADAPTIVE_KEY, FILLED_KEY, IN_FILTER_KEY)
# Inputs up to this size per core get one shuffle partition per core
# (size_shuffle_partitions).
SMALL_BYTES_PER_CORE = 64 << 20
# Rows of the range that default_parallelism splits: more than any cluster has cores.
PARALLELISM_PROBE_ROWS = 1 << 20


def build_session(
    app_name: str,
    remote: str | None = None,
    progress: bool = False,
    master: str | None = None,
    conf: Sequence[tuple[str, str]] = (),
    properties_file: str | None = None,
) -> SparkSession:
    """Get or create the session started by spark-submit, with :data:`DEFAULTS`
    filled in where the user set nothing.

    ``remote`` (``sc://HOST:PORT``) connects to a Spark Connect server instead;
    without it, PySpark connects to ``$SPARK_REMOTE`` when that is set.
    ``progress``: Spark's console progress bar (the driver's, so classic only).
    ``master``, ``conf`` (key, value pairs) and ``properties_file``: the
    ``lsh-spark`` command's ``--master``, ``--conf`` and ``--properties-file``, as
    spark-submit takes them, for a session whose JVM PySpark starts here (under
    spark-submit, its own flags apply); over Spark Connect, ``conf`` sets
    session settings.  A Spark older than 4.0 (the JVM's or the server's) is
    refused with :class:`lsh_spark.versions.UnsupportedSpark`.
    """
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    elif progress:
        builder = builder.config("spark.ui.showConsoleProgress", "true")
    if master:
        builder = builder.master(master)
    for key, value in conf:
        builder = builder.config(key, value)
    with _submit_args(properties_file):
        spark = builder.getOrCreate()
    try:
        check_spark(spark.version, "Spark")
    except UnsupportedSpark:
        spark.stop()
        raise
    fill_defaults(spark)
    return spark


@contextmanager
def _submit_args(properties_file: str | None) -> Iterator[None]:
    """Hand ``--properties-file`` to the spark-submit that PySpark runs to start the
    JVM (through ``PYSPARK_SUBMIT_ARGS``, read when the JVM starts), so the file is
    read by Spark itself: every key, JVM options and memory included, with
    spark-submit's precedence (``--conf`` wins; the file replaces
    spark-defaults.conf)."""
    if properties_file is None:
        yield
        return
    name = "PYSPARK_SUBMIT_ARGS"
    before = os.environ.get(name)
    given = f"--properties-file {shlex.quote(os.path.abspath(properties_file))}"
    os.environ[name] = f"{given} {before or 'pyspark-shell'}"
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


def show_progress_lines() -> None:
    """Send lsh-spark's log lines from INFO up to stderr, in the format of Spark's
    own (``conf/log4j2.properties``), unless the application configured logging
    itself.  The jobs call it; a library user chooses with
    ``logging.getLogger("lsh_spark")``."""
    root, ours = logging.getLogger(), logging.getLogger("lsh_spark")
    if root.handlers or ours.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s lsh-spark: %(message)s", "%y/%m/%d %H:%M:%S")
    )
    ours.addHandler(handler)
    ours.setLevel(logging.INFO)


def fill_defaults(spark: SparkSession) -> None:
    """Set :data:`DEFAULTS` where the user set nothing."""
    for key, value in DEFAULTS.items():
        _fill_in(spark, key, value)


@contextmanager
def settings_restored(spark: SparkSession) -> Iterator[None]:
    """Run the block, then put every setting of :data:`CHANGED_KEYS` back as it
    was (unset if it was unset): for a session lsh-spark did not build, such as
    a notebook's, whose owner's later queries must not run with our shuffle
    sizing."""
    before = {key: spark.conf.get(key, None) for key in CHANGED_KEYS}
    try:
        yield
    finally:
        _restore(spark, before)


def _restore(spark: SparkSession, before: dict[str, str | None]) -> None:
    """Put each setting of ``before`` back to its value there (unset where None)."""
    for key, value in before.items():
        try:
            if value is None:
                spark.conf.unset(key)
            elif spark.conf.get(key, None) != value:
                spark.conf.set(key, value)
        except PySparkException as exc:  # a server that refuses the key
            log.warning("could not restore %s: %s", key, str(exc).strip().splitlines()[0])


@contextmanager
def small_row_batches(spark: SparkSession, row_bytes: int | None) -> Iterator[None]:
    """Plan the block's ``mapInArrow`` inputs, whose rows are at most ``row_bytes``
    each, in Arrow batches of as many rows as :data:`SMALL_ROW_BATCH_BYTES` holds
    (2,048 to :data:`SMALL_ROW_BATCH_ROWS`) and without Spark's byte bound.

    With a byte bound, Spark measures the batch after every row it adds (every
    column vector's buffers, through Arrow's struct vectors): a quarter of the
    JVM's CPU in the candidate stage, whose 16 band rows a document are some 40
    bytes each.  Rows of a known size need no such check.  Settings the user
    gave, and a ``row_bytes`` of None (not known), leave Spark's batching as it
    is.  The settings are read when a query is planned: the block must plan and
    run the queries (a cache materializes when first used).
    """
    if (
        row_bytes is None
        or submitted(spark, ARROW_RECORDS_KEY)
        or submitted(spark, ARROW_BYTES_KEY)
    ):
        yield
        return
    rows = max(2048, min(SMALL_ROW_BATCH_ROWS, SMALL_ROW_BATCH_BYTES // max(1, row_bytes)))
    before = {key: spark.conf.get(key, None) for key in (ARROW_RECORDS_KEY, ARROW_BYTES_KEY)}
    try:
        spark.conf.set(ARROW_RECORDS_KEY, str(rows))
        spark.conf.set(ARROW_BYTES_KEY, str(NO_BATCH_BYTE_BOUND))
    except PySparkException as exc:  # a server that refuses the keys: Spark's batching
        log.warning("Arrow batches of %d rows not set: %s", rows, str(exc).strip().splitlines()[0])
    try:
        yield
    finally:
        _restore(spark, before)


def submitted(spark: SparkSession, key: str) -> bool:
    """Whether the user set ``key`` (``--conf``, a properties file,
    ``spark-defaults.conf``, the builder, ``spark.conf.set``), as opposed to
    Spark's built-in default or a value lsh-spark filled in.

    ``spark.conf.get(key, None)`` gives None for a key nobody set, even one
    with a built-in default.
    """
    return spark.conf.get(key, None) is not None and key not in _filled(spark)


def _filled(spark: SparkSession) -> set[str]:
    return set(filter(None, (spark.conf.get(FILLED_KEY, None) or "").split(",")))


def _fill_in(spark: SparkSession, key: str, value: str) -> None:
    """Set ``key`` to ``value`` unless the user set it, and record it as ours.

    A server that does not let sessions set ``key`` (some managed Spark Connect
    services allow only a few settings) keeps its own value, with a warning.
    """
    if submitted(spark, key):
        return
    try:
        spark.conf.set(key, value)
        spark.conf.set(FILLED_KEY, ",".join(sorted(_filled(spark) | {key})))
    except PySparkException as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.warning("could not set %s=%s, Spark's value applies: %s", key, value, reason)


def size_shuffle_partitions(
    spark: SparkSession, data_bytes: int, bytes_per_partition: int = 32 << 20, cap: int = 10_000
) -> int:
    """Set ``spark.sql.shuffle.partitions`` from the data size, unless the user set it.

    An input of up to ``SMALL_BYTES_PER_CORE`` per core gets one partition per
    core (a second one per core only adds tasks, each of which deserializes its
    stage's plan and opens an Arrow stream to a Python worker); a larger one one
    partition per 32 MiB (so at least two per core), at most ``cap``, and
    adaptive execution then coalesces small ones and splits skewed ones.  The
    fixed default of 200 costs seconds of task overhead on small inputs and is
    too few for terabytes.  Adaptive execution itself is then switched by
    :func:`size_adaptive_execution`.  Returns the number of partitions.
    """
    cores = default_parallelism(spark)
    if submitted(spark, PARTITIONS_KEY):
        n = int(spark.conf.get(PARTITIONS_KEY))
    else:
        n = shuffle_partitions_for(data_bytes, cores, bytes_per_partition, cap)
        _fill_in(spark, PARTITIONS_KEY, str(n))
    size_adaptive_execution(spark, n, cores)
    return n


def shuffle_partitions_for(
    data_bytes: int, cores: int, bytes_per_partition: int = 32 << 20, cap: int = 10_000
) -> int:
    """The shuffle partitions :func:`size_shuffle_partitions` gives ``data_bytes``.

    >>> shuffle_partitions_for(10 << 20, cores=2), shuffle_partitions_for(1 << 30, cores=2)
    (2, 32)
    """
    if data_bytes <= SMALL_BYTES_PER_CORE * cores:
        return cores
    return max(2 * cores, min(cap, -(-data_bytes // bytes_per_partition)))


def default_parallelism(spark: SparkSession) -> int:
    """The cores Spark spreads a scan over (``SparkContext.defaultParallelism``:
    the local cores, or the executors' on a cluster), through the DataFrame API
    that Spark Connect has too: ``spark.range`` without a partition count is
    split into that many partitions."""
    rows = spark.range(0, PARALLELISM_PROBE_ROWS)
    partition = rows.select(F.spark_partition_id().alias("partition"))
    return partition.agg(F.max("partition")).first()[0] + 1


def local_frame(
    spark: SparkSession, rows: Iterable[Sequence[Any]], schema: str | StructType
) -> DataFrame:
    """A DataFrame of a few rows held by the driver (``schema`` a StructType or a
    DDL string such as ``"id string, n int"``), built through Arrow so it is kept in the query
    plan: reading it runs no Python.  ``createDataFrame`` of a Python list makes,
    in classic mode, an RDD of pickled rows that every query reading it unpickles
    again in Python workers, one task per core.

    >>> rows = [("a", [1, 2]), ("b", None)]
    >>> local_frame(getfixture("spark"), rows, "id string, s array<int>").collect()
    [Row(id='a', s=[1, 2]), Row(id='b', s=None)]
    """
    struct = DataType.fromDDL(schema) if isinstance(schema, str) else schema
    if not isinstance(struct, StructType):
        raise TypeError(f"local_frame: schema {schema!r} is not a list of columns")
    columns = list(zip(*rows, strict=True)) or [()] * len(struct.fields)
    arrays = [
        pa.array(list(values), type=to_arrow_type(field.dataType))
        for field, values in zip(struct.fields, columns, strict=True)
    ]
    return spark.createDataFrame(pa.Table.from_arrays(arrays, names=struct.names), struct)


def classic_context(spark: SparkSession) -> SparkContext | None:
    """The session's SparkContext in classic mode; None over Spark Connect, which
    has none.  The one place lsh-spark reaches it (the Spark UI's job
    descriptions and address)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return None
    return spark.sparkContext


def adaptive_enabled(spark: SparkSession) -> bool:
    """Whether the session's queries run with adaptive execution."""
    return spark.conf.get(ADAPTIVE_KEY).strip().lower() == "true"


def size_adaptive_execution(spark: SparkSession, shuffle_partitions: int, cores: int) -> bool:
    """Adaptive query execution on, unless the shuffles have at most two
    partitions per core (``cores``: :func:`default_parallelism`); the user's
    ``spark.sql.adaptive.enabled`` always wins.

    Adaptive execution coalesces small shuffle partitions and splits skewed
    ones, which pays where there are many partitions of data.  With that few
    (inputs up to 64 MiB per core) there is nothing to coalesce, and it only
    makes every query stage a job of its own, planned again after the stage
    before it.  Returns whether it is on.
    """
    if submitted(spark, ADAPTIVE_KEY):
        return adaptive_enabled(spark)
    on = shuffle_partitions > 2 * cores
    _fill_in(spark, ADAPTIVE_KEY, "true" if on else "false")
    return on


def in_background(spark: SparkSession, name: str, tag: str, work: Callable[[], T_]) -> Future[T_]:
    """Run ``work`` in a daemon thread ``name`` whose Spark jobs carry the tag
    ``tag`` (``SparkSession.addTag``: per thread, so the caller's jobs are not
    tagged), and return its future: ``Future.result`` gives what ``work``
    returned or re-raises what it raised.

    For a small job beside the run's own (a check, a report figure, the input's
    schema): it spends most of its time in planning and scheduling with the
    cores idle, and beside another job those gaps overlap that job's tasks.
    """
    future: Future[T_] = Future()

    def run() -> None:
        spark.addTag(tag)
        try:
            future.set_result(work())
        except BaseException as exc:  # noqa: BLE001 (re-raised by future.result())
            future.set_exception(exc)
        finally:
            spark.removeTag(tag)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


# -- job tags: which pipeline stage a Spark job belongs to --------------------
TAG_PREFIX = "lsh-spark:"
# The Spark UI's description of a stage's jobs: the prefix and the stage's name.
DESCRIPTION_PREFIX = "lsh-spark: "


def job_tag(stage: str) -> str:
    """The Spark job tag of pipeline stage ``stage``'s jobs."""
    return TAG_PREFIX + stage


def stage_of_job(tags: Iterable[str], description: str | None) -> str | None:
    """The pipeline stage of a Spark job, from its tags as Spark lists them (the
    event log, the REST API: a tag added with ``SparkSession.addTag`` carries a
    prefix naming its session and thread) or else its description (a job that
    runs outside a SQL execution, such as JSON schema inference, gets no session
    tag); None for a job of no stage.

    >>> stage_of_job(["spark-session-1", "spark-session-1-thread-7-lsh-spark:verify"], None)
    'verify'
    >>> stage_of_job([], "lsh-spark: read"), stage_of_job([], None)
    ('read', None)
    """
    for tag in tags:
        at = tag.find(TAG_PREFIX)
        if at >= 0:
            return tag[at + len(TAG_PREFIX) :]
    if description and description.startswith(DESCRIPTION_PREFIX):
        return description[len(DESCRIPTION_PREFIX) :]
    return None


@contextmanager
def tagged(spark: SparkSession | None, stage: str) -> Iterator[None]:
    """Tag the Spark jobs this thread starts inside the block with :func:`job_tag`,
    so the Spark UI and the event log attribute them (and their shuffle volume)
    to a pipeline stage, and describe them as ``lsh-spark: <stage>`` in the Spark
    UI's job list.  ``spark=None``: no tag."""
    if spark is None:
        yield
        return
    tag = job_tag(stage)
    spark.addTag(tag)
    described = _describe(spark, DESCRIPTION_PREFIX + stage)
    try:
        yield
    finally:
        spark.removeTag(tag)
        if described is not None:
            described()


# The local property the Spark UI shows as a job's description.
JOB_DESCRIPTION = "spark.job.description"


def _describe(spark: SparkSession, text: str) -> Callable[[], None] | None:
    """Set this thread's job description to ``text``; return what puts the previous
    one back.  Classic sessions only: Spark Connect has no call for it (its jobs
    carry the tag), so there it does nothing and returns None."""
    context = classic_context(spark)
    if context is None:
        return None
    before = context.getLocalProperty(JOB_DESCRIPTION)
    context.setJobDescription(text)
    return lambda: context.setLocalProperty(JOB_DESCRIPTION, before)
