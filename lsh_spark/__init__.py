"""lsh-spark: near-duplicate detection for web-scale text on Apache Spark.

The Python API (docs/api.md): :func:`find_duplicates`, :func:`decontaminate`,
:func:`advise` and :class:`CrawlIndex` on DataFrames, configured by
:class:`DedupConfig`, and the building blocks :func:`shingles`, :func:`minhash`,
:func:`band_keys` and :func:`connected_components` for ``df.transform``.
"""

__version__ = "0.3.0"

# After the version: the modules read it.
from lsh_spark import api  # noqa: E402
from lsh_spark.api import *  # noqa: E402, F403

__all__ = ["__version__", *api.__all__]
