"""Output commits under faults: SIGKILL at each commit step, failing renames, an
output that appears during a run, object stores through fsspec.

The SIGKILL tests run tests/commit_child.py, which commits through the library
and kills itself at the step named by ``LSH_SPARK_FAULT``; the rest run in this
process.  Outputs are read back row by row with pyarrow.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import os
import socket
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from commit_child import DATASETS, ROWS_PER_FILE, write_dataset

from lsh_spark.config import ConfigError
from lsh_spark.outputs import StagedOutput, StagewiseOutput, recover_output, recover_stages
from lsh_spark.store import FileSystem

CHILD = os.path.join(os.path.dirname(__file__), "commit_child.py")


def run_child(kind, out, label, fault=None, *flags):
    env = dict(os.environ)
    env.pop("LSH_SPARK_FAULT", None)
    if fault:
        env["LSH_SPARK_FAULT"] = f"commit:{fault}"
    done = subprocess.run(
        [sys.executable, CHILD, kind, str(out), label, *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode


def dataset_label(path) -> str | None:
    """The one label of every row of a dataset directory, checking it is complete;
    None when it is absent."""
    if not os.path.exists(path):
        return None
    assert os.path.exists(f"{path}/_SUCCESS"), f"{path} has no _SUCCESS"
    rows = pq.read_table(str(path)).to_pylist()
    labels = {r["label"] for r in rows}
    assert len(labels) == 1, f"{path} mixes runs: {labels}"
    files = DATASETS[os.path.basename(path)]
    assert len(rows) == files * ROWS_PER_FILE
    return labels.pop()


def output_label(out) -> str | None:
    """The label of a complete StagedOutput (every dataset, report, marker), or None."""
    if not os.path.exists(out):
        return None
    assert os.path.exists(f"{out}/_SUCCESS")
    labels = {dataset_label(f"{out}/{name}") for name in DATASETS}
    labels.add(json.loads((out / "report.json").read_text())["label"])
    assert len(labels) == 1, f"{out} mixes runs: {labels}"
    return labels.pop()


def leftovers(tmp_path):
    return sorted(n for n in os.listdir(tmp_path) if n.startswith("."))


# State right after the kill, before any recovery: what sits at the output path.
AFTER_KILL = {
    "kill-before-commit": "old",
    "staged": "old",
    "aside": None,  # old moved aside, new still staged: recovery completes the commit
    "published": "new",
    "deleting-old": "new",
}
# What recovery (recover_output or the next run's start) leaves: the commit is
# finished once the new copy is complete and the old one moved aside, rolled back before.
AFTER_RECOVERY = {
    "kill-before-commit": "old",
    "staged": "old",
    "aside": "new",
    "published": "new",
    "deleting-old": "new",
}


@pytest.mark.slow
@pytest.mark.parametrize("step", sorted(AFTER_KILL))
@pytest.mark.parametrize("recover_first", [True, False], ids=["recover", "next-run"])
def test_sigkill_at_each_commit_step_leaves_old_or_new(tmp_path, step, recover_first):
    out = tmp_path / "out"
    assert run_child("staged", out, "old") == 0
    flags = ["kill-before-commit"] if step == "kill-before-commit" else []
    fault = None if flags else step
    assert run_child("staged", out, "new", fault, *flags) == -9

    expected = AFTER_KILL[step]
    assert output_label(out) == expected
    if expected is None:  # both copies complete, under their hidden names
        aside = [n for n in leftovers(tmp_path) if ".aside-" in n]
        assert output_label(tmp_path / aside[0]) == "old"
    assert leftovers(tmp_path), "a kill mid-commit leaves its staging or aside directory"

    if recover_first:
        actions = recover_output(None, str(out))
        assert actions and leftovers(tmp_path) == []
        assert output_label(out) == AFTER_RECOVERY[step]
    assert run_child("staged", out, "next") == 0
    assert output_label(out) == "next" and leftovers(tmp_path) == []
    clean = tmp_path / "clean" / "out"
    assert run_child("staged", clean, "next") == 0
    for name in DATASETS:
        assert sorted(pq.read_table(str(out / name)).to_pylist(), key=str) == sorted(
            pq.read_table(str(clean / name)).to_pylist(), key=str
        )


# A stage is one unit: killed before its _COMMIT record, the old stage stays; after
# it (inside the swaps), recovery finishes the new one.  Never a mix of the two.
STAGE_AFTER_RECOVERY = {"kill-before-commit": "old", "aside": "new", "published": "new"}


@pytest.mark.slow
@pytest.mark.parametrize("step", sorted(STAGE_AFTER_RECOVERY))
@pytest.mark.parametrize("recover_first", [True, False], ids=["recover", "next-stage"])
def test_sigkill_in_a_stage_job_commit_leaves_the_old_stage_or_the_new(
    tmp_path, step, recover_first
):
    out = tmp_path / "out"
    assert run_child("stagewise", out, "old") == 0
    flags = ["kill-before-commit"] if step == "kill-before-commit" else []
    assert run_child("stagewise", out, "new", None if flags else step, *flags) == -9
    assert any(n.startswith(".inprogress-") for n in os.listdir(out))
    if step == "aside":  # the old copy sits in _old/ until recovery finishes the swaps
        assert not (out / "clusters").exists()
    if step != "kill-before-commit":  # the first name swapped, report.json not yet
        assert json.loads((out / "report.json").read_text()) == {"label": "old"}
    expected = STAGE_AFTER_RECOVERY[step]
    if recover_first:
        last = recover_stages(None, str(out))[-1]
        assert last.startswith("deleted .inprogress-" if expected == "old" else "finished")

    later = StagewiseOutput(None, str(out))  # the next stage job recovers the kill
    assert [n for n in os.listdir(out) if n.startswith(".")] == [os.path.basename(later.staging)]
    assert dataset_label(out / "clusters") == expected
    assert later.read_json("report.json")["label"] == expected
    later.commit()
    assert run_child("stagewise", out, "next") == 0
    assert dataset_label(out / "clusters") == "next"
    assert json.loads((out / "report.json").read_text()) == {"label": "next"}


def _staged(out, label, overwrite=True):
    """An uncommitted StagedOutput of ``label`` (no Spark: local file operations)."""
    staged = StagedOutput(None, str(out), overwrite=overwrite)
    for name, files in DATASETS.items():
        write_dataset(staged.fs, staged.path(name), label, files)
    staged.write_json("report.json", {"label": label})
    return staged


def _failing_rename(fs, fail_on):
    """Make ``fs.rename`` raise ENOSPC on the calls numbered in ``fail_on`` (from 1)."""
    real, calls = fs.rename, []

    def rename(src, dst):
        calls.append((src, dst))
        if len(calls) in fail_on:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    fs.rename = rename
    return calls


@pytest.mark.parametrize("fail_on", [{1}, {2}], ids=["old-aside", "new-in"])
def test_a_failing_rename_leaves_the_old_output(tmp_path, fail_on):
    out = tmp_path / "out"
    _staged(out, "old").commit()
    staged = _staged(out, "new")
    _failing_rename(staged.fs, fail_on)
    with pytest.raises(OSError, match="No space left"):
        staged.commit()
    staged.abort()
    assert output_label(out) == "old" and leftovers(tmp_path) == []


def test_a_failing_rename_back_keeps_both_copies_for_recovery(tmp_path):
    out = tmp_path / "out"
    _staged(out, "old").commit()
    staged = _staged(out, "new")
    _failing_rename(staged.fs, {2, 3})  # new in fails, and so does putting old back
    with pytest.raises(OSError):
        staged.commit()
    staged.abort()  # must not delete the new copy while the old one is aside
    assert output_label(out) is None
    assert len(leftovers(tmp_path)) == 2
    assert recover_output(None, str(out))
    assert output_label(out) == "new" and leftovers(tmp_path) == []


def test_an_output_that_appears_during_the_run_is_refused_not_deleted(tmp_path):
    out = tmp_path / "out"
    staged = _staged(out, "mine", overwrite=False)
    _staged(out, "theirs").commit()
    with pytest.raises(ConfigError, match="appeared while this run was writing"):
        staged.commit()
    staged.abort()
    assert output_label(out) == "theirs" and leftovers(tmp_path) == []


def test_the_next_run_keeps_a_live_runs_staging(tmp_path):
    out = tmp_path / "out"
    first = _staged(out, "first")
    _staged(out, "second").commit()  # its start recovers: the first run is alive
    assert first.fs.exists(first.staging)
    first.commit()
    assert output_label(out) == "first" and leftovers(tmp_path) == []


def test_a_staging_directory_of_a_dead_process_is_deleted(tmp_path):
    out = tmp_path / "out"
    staged = _staged(out, "old")
    gone = json.dumps({"run": staged.run, "host": socket.gethostname(), "pid": 2**22 + 1})
    staged.fs.write_text(staged.path("_lsh_spark_run"), gone)
    other = json.dumps({"run": "x", "host": "another-host", "pid": 1})
    os.makedirs(tmp_path / ".out.inprogress-x")
    (tmp_path / ".out.inprogress-x" / "_lsh_spark_run").write_text(other)
    assert recover_output(None, str(out), all_hosts=False) == [
        f"deleted .out.inprogress-{staged.run}"
    ]
    assert leftovers(tmp_path) == [".out.inprogress-x"]  # another host's: kept
    recover_output(None, str(out))
    assert leftovers(tmp_path) == []


def test_stage_report_missing_after_stages_ran_is_an_error(tmp_path):
    out = tmp_path / "out"
    stage = StagewiseOutput(None, str(out))
    assert stage.read_json("report.json") == {}
    write_dataset(stage.fs, stage.path("signatures"), "a", 1)
    with pytest.raises(ConfigError, match="report.json is missing though stages wrote signatures"):
        stage.read_json("report.json")
    stage.write_json("report.json", {"x": 1})
    assert stage.read_json("report.json") == {"x": 1}
    stage.commit()
    assert recover_stages(None, str(out)) == [] and not leftovers(out)


# -- object stores through fsspec ------------------------------------------------
def _fsspec_registry():
    pytest.importorskip("fsspec")
    return importlib.import_module("fsspec.registry")  # fsspec.registry is a mapping


@pytest.fixture
def memory_gcs(monkeypatch):
    """``gs://`` served by fsspec's in-memory file system; the list of its calls."""
    from fsspec.implementations.memory import MemoryFileSystem

    calls = []

    class CountingMemory(MemoryFileSystem):
        protocol = ("gcs", "gs")
        store = {}
        pseudo_dirs = [""]

        def __getattribute__(self, name):
            if name in ("info", "ls", "cp_file", "mv", "rm", "rm_file", "_open", "mkdir"):
                calls.append(name)
            return super().__getattribute__(name)

    monkeypatch.setitem(_fsspec_registry()._registry, "gcs", CountingMemory)
    yield calls
    CountingMemory.clear_instance_cache()


