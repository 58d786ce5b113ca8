"""lsh-spark: near-duplicate detection for web-scale text on Apache Spark."""

__version__ = "0.2.0"
