"""The session: defaults that never override the user, shuffle sizing, background
jobs, and conf/local.properties."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import lsh_spark.session
from lsh_spark.session import (
    ADAPTIVE_KEY,
    DEFAULTS,
    FILLED_KEY,
    _fill_in,
    build_session,
    default_parallelism,
    in_background,
    size_adaptive_execution,
    size_shuffle_partitions,
    small_row_batches,
    submitted,
)

ROOT = Path(__file__).resolve().parent.parent
LOCAL_PROPERTIES = ROOT / "conf" / "local.properties"


@pytest.fixture
def restored(spark):
    """The test session, with the settings a test fills in removed afterwards."""
    before = {key: spark.conf.get(key, None) for key in [*DEFAULTS, FILLED_KEY]}
    yield spark
    for key, value in before.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def test_build_session_fills_in_defaults_and_keeps_the_users(restored):
    spark = restored
    codec = "spark.sql.parquet.compression.codec"
    spark.conf.unset(codec)
    assert spark.conf.get(codec, None) is None  # nobody set it: Spark's default applies
    # The test session's builder set these two.
    users = {
        key: spark.conf.get(key)
        for key in (ADAPTIVE_KEY, "spark.sql.execution.arrow.maxRecordsPerBatch")
    }
    assert build_session("lsh-spark-test") is spark
    assert spark.conf.get(codec) == "zstd"
    assert spark.conf.get("spark.sql.execution.arrow.maxBytesPerBatch") == str(64 << 20)
    assert not submitted(spark, codec)  # filled in by lsh-spark, not the user's
    assert {key: spark.conf.get(key) for key in users} == users
    assert all(submitted(spark, key) for key in users)


def test_submitted_tells_the_users_settings_from_defaults(restored):
    spark = restored
    assert submitted(spark, "spark.sql.shuffle.partitions")  # the builder's
    assert submitted(spark, "spark.master")
    key = "spark.lsh.test.runtimeOnly"
    assert not submitted(spark, key)
    spark.conf.set(key, "1")  # a user's spark.conf.set counts too
    try:
        assert submitted(spark, key)
    finally:
        spark.conf.unset(key)


class _Conf(dict):
    """``spark.conf`` of a stand-in session: what the user set, and what was set since."""

    def get(self, key, default=None):
        return dict.get(self, key, default)

    def set(self, key, value):
        self[key] = value


class _Sized:
    """The parts of a session that the sizing functions use: its settings and its
    cores (which :func:`sized_cores` has default_parallelism return)."""

    def __init__(self, cores, user=None):
        self.conf = _Conf(user or {})
        self.cores = cores


@pytest.fixture(autouse=True)
def sized_cores(monkeypatch):
    """default_parallelism of a stand-in session is its ``cores``; of a real one, Spark's."""
    real = lsh_spark.session.default_parallelism
    monkeypatch.setattr(
        lsh_spark.session,
        "default_parallelism",
        lambda spark: spark.cores if isinstance(spark, _Sized) else real(spark),
    )


def test_default_parallelism_is_sparks(spark):
    # The test session sets spark.default.parallelism to 4 (its master is local[2]).
    assert default_parallelism(spark) == int(spark.conf.get("spark.default.parallelism")) == 4


def test_partitions_from_the_input_size_and_adaptive_execution_off_at_the_floor():
    small = _Sized(cores=2)
    assert size_shuffle_partitions(small, 112 << 20) == 2  # 41k documents: one per core
    assert small.conf[ADAPTIVE_KEY] == "false"
    edge = _Sized(cores=2)
    assert size_shuffle_partitions(edge, 128 << 20) == 2  # 64 MiB per core, the most
    assert edge.conf[ADAPTIVE_KEY] == "false"
    large = _Sized(cores=2)
    assert size_shuffle_partitions(large, 129 << 20) == 5  # one per 32 MiB above it
    assert large.conf[ADAPTIVE_KEY] == "true"
    just = _Sized(cores=2)
    # Just above the small inputs, never fewer than two per core (adaptive off).
    assert size_shuffle_partitions(just, 129 << 20, bytes_per_partition=1 << 30) == 4
    assert just.conf[ADAPTIVE_KEY] == "false"
    cluster = _Sized(cores=64)
    assert size_shuffle_partitions(cluster, 10 << 30) == 320
    assert cluster.conf[ADAPTIVE_KEY] == "true"
    # What lsh-spark set is sized again for another input; the user's never is.
    assert size_shuffle_partitions(small, 10 << 30) == 320
    assert small.conf[ADAPTIVE_KEY] == "true"
    fixed = _Sized(cores=2, user={"spark.sql.shuffle.partitions": "200"})
    assert size_shuffle_partitions(fixed, 1 << 20) == 200
    assert fixed.conf[ADAPTIVE_KEY] == "true"


