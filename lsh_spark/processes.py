"""CPU seconds of a local-mode run's processes, from ``/proc`` (Linux).

In local mode every process of a run is on this machine: the Python driver
(this process), the JVM (Spark's driver and executor threads, garbage
collection, shuffle) and the Python workers the JVM starts for Python UDFs
(``pyspark.daemon`` and the workers it forks).  Spark's task metrics count the
JVM's task threads only (``executorCpuTime``), never the Python workers, where
the fused MinHash pass, the bucket kernels and verification run.  A
:func:`snapshot` before and after a pipeline stage gives the CPU each of the
three spent in it (:class:`lsh_spark.stages.common.Timer`).

A worker that exited counts through its parent's ``cutime``/``cstime`` once
the daemon has reaped it, so nothing a worker spent is lost between snapshots.
"""

from __future__ import annotations

import os

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_JVM_MAIN = b"org.apache.spark.deploy.SparkSubmit"


def _stat(pid: int) -> tuple[int, float, float] | None:
    """``(ppid, own CPU seconds, reaped children's CPU seconds)`` of ``pid``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # After "pid (comm)": state ppid ... utime(14) stime(15) cutime(16) cstime(17).
    return (
        int(fields[1]),
        (int(fields[11]) + int(fields[12])) / _TICKS,
        (int(fields[13]) + int(fields[14])) / _TICKS,
    )


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def _processes() -> dict[int, tuple[int, float, float]]:
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := _stat(int(name))) is not None:
            found[int(name)] = stat
    return found


def _descendants(root: int, parent_of: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in parent_of.items():
        children.setdefault(ppid, []).append(pid)
    seen, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def jvm_pid(procs: dict[int, tuple[int, float, float]] | None = None) -> int | None:
    """This driver's JVM: its parent (``spark-submit``) or its child (a session
    started from Python) running Spark's ``SparkSubmit``; None if there is none."""
    procs = _processes() if procs is None else procs
    me = os.getpid()
    parent = procs.get(me, (os.getppid(), 0.0, 0.0))[0]
    candidates = [parent] + [pid for pid, (ppid, _, _) in procs.items() if ppid == me]
    return next((pid for pid in candidates if _JVM_MAIN in _cmdline(pid)), None)


def snapshot() -> dict[str, float] | None:
    """Cumulative CPU seconds of the driver, the JVM and the Python workers; None
    where they cannot be read (no ``/proc``, no JVM of this driver)."""
    if not os.path.isdir("/proc"):
        return None
    procs = _processes()
    jvm = jvm_pid(procs)
    me = os.getpid()
    if jvm is None or me not in procs:
        return None
    parent_of = {pid: ppid for pid, (ppid, _, _) in procs.items()}
    workers = _descendants(jvm, parent_of) - {me}
    if parent_of[me] == jvm:  # spark-submit: this driver (and what it started) is the JVM's
        workers -= _descendants(me, parent_of)
    return {
        "driver": procs[me][1],
        "jvm": procs[jvm][1],
        "python_workers": sum(procs[p][1] + procs[p][2] for p in workers if p in procs),
    }


def spent(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, float]:
    """The CPU seconds between two snapshots, by process kind ({} if either is None)."""
    if before is None or after is None:
        return {}
    return {kind: round(max(0.0, after[kind] - before[kind]), 2) for kind in after}