def test_gcs_paths_go_through_fsspec(memory_gcs):
    fs = FileSystem(None, "gs://bucket/dir")
    fs.write_text("gs://bucket/dir/a.json", "{}")
    assert fs.exists("gs://bucket/dir/a.json") and fs.read_text("gs://bucket/dir/a.json") == "{}"
    assert fs.qualify("gs://bucket/dir/../dir/a.json") == "gs://bucket/dir/a.json"
    assert fs.list_names("gs://bucket/dir") == ["a.json"] and fs.object_store


def test_gcs_exclusive_create_refuses_an_existing_file(memory_gcs):
    """The index's compare-and-swap on fsspec stores: ``pipe_file(mode="create")``."""
    fs = FileSystem(None, "gs://bucket/index")
    assert fs.create_exclusive("gs://bucket/index/_manifests/v00000001.json", b"first")
    assert not fs.create_exclusive("gs://bucket/index/_manifests/v00000001.json", b"second")
    assert fs.read_text("gs://bucket/index/_manifests/v00000001.json") == "first"


def test_abfss_paths_name_the_container_and_account(monkeypatch):
    from fsspec.implementations.memory import MemoryFileSystem

    seen = {}

    class Azure(MemoryFileSystem):
        protocol = ("abfs",)
        store = {}
        pseudo_dirs = [""]

        def __init__(self, **kwargs):
            seen.update(kwargs)
            super().__init__()

    monkeypatch.setitem(_fsspec_registry()._registry, "abfs", Azure)
    url = "abfss://box@acct.dfs.core.windows.net/dir/r.json"
    FileSystem(None, url).write_text(url, "{}")
    assert seen["account_name"] == "acct" and Azure.store["/box/dir/r.json"].getvalue() == b"{}"