@pytest.mark.parametrize("value", ["true", "false"])
def test_users_adaptive_setting_always_wins(value):
    for partitions in (4, 400):
        user = _Sized(cores=2, user={ADAPTIVE_KEY: value})
        assert size_adaptive_execution(user, partitions, cores=2) is (value == "true")
        assert user.conf[ADAPTIVE_KEY] == value


def test_a_setting_the_server_refuses_keeps_its_value_with_a_warning(caplog):
    from pyspark.errors import PySparkException

    class Refusing(_Conf):
        def set(self, key, value):
            raise PySparkException(f"[CANNOT_MODIFY_CONFIG] Cannot modify {key}")

    spark = _Sized(cores=2)
    spark.conf = Refusing()
    with caplog.at_level("WARNING", logger="lsh_spark.session"):
        assert size_shuffle_partitions(spark, 1 << 30) == 32  # sized all the same
    assert "spark.sql.shuffle.partitions" not in spark.conf
    assert "could not set spark.sql.shuffle.partitions=32" in caplog.text
    assert "CANNOT_MODIFY_CONFIG" in caplog.text


def test_adaptive_execution_lsh_spark_switched_is_sized_again():
    spark = _Sized(cores=2)
    for key, value in DEFAULTS.items():  # as build_session fills them in
        _fill_in(spark, key, value)
    assert ADAPTIVE_KEY not in spark.conf  # Spark's default (on) applies
    assert size_shuffle_partitions(spark, 1 << 20) == 2
    assert spark.conf[ADAPTIVE_KEY] == "false"
    # A later, larger job in the same session: lsh-spark's own "false" is not the user's.
    assert size_shuffle_partitions(spark, 1 << 30) > 4
    assert spark.conf[ADAPTIVE_KEY] == "true"


def test_in_background_runs_in_its_thread_with_its_tag_and_hands_back_errors(spark):
    seen = {}

    def work():
        seen["thread"] = threading.current_thread().name
        seen["tags"] = spark.getTags()
        return spark.range(10).count()

    assert in_background(spark, "lsh-spark-test", "lsh-spark:test", work).result(timeout=120) == 10
    assert seen == {"thread": "lsh-spark-test", "tags": {"lsh-spark:test"}}
    # The caller's jobs are not tagged.
    assert "lsh-spark:test" not in spark.getTags()

    def fails():
        raise ValueError("from the background")

    with pytest.raises(ValueError, match="from the background"):
        in_background(spark, "lsh-spark-test", "lsh-spark:test", fails).result(timeout=120)


