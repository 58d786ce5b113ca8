"""Session start and stop: the end-of-job stop, the venv's pyspark import path and the
JVM options of the set-up."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest

from lsh_spark.session import in_background, stop_session

ROOT = Path(__file__).resolve().parent.parent


class _Server:
    server_shutdown = False


class _Context:
    def __init__(self, server):
        self._accumulatorServer = server


class _Session:
    """Records what ``stop()`` saw of the accumulator server."""

    def __init__(self, server, fail: bool = False):
        self.sparkContext = _Context(server)
        self.fail = fail
        self.stopped_with = "not stopped"

    def stop(self):
        self.stopped_with = self.sparkContext._accumulatorServer
        if self.fail:
            raise RuntimeError("JVM gone")


def test_stop_session_stops_without_the_accumulator_server_then_flags_it():
    server = _Server()
    spark = _Session(server)
    stop_session(spark)
    assert spark.stopped_with is None  # stop() did not wait for the server
    assert server.server_shutdown  # its handler ends at its next poll
    assert spark.sparkContext._accumulatorServer is None


def test_stop_session_flags_the_server_when_stop_fails():
    server = _Server()
    with pytest.raises(RuntimeError, match="JVM gone"):
        stop_session(_Session(server, fail=True))
    assert server.server_shutdown


@pytest.mark.parametrize("server", [None, object()])
def test_stop_session_is_a_plain_stop_without_a_known_server(server):
    spark = _Session(server)
    stop_session(spark)
    assert spark.stopped_with is server


def _pyspark_site():
    spec = importlib.util.spec_from_file_location("pyspark_site", ROOT / "scripts" / "pyspark_site.py")
    module = importlib.util.module_from_spec(spec)
    env = os.environ.get("LSH_SPARK_PYSPARK_ZIP")
    os.environ["LSH_SPARK_PYSPARK_ZIP"] = "1"  # load it without touching sys.path
    try:
        spec.loader.exec_module(module)
    finally:
        if env is None:
            del os.environ["LSH_SPARK_PYSPARK_ZIP"]
        else:
            os.environ["LSH_SPARK_PYSPARK_ZIP"] = env
    return module


def test_pyspark_site_moves_only_the_zips_of_its_own_pyspark(tmp_path):
    site = tmp_path / "site-packages"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    own = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    other = str(tmp_path / "spark" / "python" / "lib" / "pyspark.zip")
    path = [own[0], own[1], other, str(tmp_path / "code"), str(site)]
    assert _pyspark_site().reordered(path, str(site)) == [other, str(tmp_path / "code"),
                                                          str(site), *own]
    # Another Spark installation's zips (a cluster's SPARK_HOME) stay first.
    assert _pyspark_site().reordered([other, str(site)], str(site)) == [other, str(site)]


def test_pyspark_site_follows_symbolic_links(tmp_path):
    site = tmp_path / "site-packages"
    (site / "pyspark" / "python" / "lib").mkdir(parents=True)
    (tmp_path / "lib64").symlink_to(site)
    linked = str(tmp_path / "lib64" / "pyspark" / "python" / "lib" / "pyspark.zip")
    assert _pyspark_site().reordered([linked, "x"], str(site)) == ["x", linked]


def test_venv_imports_pyspark_from_site_packages_not_the_zip():
    purelib = Path(sysconfig.get_paths()["purelib"])
    if not (purelib / "_lsh_spark_pyspark_site.pth").exists():
        pytest.skip("not the virtualenv of scripts/setup-env.sh")
    lib = purelib / "pyspark" / "python" / "lib"
    zips = sorted(str(p) for p in lib.glob("*.zip"))
    assert len(zips) == 2  # pyspark.zip and py4j's, as spark-submit puts them first
    code = "import pyspark, py4j; print(pyspark.__file__); print(py4j.__file__)"

    def files(**env):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(zips),
                                              **env})
        return run.stdout.split()

    assert all(not any(z in f for z in zips) for f in files())
    assert all(f.startswith(str(purelib)) for f in files())
    # The switch keeps Spark's order.
    assert all(any(f.startswith(z) for z in zips) for f in files(LSH_SPARK_PYSPARK_ZIP="1"))


def _submit_opts(**env) -> str:
    """``SPARK_SUBMIT_OPTS`` after sourcing scripts/setup-env.sh twice with ``env``."""
    setup = ROOT / "scripts" / "setup-env.sh"
    script = f"source '{setup}'; source '{setup}'; " 'printf "%s" "${SPARK_SUBMIT_OPTS:-}"'
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "SPARK_SUBMIT_OPTS": "", **env})
    return run.stdout


def test_setup_env_selects_the_parallel_collector_once():
    if "LSH_SPARK_EXTRAS" not in os.environ or "LSH_SPARK_GC_OPTS" not in os.environ:
        pytest.skip("not run through scripts/test.sh (sourcing the set-up could reinstall)")
    opts = _submit_opts().split()
    assert opts.count("-XX:+UseParallelGC") == 1
    # The JIT thresholds are still there, once.
    assert opts.count("-XX:Tier4InvocationThreshold=150000") == 1
    # And the class-data sharing archive, when the set-up built one.
    assert sum(o.startswith("-XX:SharedArchiveFile=") for o in opts) <= 1
    off = _submit_opts(LSH_SPARK_GC="0").split()
    assert "-XX:+UseParallelGC" not in off
    assert "-XX:Tier4InvocationThreshold=150000" in off


def _printed_opts(**env) -> dict:
    """What ``bash scripts/jvm-opts.sh`` prints, as a dict, with ``env``."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("SPARK_SUBMIT_OPTS", "LSH_SPARK_JIT_OPTS", "LSH_SPARK_GC_OPTS")}
    run = subprocess.run(["bash", str(ROOT / "scripts" / "jvm-opts.sh")], capture_output=True,
                         text=True, check=True, env={**clean, **env})
    return dict(line.split("=", 1) for line in run.stdout.splitlines())


