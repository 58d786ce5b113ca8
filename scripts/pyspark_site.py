"""Imported when Python starts in the project's virtualenv, through the line
``import _lsh_spark_pyspark_site`` of ``_lsh_spark_pyspark_site.pth``, both
written into its site-packages by ``scripts/setup-env.sh`` (README, "Python
start-up and stop").

spark-submit and Spark's Python workers put ``$SPARK_HOME/python/lib/pyspark.zip``
and the py4j zip first on ``sys.path``.  Python compiles every module it imports
from a zip again in every process (zipimport writes no bytecode cache): about
0.3 s in the driver and again in the Python worker daemon of each executor,
before the first Python task can start.  When ``SPARK_HOME`` is the pip
installation next to this file, the same release of both packages is installed
in this site-packages, compiled once at install: this moves those two zips
behind it.  Zips of any other Spark installation stay first.
``LSH_SPARK_PYSPARK_ZIP=1`` leaves ``sys.path`` as it is.
"""

import os
import sys


def reordered(path: list[str], site: str) -> list[str]:
    """``path`` with the zips under ``site/pyspark/python/lib/`` moved to its end."""
    lib = os.path.join(os.path.realpath(site), "pyspark", "python", "lib") + os.sep
    zips = [p for p in path if p.endswith(".zip") and os.path.realpath(p).startswith(lib)]
    return [p for p in path if p not in zips] + zips if zips else path


if os.environ.get("LSH_SPARK_PYSPARK_ZIP") != "1":
    try:
        sys.path[:] = reordered(sys.path, os.path.dirname(os.path.abspath(__file__)))
    except Exception:  # noqa: BLE001, S110 (never keep Python from starting)
        pass
