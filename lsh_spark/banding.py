"""LSH banding: explode band keys.

Each document's signature is cut into ``b`` bands of ``r`` rows; documents
whose rows of a band all agree share that band's bucket key and become
candidates.  ``(b, r)`` is the run's
:meth:`~lsh_spark.config.DedupConfig.band_params`, chosen on the S-curve by
:func:`lsh_spark.config.choose_bands`.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def band_key(signature: str, band: Column, rows: int) -> Column:
    """The 64-bit bucket key of band ``band`` (an int column, from 0) of the
    ``array<int>`` column named ``signature``, ``rows`` values per band.

    Spark's XXH64 of ``(band, value_1, ..., value_rows)``: ``xxhash64(band,
    slice(signature, band * rows + 1, rows))`` (an array hashes as its elements
    in turn, so the slice hashes like its values listed one by one).  The band
    number is part of the key, so equal values in different bands never share
    a bucket.  A null signature gives the hash of the band number alone.
    """
    start = band * F.lit(rows) + F.lit(1)
    return F.xxhash64(band, F.slice(F.col(signature), start, F.lit(rows)))


def explode_bands(signatures: DataFrame, bands: int, rows: int, *extra: str) -> DataFrame:
    """``(id, signature, ...) -> (id, band, bucket, *extra)``: one row per band.

    Each row takes a band number from ``sequence(0, bands - 1)`` and its key
    from :func:`band_key`, so the generated code is the same few lines for
    any ``(b, r)``.  Written out instead as one hash expression per band, the
    bands made one method of the stage's generated code longer than the 8,000
    bytes of bytecode HotSpot compiles at most (``-XX:+DontCompileHugeMethods``,
    its default), so the JVM interpreted it, and a profile found a large share
    of all task time in that method; the sequence form is several times faster
    for every ``(b, r)`` measured.

    Example
    -------
    >>> spark = getfixture("spark")
    >>> sigs = spark.createDataFrame([("a", [1, 2, 3, 4, 5, 6])], "id string, signature array<int>")
    >>> bands = explode_bands(sigs, 3, 2)
    >>> bands.columns
    ['id', 'band', 'bucket']
    >>> sorted(row.band for row in bands.collect())
    [0, 1, 2]
    """
    band = F.explode(F.sequence(F.lit(0), F.lit(bands - 1))).alias("band")
    return signatures.select("id", "signature", band, *extra).select(
        "id", "band", band_key("signature", F.col("band"), rows).alias("bucket"), *extra
    )
