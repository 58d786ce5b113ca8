"""What lsh-spark does in the PySpark worker processes that run its functions:
shadowed archives left off a worker's ``sys.path`` (:func:`drop_shadowed_archives`,
below) and the worker's long-lived objects frozen out of the collector's
walks (:func:`freeze_loaded`, at the start of every lsh-spark task function).

Spark puts archives on every Python worker's ``sys.path``: ``pyspark.zip`` and
py4j's zip of ``SPARK_HOME``, and the ``spark-core`` jar itself (for builds that
packed PySpark into it).  Before every task, a worker runs
``importlib.invalidate_caches()`` (``pyspark.worker_util.setup_spark_files``),
and on Python 3.10 and 3.11 that makes every archive Python has opened read its
whole table of contents again (CPython issue 103200, changed in 3.12; Spark's
master branch calls it only when needed since SPARK-54744, December 2025): the
jar's 5,261 entries and PySpark's 1,220.  That is 30 ms per task on an idle
core, 30-120 ms inside the tasks of a 41k-document run: 1.06 s of the Python
workers' time over its 13 tasks after the first of each worker.

When the first lsh-spark function reaches a worker (``lsh_spark/__init__.py``),
this drops from its ``sys.path`` every archive whose Python modules are all
imported already from somewhere else, so that nothing can be imported from it
any more.  Those are the jar (no Python module in it) and, where PySpark is
installed in site-packages, the two zips behind it.  An archive that provides a
loaded module (the ``pyspark.zip`` of a Spark distribution, a ``--py-files``
zip) or a module not imported yet stays, so every import resolves as before.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterable, Mapping

# What a file in an archive must end with to be importable Python.
_PYTHON_SUFFIXES = (".py", ".pyc", ".so", ".pyd")


def top_level_names(files: Iterable[str]) -> set[str]:
    """Top-level importable names of an archive's files (``pkg/mod.py`` gives
    ``pkg``, ``mod.py`` gives ``mod``); the names of other files are left out."""
    names = set()
    for name in files:
        if name.endswith(_PYTHON_SUFFIXES):
            head, sep, _ = name.replace("\\", "/").partition("/")
            names.add(head if sep else head.split(".")[0])
    return names


def _inside(entry: str) -> str:
    """The prefix of every path inside the archive ``entry``."""
    return entry.rstrip("/" + os.sep) + os.sep


def _loaded_from(module: object) -> list[str]:
    """The files or directories a loaded module came from."""
    where = [getattr(module, "__file__", None)]
    where += list(getattr(module, "__path__", None) or [])
    return [w for w in where if isinstance(w, str)]


def shadowed_archives(path: list[str], contents: Mapping[str, Iterable[str]],
                      modules: Mapping[str, object]) -> list[str]:
    """Entries of ``path`` that are archives (keys of ``contents``, their file
    names) whose top-level Python names are all in ``modules``, each loaded from
    outside the archive."""
    out = []
    for entry in path:
        files = contents.get(entry)
        if files is None:
            continue
        inside = _inside(entry)
        shadowed = True
        for name in top_level_names(files):
            module = modules.get(name)
            if module is None or any(w.startswith(inside) for w in _loaded_from(module)):
                shadowed = False
                break
        if shadowed:
            out.append(entry)
    return out


def archive_contents(path: list[str], opened: Mapping[str, Iterable[str]]
                     ) -> dict[str, Iterable[str]]:
    """The file names of every archive on ``path``: from ``opened`` (zipimport's
    tables of the archives Python has opened) or read here; entries that are
    not files, or not zip archives, are left out."""
    import zipfile

    out: dict[str, Iterable[str]] = {}
    for entry in path:
        if entry in opened:
            out[entry] = opened[entry]
        elif os.path.isfile(entry):
            try:
                with zipfile.ZipFile(entry) as archive:
                    out[entry] = archive.namelist()
            except (OSError, zipfile.BadZipFile):
                continue
    return out


def on_python_worker() -> bool:
    """Whether this process is a PySpark worker running a task (PySpark sets
    ``SparkFiles._is_running_on_worker`` before it loads a task's functions)."""
    for name in ("pyspark.core.files", "pyspark.files"):
        files = sys.modules.get(name)
        if files is not None:
            return bool(getattr(getattr(files, "SparkFiles", None),
                                "_is_running_on_worker", False))
    return False


def drop_shadowed_archives() -> list[str]:
    """On a PySpark worker, take :func:`shadowed_archives` off ``sys.path`` and
    out of ``sys.path_importer_cache``; return them.  Elsewhere, nothing."""
    if not on_python_worker():
        return []
    import zipimport

    # zipimport's tables of the archives it has opened, where this Python keeps them.
    opened = getattr(zipimport, "_zip_directory_cache", None)
    cache = opened if isinstance(opened, dict) else {}
    drop = shadowed_archives(sys.path, archive_contents(sys.path, cache), dict(sys.modules))
    if drop:
        sys.path[:] = [p for p in sys.path if p not in drop]
        for key in list(sys.path_importer_cache):
            # An archive's sub-directories have importers of their own (jar/org).
            if any(key == d or key.startswith(_inside(d)) for d in drop):
                sys.path_importer_cache.pop(key, None)
    return drop


# len(sys.modules) when freeze_loaded last froze the heap of this process.
_modules_at_freeze = 0


def freeze_loaded() -> None:
    """On a PySpark worker, at the start of a task: move every object the
    collector tracks into its permanent generation (``gc.freeze()``) when
    modules were imported since the last time.

    A reused worker runs a full ``gc.collect()`` after every task
    (``pyspark/daemon.py``), which walks every tracked object: with pyarrow,
    pandas, numba and the compiled kernels loaded, about 160,000 of them, 84 ms
    on an idle core.  The modules, numba's registries and the kernels live as
    long as the process, so once they are frozen the collection after a task
    walks only what that task left.  The start of a task is just after the
    previous collection, so what is frozen is what survived it (the task's
    deserialized functions included); it happens only when modules were
    imported since, a few times per worker.  Objects frozen are still freed when
    nothing refers to them any more; only reference cycles among them wait for
    the process to end.  Elsewhere (the driver, a test calling a function
    directly), nothing.
    """
    global _modules_at_freeze
    loaded = len(sys.modules)
    if loaded == _modules_at_freeze or not on_python_worker():
        return
    _modules_at_freeze = loaded
    gc.freeze()