@pytest.mark.parametrize("files", [1, 20])
def test_object_store_commit_costs_the_same_for_any_size(memory_gcs, files):
    out = "gs://bucket/out"
    staged = StagedOutput(None, out)
    write_dataset(staged.fs, staged.path("clusters"), "new", files)
    assert staged.path("clusters") == f"{out}/clusters"  # written in place: nothing to copy
    before = len(memory_gcs)
    staged.commit()
    assert 0 < len(memory_gcs) - before <= 4  # owner check + _SUCCESS, whatever the size
    assert staged.fs.exists(f"{out}/_SUCCESS")
    with pytest.raises(ConfigError, match="object store an output is not replaced"):
        StagedOutput(None, out, overwrite=True)


def test_object_store_run_killed_before_commit_is_cleaned(memory_gcs):
    out = "gs://bucket/out"

    def killed_run(host, pid):
        staged = StagedOutput(None, out)
        write_dataset(staged.fs, staged.path("clusters"), "killed", 2)
        owner = {"run": staged.run, "host": host, "pid": pid}
        staged.fs.write_text(staged.path("_lsh_spark_run"), json.dumps(owner))
        return staged.fs

    fs = killed_run("another-host", 1)  # maybe alive: the next run stops, naming recover
    with pytest.raises(ConfigError, match=f"did not commit .* jobs/recover.py {out}"):
        StagedOutput(None, out, overwrite=True)
    assert recover_output(None, out) == [f"deleted {out} (a run killed before its commit)"]
    assert not fs.exists(out)

    killed_run(socket.gethostname(), 2**22 + 1)  # a process of this host that is gone
    again = StagedOutput(None, out)  # the next run deletes the half output by itself
    assert not again.fs.exists(f"{out}/clusters")
    write_dataset(again.fs, again.path("clusters"), "again", 1)
    again.commit()
    assert again.fs.list_names(f"{out}/clusters") == ["_SUCCESS", "part-00000.parquet"]


