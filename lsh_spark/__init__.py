"""lsh-spark: near-duplicate detection for web-scale text on Apache Spark.

The Python API (docs/api.md): :func:`find_duplicates`, :func:`decontaminate`,
:func:`advise` and :class:`CrawlIndex` on DataFrames, configured by
:class:`DedupConfig`, and the building blocks :func:`shingles`, :func:`minhash`,
:func:`band_keys` and :func:`connected_components` for ``df.transform``.
"""

__version__ = "0.3.0"

# After the version: the modules read it.  Without PySpark 4 (``lsh-spark --help`` with
# no PySpark, a Spark 3.5 platform) the API is not imported, and reaching it raises
# the one line that says why (lsh_spark.versions).
from lsh_spark.versions import installed_pyspark, spark_problem  # noqa: E402

_problem = spark_problem(installed_pyspark())
if _problem is None:
    from lsh_spark import api
    from lsh_spark.api import *  # noqa: F403

    __all__ = ["__version__", *api.__all__]
else:
    __all__ = ["__version__"]

    def __getattr__(name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ImportError(_problem)
