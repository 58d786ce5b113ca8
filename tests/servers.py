"""Helpers of the tests that start child processes from the installed PySpark:
``spark-submit`` runs of the jobs, and Spark servers (a standalone cluster, Spark
Connect) on 127.0.0.1; and the modules of bench/ that such tests use."""

from __future__ import annotations

import importlib
import os
import socket
import sys
import time
from types import ModuleType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench_module(name: str) -> ModuleType:
    """A module of bench/ (not a package)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def spark_submit(job: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The ``spark-submit`` command of ``jobs/<job>`` in local mode, and an
    environment whose driver and workers use the test interpreter."""
    bin_dir = os.path.dirname(sys.executable)
    cmd = [os.path.join(bin_dir, "spark-submit"), "--master", "local[2]"]
    cmd += [os.path.join(ROOT, "jobs", job), *args]
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
    )
    return cmd, env