def test_a_missing_fsspec_package_is_named(monkeypatch):
    registry = _fsspec_registry()
    entry = {"class": "lsh_spark_absent_pkg.FS", "err": "install it"}
    monkeypatch.setitem(registry.known_implementations, "abfs", entry)
    monkeypatch.delitem(registry._registry, "abfs", raising=False)
    with pytest.raises(ConfigError, match="abfss: paths need the Python package 'adlfs'"):
        FileSystem(None, "abfss://c@acct.dfs.core.windows.net/out")
    monkeypatch.delenv("DATABRICKS_HOST", raising=False)
    if not os.path.isdir("/dbfs"):
        with pytest.raises(ConfigError, match="DATABRICKS_HOST"):
            FileSystem(None, "dbfs:/out")


@pytest.mark.slow
def test_recover_job_finishes_a_commit_killed_between_its_renames(tmp_path):
    out = tmp_path / "out"
    assert run_child("staged", out, "old") == 0
    assert run_child("staged", out, "new", "aside") == -9
    assert output_label(out) is None
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, os.path.join(root, "jobs", "recover.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYSPARK_PYTHON=sys.executable),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["actions"][0].startswith("committed out from run")
    assert output_label(out) == "new" and leftovers(tmp_path) == []


def test_spark_outputs_replace_each_other_whole(spark, tmp_path):
    out = str(tmp_path / "out")
    for n in (3, 5):
        staged = StagedOutput(spark, out, overwrite=True)
        staged.write(spark.range(n), "d")
        staged.commit()
        assert spark.read.parquet(f"{out}/d").count() == n
        stage = StagewiseOutput(spark, str(tmp_path / "stages"))
        stage.write(spark.range(n), "d")
        stage.commit()
        assert spark.read.parquet(str(tmp_path / "stages" / "d")).count() == n
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "stages") == []


def test_object_store_abort_deletes_only_its_own_run(memory_gcs):
    out = "gs://bucket/out"
    failed = StagedOutput(None, out)
    write_dataset(failed.fs, failed.path("clusters"), "failed", 1)
    failed.abort()
    assert not failed.fs.exists(out)
    mine = StagedOutput(None, out)
    other = {"run": "other", "host": "another-host", "pid": 1}
    mine.fs.write_text(mine.path("_lsh_spark_run"), json.dumps(other))  # taken over
    with pytest.raises(ConfigError, match="taken over by another run"):
        mine.commit()
    mine.abort()
    assert mine.fs.exists(f"{out}/_lsh_spark_run") and not mine.fs.exists(f"{out}/_SUCCESS")


