"""Numeric loops compiled by numba where it is installed, with numpy fallbacks.

A kernel here is a plain Python function over numpy arrays written as loops
(no Python objects), which :func:`compiled` turns into machine code with
numba once per process; numba caches the code on disk (next to the kernel's
source file, or in its user cache directory), so a new Python worker loads it
instead of compiling it again.  Callers keep a numpy version of
every kernel with the same results: it runs where numba is missing, and the
tests compare the two.  ``LSH_SPARK_KERNELS=numpy`` in the environment (of the Python
workers, for the jobs) selects the numpy versions everywhere.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

KERNELS = ("compiled", "numpy")
ENV = "LSH_SPARK_KERNELS"


def use_compiled(kernel: str | None) -> bool:
    """Whether to run the compiled kernel: ``kernel`` (``"compiled"``, ``"numpy"``
    or None for the environment variable ``LSH_SPARK_KERNELS``, and compiled
    where neither says), provided numba is installed.  Asking for ``"compiled"``
    explicitly without numba is an error."""
    choice = kernel or os.environ.get(ENV) or None
    if choice is not None and choice not in KERNELS:
        source = "kernel" if kernel else ENV
        raise ValueError(f"{source} {choice!r}: allowed values are {', '.join(KERNELS)}")
    if choice == "numpy":
        return False
    available = _numba() is not None
    if choice == "compiled" and not available:
        raise ValueError(
            "the compiled kernels need numba, which is not installed "
            "(pip install numba, or choose the numpy kernels)"
        )
    return available


@functools.cache
def compiled(func: Callable[..., None]) -> Callable[..., None]:
    """``func`` compiled by numba (``nopython`` mode, cached on disk where a
    cache location is writable; otherwise compiled in every process).  Call only
    when :func:`use_compiled` is true."""
    numba = _numba()
    try:
        return numba.njit(cache=True, nogil=True)(func)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(nogil=True)(func)


@functools.cache
def _numba():
    try:
        import numba
    except ImportError:
        return None
    return numba