def test_jvm_opts_printed_alone_are_the_sourced_set_ups():
    if "LSH_SPARK_EXTRAS" not in os.environ or "LSH_SPARK_GC_OPTS" not in os.environ:
        pytest.skip("not run through scripts/test.sh (sourcing the set-up could reinstall)")
    printed = _printed_opts()
    assert printed["SPARK_SUBMIT_OPTS"].split() == _submit_opts().split()
    assert printed["LSH_SPARK_GC_OPTS"] == "-XX:+UseParallelGC"
    assert "-XX:Tier4InvocationThreshold=150000" in printed["LSH_SPARK_JIT_OPTS"].split()
    # The switches work alone too, and the user's own options come first.
    off = _printed_opts(LSH_SPARK_JIT="0", LSH_SPARK_GC="0", LSH_SPARK_CDS="0",
                        SPARK_SUBMIT_OPTS="-Dmine=1")
    assert off == {"SPARK_SUBMIT_OPTS": "-Dmine=1", "LSH_SPARK_JIT_OPTS": "",
                   "LSH_SPARK_GC_OPTS": ""}


def test_driver_jvm_runs_the_collector_the_set_up_chose(spark):
    if "-XX:+UseParallelGC" not in os.environ.get("SPARK_SUBMIT_OPTS", "").split():
        pytest.skip("SPARK_SUBMIT_OPTS does not select the parallel collector")
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory \
        .getGarbageCollectorMXBeans()
    names = {beans.get(i).getName() for i in range(beans.size())}
    # HotSpot's names for Parallel GC's young and old collectors (G1's are "G1 ...").
    assert names == {"PS Scavenge", "PS MarkSweep"}


class _Conf(dict):
    def contains(self, key):
        return key in self

    def get(self, key, default=None):
        return dict.get(self, key, default)

    def set(self, key, value):
        self[key] = value


class _Sized:
    """The parts of a session that the sizing functions use."""

    def __init__(self, cores, submitted=None):
        self.conf = _Conf()
        self.sparkContext = type("SC", (), {"defaultParallelism": cores,
                                             "getConf": lambda _self: _Conf(submitted or {})})()
        self.conf.update(submitted or {})


def test_adaptive_execution_off_only_at_the_partition_floor():
    from lsh_spark.session import size_shuffle_partitions

    small = _Sized(cores=2)
    assert size_shuffle_partitions(small, 112 << 20) == 2  # 41k documents: one per core
    assert small.conf["spark.sql.adaptive.enabled"] == "false"
    edge = _Sized(cores=2)
    assert size_shuffle_partitions(edge, 128 << 20) == 2  # 64 MiB per core, the most
    assert edge.conf["spark.sql.adaptive.enabled"] == "false"
    large = _Sized(cores=2)
    assert size_shuffle_partitions(large, 129 << 20) == 5  # one per 32 MiB above it
    assert large.conf["spark.sql.adaptive.enabled"] == "true"
    just = _Sized(cores=2)
    # Just above the small inputs, never fewer than two per core (adaptive off).
    assert size_shuffle_partitions(just, 129 << 20, bytes_per_partition=1 << 30) == 4
    assert just.conf["spark.sql.adaptive.enabled"] == "false"
    cluster = _Sized(cores=64)
    assert size_shuffle_partitions(cluster, 10 << 30) == 320
    assert cluster.conf["spark.sql.adaptive.enabled"] == "true"
    # The user's partitions count as the data's.
    fixed = _Sized(cores=2, submitted={"spark.sql.shuffle.partitions": "200"})
    assert size_shuffle_partitions(fixed, 1 << 20) == 200
    assert fixed.conf["spark.sql.adaptive.enabled"] == "true"