def test_an_object_store_retry_of_the_same_run_replaces_its_own_output(memory_gcs):
    """A crawl batch that lost the index's compare-and-swap runs again under its own
    run: on an object store its first attempt's output is replaced, not refused."""
    out = "gs://bucket/out"
    first = StagedOutput(None, out, overwrite=True, run="batch-run")
    write_dataset(first.fs, first.path("clusters"), "first", 3)
    first.commit()
    again = StagedOutput(None, out, overwrite=True, run="batch-run")
    assert not again.fs.exists(f"{out}/clusters")  # the lost attempt's files are gone
    write_dataset(again.fs, again.path("clusters"), "again", 1)
    again.commit()
    assert again.fs.list_names(f"{out}/clusters") == ["_SUCCESS", "part-00000.parquet"]
    with pytest.raises(ConfigError, match="object store an output is not replaced"):
        StagedOutput(None, out, overwrite=True, run="another-run")


# -- S3 (a moto server on 127.0.0.1; see the s3 fixture in conftest.py) ----------
@pytest.mark.s3
def test_s3_output_commit_writes_in_place_and_refuses_a_second_run(s3, spark, monkeypatch):
    out = "s3a://lsh-index/out"
    first = StagedOutput(spark, out)
    write_dataset(first.fs, first.path("clusters"), "first", 3)
    # A second run that checked the path just before the first created its owner
    # record: the exclusive create (a PUT with If-None-Match) stops it.
    real_exists = FileSystem.exists
    monkeypatch.setattr(FileSystem, "exists", lambda fs, p: p != out and real_exists(fs, p))
    with pytest.raises(ConfigError, match="another run started writing"):
        StagedOutput(spark, out)
    monkeypatch.setattr(FileSystem, "exists", real_exists)
    first.commit()
    listed = s3.list_objects_v2(Bucket="lsh-index")["Contents"]
    keys = sorted(o["Key"] for o in listed if not o["Key"].endswith("/"))  # not dir markers
    data = [f"out/clusters/part-0000{i}.parquet" for i in range(3)]
    assert keys == sorted(["out/_SUCCESS", "out/_lsh_spark_run", "out/clusters/_SUCCESS", *data])
    with pytest.raises(ConfigError, match="object store an output is not replaced"):
        StagedOutput(spark, out, overwrite=True)


@pytest.mark.s3
def test_s3_run_killed_before_its_commit_is_deleted_by_the_next(s3, spark):
    out = "s3a://lsh-index/out"
    killed = StagedOutput(spark, out)
    write_dataset(killed.fs, killed.path("clusters"), "killed", 2)
    owner = {"run": killed.run, "host": socket.gethostname(), "pid": 2**22 + 1}  # gone
    killed.fs.write_text(killed.path("_lsh_spark_run"), json.dumps(owner))
    again = StagedOutput(spark, out)
    assert not again.fs.exists(f"{out}/clusters")
    write_dataset(again.fs, again.path("clusters"), "again", 1)
    again.commit()
    assert again.fs.list_names(f"{out}/clusters") == ["_SUCCESS", "part-00000.parquet"]


class _ClobberingMove:
    """The move of libhdfs through pyarrow: onto an existing file it deletes the
    target, then renames (the name is empty in between); the call numbered
    ``die_at`` (from 1) stops between the two, as a kill there would."""

    def __init__(self, fs, die_at=None):
        self.real, self.calls, self.die_at = fs._fs, 0, die_at

    def __getattr__(self, name):
        return getattr(self.real, name)

    def move(self, src, dst):
        self.calls += 1
        if self.real.get_file_info(dst).type.name == "File":
            self.real.delete_file(dst)
        if self.calls == self.die_at:  # killed inside the move, before its rename
            raise OSError("killed")
        self.real.move(src, dst)


@pytest.mark.parametrize("die_at", [None, 1, 2])
def test_a_replace_on_a_store_whose_move_clobbers_never_loses_the_name(
    tmp_path, monkeypatch, die_at
):
    """HDFS: a replace cut short at any point leaves the old text or the new one
    (0.2.0 moved the new file over the old: killed inside that move, no text at all)."""
    fs = FileSystem(None, str(tmp_path))
    path = f"{tmp_path}/report.json"
    fs.write_text(path, "old")
    monkeypatch.setattr(FileSystem, "_atomic_replace", lambda self: False)
    fs._fs = _ClobberingMove(fs, die_at)
    with contextlib.suppress(OSError):
        fs.replace_text(path, "new")
    fs._fs = fs._fs.real
    # Moves: 1 the old file to its backup, 2 the new one into the free name.
    expected = {None: "new", 1: "old", 2: "old"}[die_at]
    assert fs.read_replaced(path) == expected
    assert fs.read_text(path) == expected  # the name holds it again
