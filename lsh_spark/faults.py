"""Fault hooks for the commit tests: die or wait at a named step of a commit.

``$LSH_SPARK_FAULT`` holds comma-separated steps, each ``<scope>:<step>``
(SIGKILL this process when it reaches the step) or
``<scope>:<step>=wait:<path>`` (create ``<path>.waiting``, then wait until
``<path>`` exists: a test holds one writer just before its commit while a
rival commits).  Unset, :func:`maybe_die` does nothing.  The steps are named
where they are placed (``index:before_manifest``, ``index:after_manifest``,
``commit:staged``, ``commit:aside``, ``commit:published``, ``commit:deleting-old``).
"""

from __future__ import annotations

import os
import signal
import time

ENV = "LSH_SPARK_FAULT"
WAIT_SECONDS = 600


def maybe_die(step: str) -> None:
    """Act at commit step ``step`` as ``$LSH_SPARK_FAULT`` says (module docstring)."""
    for spec in os.environ.get(ENV, "").split(","):
        name, _, action = spec.strip().partition("=")
        if name != step:
            continue
        if action.startswith("wait:"):
            _wait(action[len("wait:") :])
        else:
            os.kill(os.getpid(), signal.SIGKILL)


def _wait(path: str) -> None:
    with open(path + ".waiting", "w"):
        pass
    deadline = time.monotonic() + WAIT_SECONDS
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ENV}: {path} did not appear within {WAIT_SECONDS} s")
        time.sleep(0.1)
