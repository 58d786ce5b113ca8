"""Owner records across hosts: recovery tells a live run from a dead one on any
host, by its process where it can see it and by its lease where it cannot.

Each "host" here is an owner identity (lsh_spark.owners.identity patched): two
runs of two identities share one output, as two containers, two YARN containers
or two pods of one job do.
"""

from __future__ import annotations

import json
import os
import socket
import time

from commit_child import DATASETS, write_dataset
from test_commit import leftovers, output_label

from lsh_spark import owners
from lsh_spark.outputs import StagedOutput, recover_output

HOUR = 3600.0


def _staged(out, label, run=None):
    staged = StagedOutput(None, str(out), overwrite=True, run=run)
    for name, files in DATASETS.items():
        write_dataset(staged.fs, staged.path(name), label, files)
    staged.write_json("report.json", {"label": label})
    return staged


def _as_host(monkeypatch, host: str, pid_ns: str | None = None) -> dict:
    """Make this process look like ``host`` (another machine: its own boot id)."""
    real = owners.identity()
    fake = dict(real, host=host, boot_id=f"boot-of-{host}", pid_ns=pid_ns or real["pid_ns"])
    monkeypatch.setattr(owners, "identity", lambda: dict(fake))
    return fake


def _record(path, **fields) -> None:
    (path / owners.OWNER).write_text(json.dumps(fields))


def _staging_of(tmp_path, run: str, record: dict):
    staging = tmp_path / f".out.inprogress-{run}"
    staging.mkdir()
    _record(staging, run=run, **record)
    return staging


def test_an_owner_record_names_this_process_and_its_start():
    me = owners.identity()
    assert me["host"] == socket.gethostname() and me["pid"] == os.getpid()
    with open("/proc/sys/kernel/random/boot_id") as fh:
        assert me["boot_id"] == fh.read().strip()
    assert me["pid_ns"] == os.readlink("/proc/self/ns/pid")
    with open("/proc/self/stat") as fh:  # field 22: after "pid (comm) state ..."
        fields = fh.read().split(") ")[-1].split()
    assert me["start"] == int(fields[19]) > 0
    record = json.loads(owners.owner_record("r1"))
    assert record["run"] == "r1" and record["lease_seconds"] == owners.LEASE_SECONDS == 600
    assert abs(record["renewed_at"] - time.time()) < 5


def test_a_live_run_of_another_host_keeps_its_staging_until_its_lease_ends(tmp_path):
    other = {"host": "worker-7", "boot_id": "b-7", "pid_ns": "pid:[1]", "pid": 1, "start": 5}
    fresh = _staging_of(tmp_path, "live", dict(other, renewed_at=time.time(), lease_seconds=600))
    stale = _staging_of(
        tmp_path, "dead", dict(other, renewed_at=time.time() - HOUR, lease_seconds=600)
    )
    # jobs/recover.py (all hosts): 0.2.0 deleted every staging of another host here.
    assert recover_output(None, str(tmp_path / "out"), all_hosts=True) == [
        "deleted .out.inprogress-dead"
    ]
    assert fresh.exists() and not stale.exists()


def test_the_same_host_name_in_another_pid_namespace_is_judged_by_its_lease(tmp_path):
    """A container with the host's name but its own PID namespace: its pid means
    nothing here (0.2.0 found no such process and deleted a live run's files)."""
    me = owners.identity()
    elsewhere = dict(me, pid_ns="pid:[4026530000]", pid=2**22 + 1, start=1)
    live = _staging_of(tmp_path, "live", dict(elsewhere, renewed_at=time.time(), lease_seconds=600))
    assert recover_output(None, str(tmp_path / "out"), all_hosts=False) == []
    assert live.exists()
    _record(live, run="live", **dict(elsewhere, renewed_at=time.time() - HOUR, lease_seconds=600))
    assert recover_output(None, str(tmp_path / "out"), all_hosts=False) == [
        "deleted .out.inprogress-live"
    ]


def test_a_reused_pid_is_not_the_run_that_wrote_the_record(tmp_path):
    me = owners.identity()
    lease = {"renewed_at": time.time(), "lease_seconds": 600}
    mine = _staging_of(tmp_path, "mine", dict(me, **lease))
    # The same pid, started at another time: the run's process is gone, its pid reused.
    reused = _staging_of(tmp_path, "reused", dict(me, start=me["start"] + 1, **lease))
    assert recover_output(None, str(tmp_path / "out"), all_hosts=False) == [
        "deleted .out.inprogress-reused"
    ]
    assert mine.exists() and not reused.exists()


def test_the_lease_is_renewed_while_the_run_writes_and_stops_at_its_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("LSH_SPARK_LEASE_SECONDS", "0.5")  # renewed every 0.05 s
    staged = _staged(tmp_path / "out", "new")
    record = os.path.join(staged.staging.removeprefix("file:"), owners.OWNER)

    def renewed_at(path):
        return json.loads(open(path).read())["renewed_at"]

    first = renewed_at(record)
    deadline = time.time() + 10
    while renewed_at(record) == first and time.time() < deadline:
        time.sleep(0.02)
    assert renewed_at(record) > first
    staged.commit()
    committed = tmp_path / "out" / owners.OWNER
    last = renewed_at(committed)
    time.sleep(0.3)  # six renewal periods
    assert renewed_at(committed) == last  # stopped: nothing rewritten after the commit
    assert output_label(tmp_path / "out") == "new" and leftovers(tmp_path) == []


def test_two_hosts_share_one_output(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _as_host(monkeypatch, "host-a")
    a = _staged(out, "a")
    _as_host(monkeypatch, "host-b")
    b = _staged(out, "b")  # its start recovers: host-a's run is alive (fresh lease)
    assert a.fs.exists(a.staging)
    b.commit()
    assert output_label(out) == "b"
    _as_host(monkeypatch, "host-a")
    a.commit()  # replaces b's output (--overwrite)
    assert output_label(out) == "a" and leftovers(tmp_path) == []
    # A run of host-a killed mid-write: its lease is not renewed any more.
    killed = _staged(out, "killed")
    killed.lease.stop()
    stale = dict(a.lease.me, run=killed.run, renewed_at=time.time() - HOUR, lease_seconds=600)
    _record(tmp_path / f".out.inprogress-{killed.run}", **stale)
    _as_host(monkeypatch, "host-b")
    _staged(out, "b2").commit()  # the next run on host-b cleans the dead run's staging
    assert output_label(out) == "b2" and leftovers(tmp_path) == []
