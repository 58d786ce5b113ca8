"""The spark-submit entry points, one module per job, inside the package so that the
wheel ships them: ``spark-submit "$(lsh-spark submit-path dedup)" --input ...`` or
``python -m lsh_spark.jobs.dedup --input ...`` (the checkout's ``jobs/*.py`` run the
same modules); and where the shipped settings files of ``conf/`` are.

The wheel holds ``conf/*.properties`` and ``conf/*.yaml`` as ``lsh_spark/conf/``
(pyproject.toml maps the folder); a checkout has them in ``conf/`` beside the
package.  Imports nothing of lsh_spark (``lsh_spark.commands`` imports this).
"""

from __future__ import annotations

from pathlib import Path

JOBS_DIR = Path(__file__).resolve().parent
PACKAGE_DIR = JOBS_DIR.parent
# The wheel's conf/ first, then a checkout's.
CONF_DIRS = (PACKAGE_DIR / "conf", PACKAGE_DIR.parent / "conf")
CONF_SUFFIXES = (".properties", ".yaml")


def job_file(job: str) -> Path:
    """The entry point ``job`` (``dedup.py``) of this installation."""
    return JOBS_DIR / job


def conf_names() -> list[str]:
    """The settings files shipped in conf/, by name (``spark-cluster.properties``)."""
    for folder in CONF_DIRS:
        if folder.is_dir():
            return sorted(p.name for p in folder.iterdir() if p.suffix in CONF_SUFFIXES)
    return []


def find_conf(name: str) -> Path:
    """The path of the shipped settings file ``name`` (one of :func:`conf_names`)."""
    for folder in CONF_DIRS:
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"{name}: not among the shipped settings files {conf_names()}")