@pytest.mark.parametrize("value", ["true", "false"])
def test_users_adaptive_setting_always_wins(value):
    from lsh_spark.session import size_adaptive_execution

    for partitions in (4, 400):
        user = _Sized(cores=2, submitted={"spark.sql.adaptive.enabled": value})
        assert size_adaptive_execution(user, partitions) is (value == "true")
        assert user.conf["spark.sql.adaptive.enabled"] == value


def test_submitted_tells_the_contexts_settings_from_run_time_ones(spark):
    from lsh_spark.session import submitted

    # The test session's builder set these; the run-time conf does not count.
    assert submitted(spark, "spark.sql.shuffle.partitions")
    assert submitted(spark, "spark.master")
    key = "spark.lsh.test.runtimeOnly"
    spark.conf.set(key, "1")
    try:
        assert not submitted(spark, key)
    finally:
        spark.conf.unset(key)


NO_UI = {"spark.ui.enabled": "false"}


@pytest.mark.parametrize("settings,want", [
    ({"spark.master": "local[2]"}, {"spark.task.maxDirectResultSize": "64m", **NO_UI}),
    ({"spark.master": "local"}, {"spark.task.maxDirectResultSize": "64m", **NO_UI}),
    ({"spark.master": "local-cluster[2,1,1024]"}, {}),
    ({"spark.master": "local[*]", "spark.task.maxDirectResultSize": "4m"}, NO_UI),
    ({"spark.master": "local[2]", "spark.ui.enabled": "true"},
     {"spark.task.maxDirectResultSize": "64m"}),
    ({"spark.master": "spark://head:7077"}, {}),
    ({"spark.master": "yarn"}, {}),
    ({}, {}),
])
def test_context_defaults_direct_results_and_no_web_ui_in_local_mode_only(settings, want):
    """Local masters: task results sent directly and no web UI, unless given."""
    from pyspark import SparkConf

    from lsh_spark.session import DEBUGGING_KEY, context_defaults

    given = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    assert context_defaults(given) == {DEBUGGING_KEY: "false", **want}


@pytest.mark.parametrize("given,want", [(None, "false"), ("true", None), ("false", None)])
def test_context_defaults_turn_dataframe_debugging_off_unless_given(given, want):
    """PySpark's call-site capture is off by default; a user's setting is kept."""
    from pyspark import SparkConf

    from lsh_spark.session import DEBUGGING_KEY, context_defaults

    conf = SparkConf(loadDefaults=False).set("spark.master", "yarn")
    if given is not None:
        conf.set(DEBUGGING_KEY, given)
    assert context_defaults(conf).get(DEBUGGING_KEY) == want


@pytest.mark.parametrize("master,local,cores", [
    ("local", True, 1), ("local[2]", True, 2), ("local[3, 4]", True, 3),
    ("local[*]", True, os.cpu_count()), ("local-cluster[2,1,1024]", False, None),
    ("spark://head:7077", False, None), ("yarn", False, None),
])
def test_local_masters_and_their_cores(master, local, cores):
    from lsh_spark.session import local_cores, local_master

    assert local_master(master) is local
    if local:
        assert local_cores(master) == cores


def test_in_background_runs_in_its_thread_and_job_group_and_hands_back_errors(spark):
    seen = {}

    def work():
        seen["thread"] = threading.current_thread().name
        seen["group"] = spark.sparkContext.getLocalProperty("spark.jobGroup.id")
        return spark.range(10).count()

    assert in_background(spark, "lsh-spark-test", "lsh-spark:test", "a test job",
                         work).result(timeout=120) == 10
    assert seen == {"thread": "lsh-spark-test", "group": "lsh-spark:test"}
    # The caller's own job group is left alone.
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") != "lsh-spark:test"

    def fails():
        raise ValueError("from the background")

    with pytest.raises(ValueError, match="from the background"):
        in_background(spark, "lsh-spark-test", "lsh-spark:test", "a test job",
                      fails).result(timeout=120)