def _properties(path: Path) -> dict[str, str]:
    """A Spark properties file's settings (``key value`` or ``key=value`` lines)."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        # Java's rule: the key ends at the first blank, '=' or ':'.
        key, value = re.fullmatch(r"([^\s=:]+)\s*[=:]?\s*(.*)", line).groups()
        assert key not in out, f"{key} given twice"
        out[key] = value
    return out


# Spark core settings (https://spark.apache.org/docs/latest/configuration.html) and
# PySpark's; the spark.sql.* keys are checked against the session's ``SET -v``.
CORE_KEYS = {
    "spark.driver.extraJavaOptions",
    "spark.ui.enabled",
    "spark.task.maxDirectResultSize",
    "spark.python.sql.dataFrameDebugging.enabled",
}


# Real Spark SQL settings that ``SET -v`` leaves out because Spark 4.0 marks them
# internal; test_arrow_batches_to_python_are_bounded_by_bytes shows it acts.
INTERNAL_SQL_KEYS = {"spark.sql.execution.arrow.maxBytesPerBatch"}


def test_local_properties_sets_real_spark_keys_and_the_sessions_defaults(spark):
    props = _properties(LOCAL_PROPERTIES)
    sql_keys = {r[0] for r in spark.sql("SET -v").collect()} | INTERNAL_SQL_KEYS
    # The Arrow batch sizes are left out, so that lsh-spark can size the candidate
    # stage's batches of small rows (small_row_batches; a value in the file is the user's).
    arrow = {
        "spark.sql.execution.arrow.maxRecordsPerBatch",
        "spark.sql.execution.arrow.maxBytesPerBatch",
    }
    assert set(props) == CORE_KEYS | (set(DEFAULTS) - arrow)
    assert {k for k in props if k.startswith("spark.sql.")} <= sql_keys
    # The SQL defaults are those lsh-spark fills in; adaptive execution is left out
    # so that lsh-spark can size it (a value in the file is the user's).
    assert ADAPTIVE_KEY not in props
    assert {k: v for k, v in props.items() if k in DEFAULTS} == {
        k: v for k, v in DEFAULTS.items() if k not in arrow
    }
    assert not arrow & set(props)
    assert props["spark.ui.enabled"] == "false"
    assert props["spark.task.maxDirectResultSize"] == "64m"
    assert props["spark.python.sql.dataFrameDebugging.enabled"] == "false"
    opts = props["spark.driver.extraJavaOptions"].split()
    assert "-XX:+UseParallelGC" in opts and "-XX:Tier4InvocationThreshold=150000" in opts
    assert all(o.startswith("-XX:") for o in opts)  # logging is given by the scripts


def test_arrow_batches_to_python_are_bounded_by_bytes(spark):
    # 40 texts of 300 KB: one Arrow batch by rows; batches of about 1 MiB (Spark
    # closes a batch once it has reached the bound) with the byte bound.
    key = "spark.sql.execution.arrow.maxBytesPerBatch"
    df = spark.range(40).repartition(1).select(F.repeat(F.lit("x"), 300_000).alias("t"))

    def rows(batches):
        for batch in batches:
            yield pa.RecordBatch.from_pydict({"n": [batch.num_rows]})

    old = spark.conf.get(key)
    try:
        spark.conf.set(key, str(1 << 20))
        bounded = [r["n"] for r in df.mapInArrow(rows, "n long").collect()]
    finally:
        spark.conf.set(key, old)
    assert sum(bounded) == 40 and max(bounded) == 4
    assert DEFAULTS[key] == str(64 << 20)


SHOW = """
import json, os, sys
from lsh_spark.session import build_session
spark = build_session("props", **json.loads(sys.argv[1]))  # the lsh-spark command's flags
keys = ["spark.ui.enabled", "spark.task.maxDirectResultSize", "spark.sql.adaptive.enabled",
        "spark.sql.parquet.compression.codec", "spark.driver.extraJavaOptions", "spark.master"]
