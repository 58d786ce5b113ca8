"""Owner records: who writes a directory, and whether that run is still alive.

Every directory a run writes before it commits (a staging directory, or on an
object store the output itself) holds ``_lsh_spark_run``, a JSON record of the
run and the process writing it::

    {"run": "1a2b3c4d5e6f", "host": "worker-7", "boot_id": "...", "pid_ns": "pid:[4026531836]",
     "pid": 4242, "start": 123456, "renewed_at": 1765080000.0, "lease_seconds": 600}

Recovery on any host decides from it, never from a guess:

- **the same machine and PID namespace** (equal host name, boot id and PID
  namespace): the run is alive while a process with its pid *and its start time*
  runs (a reused pid is another process);
- **anything else** (another host, a container with its own PID namespace,
  YARN cluster mode, Kubernetes, ``docker compose run``): the run is alive
  while its lease holds, ``renewed_at + lease_seconds`` plus ``CLOCK_SKEW_SECONDS``
  for clocks that differ.  A :class:`Lease` thread rewrites the record every
  ``lease_seconds / 10`` while the run writes, so a live run never looks dead
  and a killed one is recognised as dead within ``lease_seconds``.

A record from lsh-spark 0.2.0 (``run``, ``host``, ``pid`` only, no lease) of
another host is judged as before: gone only when the caller says so
(``all_hosts``, as ``jobs/recover.py`` does).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Any

from lsh_spark.store import FileSystem

log = logging.getLogger(__name__)

OWNER = "_lsh_spark_run"  # the owner record's name in a directory
LEASE_SECONDS = 600.0  # how long a record proves its run alive without renewal
CLOCK_SKEW_SECONDS = 60.0  # clocks of two hosts may differ by this much
_LEASE_ENV = "LSH_SPARK_LEASE_SECONDS"  # tests shorten the lease of child processes


def lease_seconds() -> float:
    return float(os.environ.get(_LEASE_ENV, LEASE_SECONDS))


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def _namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def process_start(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (``/proc/PID/stat``
    field 22), or None where there is no ``/proc`` or no such process."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    try:  # the command name (field 2) is in parentheses and may hold spaces
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def identity() -> dict[str, Any]:
    """This process as an owner record names it (module docstring)."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "boot_id": _read("/proc/sys/kernel/random/boot_id"),
        "pid_ns": _namespace(),
        "pid": pid,
        "start": process_start(pid),
    }


def owner_record(run: str, me: dict[str, Any] | None = None) -> bytes:
    """The owner record of ``run`` written by this process now."""
    record = dict(me or identity(), run=run, renewed_at=time.time(), lease_seconds=lease_seconds())
    return json.dumps(record, sort_keys=True).encode()


def read_owner(fs: FileSystem, path: str) -> dict[str, Any] | None:
    """The owner record of directory ``path``; None if missing or unreadable."""
    try:
        owner = json.loads(fs.read_text(f"{path}/{OWNER}"))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def alive(owner: dict[str, Any], all_hosts: bool, now: float | None = None) -> bool:
    """Whether the run of ``owner`` (a record) may still be writing."""
    me = identity()
    legacy = "renewed_at" not in owner  # lsh-spark 0.2.0: run, host and pid only
    same_machine = all(
        owner.get(k) == me[k] for k in (("host",) if legacy else ("host", "boot_id", "pid_ns"))
    )
    if same_machine:
        try:
            pid = int(owner["pid"])
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # another user's process: it runs
            pass
        except (KeyError, TypeError, ValueError):
            return False
        start = owner.get("start")
        return start is None or process_start(pid) in (None, start)
    if legacy:  # another host's, with no lease to judge by
        return not all_hosts
    try:
        expires = float(owner["renewed_at"]) + float(owner["lease_seconds"])
    except (KeyError, TypeError, ValueError):
        return False
    return (time.time() if now is None else now) <= expires + CLOCK_SKEW_SECONDS


def abandoned(fs: FileSystem, path: str, all_hosts: bool) -> bool:
    """Whether the run that wrote directory ``path`` is gone: no readable owner
    record, or one whose run is not :func:`alive`."""
    owner = read_owner(fs, path)
    return owner is None or not alive(owner, all_hosts)


class Lease:
    """Keeps the owner record of ``run`` in directory ``path`` fresh: writes it
    now, then again every ``lease_seconds / 10`` from a daemon thread until
    :meth:`stop`.  It stops by itself when the record there names another run
    (the directory was taken over or deleted), and says so."""

    def __init__(self, fs: FileSystem, path: str, run: str, exclusive: bool = False):
        self.fs, self.path, self.run = fs, path, run
        self.me = identity()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        record = owner_record(run, self.me)
        if exclusive:
            self.acquired = fs.create_exclusive(f"{path}/{OWNER}", record)
        else:
            fs.write_bytes(f"{path}/{OWNER}", record)
            self.acquired = True
        self._thread = None
        if self.acquired:
            self._thread = threading.Thread(
                target=self._renew, name=f"lsh-spark-lease-{run}", daemon=True
            )
            self._thread.start()

    def owned(self) -> bool:
        """Whether the record in the directory is still this run's."""
        owner = read_owner(self.fs, self.path)
        return owner is not None and owner.get("run") == self.run

    def _renew(self) -> None:
        while not self._stop.wait(lease_seconds() / 10):
            with self._lock:
                if self._stop.is_set():
                    return
                try:
                    if not self.owned():
                        log.warning("%s is no longer this run's (%s)", self.path, self.run)
                        return
                    self.fs.replace_text(
                        f"{self.path}/{OWNER}", owner_record(self.run, self.me).decode()
                    )
                except OSError as exc:  # the next renewal tries again
                    log.warning("could not renew the owner record in %s (%s)", self.path, exc)

    def stop(self) -> None:
        """Stop renewing; no write of the record starts after this returns."""
        with self._lock:
            self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
