"""The Spark versions lsh-spark runs on, checked once at start.

lsh-spark uses Spark 4's Arrow API (``GroupedData.applyInArrow``, Arrow tables in
``createDataFrame``, ``DataType.fromDDL``), which Spark 3.5 lacks, so an older
PySpark, or a Spark 3.5 JVM or Spark Connect server behind a newer client, is
refused with one line.  A newer line than the tested ones runs with a warning:
a platform that brings its own Spark must not be locked out by the version
number alone.  This module imports nothing (``lsh-spark --help`` works without
PySpark).
"""

from __future__ import annotations

import logging
import re

from lsh_spark.errors import LshSparkError

log = logging.getLogger(__name__)

# The (major, minor) lines tested, oldest and newest (pyproject.toml's [spark] range).
OLDEST, NEWEST = (4, 0), (4, 3)
SUPPORTED = f"Spark {OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}"
INSTALL = "pip install 'lsh-spark[spark]'"


class UnsupportedSpark(LshSparkError, ImportError):
    """PySpark is missing, or it or the Spark it runs on is older than Spark 4.0."""


def spark_problem(version: str | None, what: str = "PySpark") -> str | None:
    """Why lsh-spark cannot run on ``what`` of ``version`` (one line), or None.

    ``version`` None means PySpark is not installed.  A line newer than
    :data:`NEWEST` is no problem (see :func:`warn_if_untested`).

    >>> spark_problem("4.3.0") is None, spark_problem("4.0.1") is None
    (True, True)
    >>> print(spark_problem("3.5.3"))
    lsh-spark needs Spark 4.0 to 4.3 (Spark 4's Arrow API); found PySpark 3.5.3: pip install ...
    >>> print(spark_problem(None))
    lsh-spark needs Spark 4.0 to 4.3 and PySpark is not installed: pip install 'lsh-spark[spark]'
    """
    if version is None:
        return f"lsh-spark needs {SUPPORTED} and PySpark is not installed: {INSTALL}"
    if _line(version) < OLDEST:
        found = f"found {what} {version}"
        return f"lsh-spark needs {SUPPORTED} (Spark 4's Arrow API); {found}: {INSTALL}"
    return None


def installed_pyspark() -> str | None:
    """The version of the importable PySpark, or None if it cannot be imported."""
    try:
        import pyspark
    except ImportError:
        return None
    return getattr(pyspark, "__version__", "0")


def check_spark(version: str | None, what: str = "PySpark") -> None:
    """Raise :class:`UnsupportedSpark` for a version :func:`spark_problem` refuses;
    warn once for a line newer than the tested ones."""
    problem = spark_problem(version, what)
    if problem is not None:
        raise UnsupportedSpark(problem)
    if version is not None and _line(version) > NEWEST:
        log.warning("%s %s is newer than the tested %s", what, version, SUPPORTED)


def _line(version: str) -> tuple[int, int]:
    """(major, minor) of a version string; (0, 0) if it has none.

    >>> _line("4.3.0"), _line("3.5.1.dev0"), _line("15.4.x-scala2.12"), _line("?")
    ((4, 3), (3, 5), (15, 4), (0, 0))
    """
    found = re.match(r"(\d+)\.(\d+)", version.strip())
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)