shown = {k: spark.conf.get(k, None) for k in keys}
print(json.dumps({**shown, "PYSPARK_SUBMIT_ARGS": os.environ.get("PYSPARK_SUBMIT_ARGS")}))
spark.stop()
"""


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["spark-submit", "lsh-spark"])
def test_local_properties_are_read_and_conf_flags_win(tmp_path, launcher):
    """spark-submit --properties-file conf/local.properties --conf ..., and the same
    through build_session's master, conf and properties_file (the lsh-spark
    command's flags, in a Python process that starts the JVM itself): the file's
    JVM options reach the JVM, --conf wins over the file."""
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    codec = ("spark.sql.parquet.compression.codec", "snappy")
    if launcher == "spark-submit":
        submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
        cmd = [submit, "--master", "local[1]", "--properties-file", str(LOCAL_PROPERTIES)]
        cmd += ["--conf", "=".join(codec), str(script), "{}"]
    else:
        flags = dict(master="local[1]", conf=[codec], properties_file=str(LOCAL_PROPERTIES))
        cmd = [sys.executable, str(script), json.dumps(flags)]
    run = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": str(ROOT),
        },
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["spark.master"] == "local[1]"
    assert got["spark.ui.enabled"] == "false"
    assert got["spark.task.maxDirectResultSize"] == "64m"
    assert got["spark.sql.parquet.compression.codec"] == "snappy"  # --conf wins
    # Not set by the file or by build_session: Spark's own default (on) applies.
    assert got["spark.sql.adaptive.enabled"] is None
    assert "-XX:+UseParallelGC" in got["spark.driver.extraJavaOptions"]
    if launcher == "lsh-spark":
        assert got["PYSPARK_SUBMIT_ARGS"] is None  # put back once the JVM started
        assert json.loads(run.stdout) == got  # nothing else on stdout


class _Builder:
    """SparkSession.builder for a session on a given Spark version: records what it
    was given and the PYSPARK_SUBMIT_ARGS the JVM would start with."""

    def __init__(self, version: str) -> None:
        self.version, self.given, self.stopped = version, [], False

    def __getattr__(self, name):  # appName, master, config, remote
        return lambda *args: self.given.append((name, *args)) or self

    def getOrCreate(self):
        self.submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS")
        return self

    def stop(self) -> None:
        self.stopped = True


def test_a_spark_before_4_is_refused_once_the_session_is_up(monkeypatch, tmp_path):
    """A Spark 3.5 JVM (SPARK_HOME) or Connect server behind a PySpark 4 client is
    refused with the one line of lsh_spark.versions, and its session stopped;
    --properties-file goes to the JVM's spark-submit ahead of the user's own
    PYSPARK_SUBMIT_ARGS, which is put back afterwards."""
    from lsh_spark.versions import UnsupportedSpark

    old = _Builder("3.5.2")
    monkeypatch.setattr(lsh_spark.session.SparkSession, "builder", old)
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-memory 2g pyspark-shell")
    props = tmp_path / "my spark.properties"
    with pytest.raises(UnsupportedSpark, match=r"needs Spark 4.0 to 4.3 .*found Spark 3.5.2"):
        build_session("x", master="local[1]", conf=[("a", "1")], properties_file=str(props))
    assert old.stopped
    assert old.given == [("appName", "x"), ("master", "local[1]"), ("config", "a", "1")]
    quoted = f"'{props}'"  # a path with a space, quoted for spark-submit's command line
    assert old.submit_args == f"--properties-file {quoted} --driver-memory 2g pyspark-shell"
    assert os.environ["PYSPARK_SUBMIT_ARGS"] == "--driver-memory 2g pyspark-shell"


def test_stage_jobs_are_described_in_the_spark_ui(spark):
    """tagged() sets the job description the Spark UI lists (classic sessions),
    per thread, and puts the previous one back."""
    from lsh_spark.session import JOB_DESCRIPTION, tagged

    context = spark.sparkContext
    assert context.getLocalProperty(JOB_DESCRIPTION) is None
    with tagged(spark, "verify"):
        assert context.getLocalProperty(JOB_DESCRIPTION) == "lsh-spark: verify"
        with tagged(spark, "report"):
            assert context.getLocalProperty(JOB_DESCRIPTION) == "lsh-spark: report"
        assert context.getLocalProperty(JOB_DESCRIPTION) == "lsh-spark: verify"
        assert spark.range(3).count() == 3
    assert context.getLocalProperty(JOB_DESCRIPTION) is None


def _batch_sizes(spark, n: int) -> list[int]:
    """The sizes of the Arrow batches a one-partition ``mapInArrow`` of ``n`` rows gets."""

    def sizes(batches):
        for b in batches:
            yield pa.RecordBatch.from_arrays([pa.array([b.num_rows], pa.int64())], names=["n"])

    df = spark.range(n).repartition(1).selectExpr("cast(id as string) as id")
    return sorted((r.n for r in df.mapInArrow(sizes, "n long").collect()), reverse=True)


def test_small_row_batches_plan_large_batches_without_the_byte_check(restored):
    spark = restored
    records, nbytes = (
        "spark.sql.execution.arrow.maxRecordsPerBatch",
        "spark.sql.execution.arrow.maxBytesPerBatch",
    )
    # 64 rows a batch that the user set (as the test session's builder does): kept.
    spark.conf.set(FILLED_KEY, "")
    spark.conf.set(records, "64")
    spark.conf.unset(nbytes)
    with small_row_batches(spark, 40):
        assert _batch_sizes(spark, 1000) == [64] * 15 + [40]
    # Settings lsh-spark filled in (2,048 rows, 64 MiB) give way inside the block.
    spark.conf.unset(records)
    build_session("lsh-spark-test")
    assert _batch_sizes(spark, 10000) == [2048] * 4 + [1808]
    with small_row_batches(spark, 40):
        assert spark.conf.get(nbytes) == str((1 << 31) - 1)  # Spark's "no bound"
        assert _batch_sizes(spark, 10000) == [10000]
    with small_row_batches(spark, 10000):  # 64 MiB / 10,000 bytes: 6,710 rows
        assert _batch_sizes(spark, 10000) == [6710, 3290]
    with small_row_batches(spark, None):  # rows of unknown size: as they were
        assert _batch_sizes(spark, 10000) == [2048] * 4 + [1808]
    assert (spark.conf.get(records), spark.conf.get(nbytes)) == ("2048", str(64 << 20))
    # A byte bound the user gave (a session lsh-spark filled nothing in) is kept,
    # and so is the batching.
    spark.conf.set(FILLED_KEY, "")
    spark.conf.set(nbytes, str(32 << 20))
    assert submitted(spark, nbytes)
    with small_row_batches(spark, 40):
        assert _batch_sizes(spark, 10000) == [2048] * 4 + [1808]
