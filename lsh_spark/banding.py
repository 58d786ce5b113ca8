"""LSH banding: explode band keys.

Each document's signature is cut into ``b`` bands of ``r`` rows; documents
whose rows of a band all agree share that band's bucket key and become
candidates.  ``(b, r)`` is the run's
:meth:`~lsh_spark.config.DedupConfig.band_params`, chosen on the S-curve by
:func:`lsh_spark.config.choose_bands`.
"""

from __future__ import annotations

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# The column of ``signatures/`` that holds a document's bucket key of every band
# (``array<bigint>``, position = band), written by the signature pass of MinHash
# on word shingles instead of the signature; its field metadata says which
# ``(bands, rows)`` made it (:data:`BANDS_META`, :data:`ROWS_META`).
BUCKETS_COL = "buckets"
BANDS_META = "lsh_spark.bands"
ROWS_META = "lsh_spark.rows"

# XXH64's primes and Spark's seed of ``xxhash64`` (XxHash64.seed = 42).
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P5 = np.uint64(0x27D4EB2F165667C5)
_SPARK_SEED = 42


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


def _hash_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark's ``XXH64.hashInt`` of ``values`` (int32 as uint32, or uint32) with
    ``seed`` (uint64), elementwise; uint64 arithmetic wraps as Java's long does."""
    h = seed + _P5 + np.uint64(4)
    h ^= values.astype(np.uint32).astype(np.uint64) * _P1
    h = ((h << np.uint64(23)) | (h >> np.uint64(41))) * _P2 + _P3
    h ^= h >> np.uint64(33)
    h *= _P2
    h ^= h >> np.uint64(29)
    h *= _P3
    h ^= h >> np.uint64(32)
    return h


def bucket_keys(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``(n, num_perm)`` int32 signatures -> ``(n, bands)`` int64 bucket keys.

    The same values as :func:`band_key` computes in Spark (``xxhash64(band,
    slice(signature, band * rows + 1, rows))``, the keys the crawl index was
    written with), in numpy, so the signature pass can write 16 keys a document
    instead of its 128 signature values.  ``bands * rows`` may be less than
    ``num_perm``: the values after them are not used, as in :func:`band_key`.
    """
    n, num_perm = signatures.shape
    if bands * rows > num_perm:
        raise ValueError(f"{bands} bands of {rows} rows need {bands * rows} values, got {num_perm}")
    seed = np.full(bands, _SPARK_SEED, dtype=np.uint64)
    h = np.broadcast_to(_hash_int(np.arange(bands, dtype=np.uint32), seed), (n, bands)).copy()
    cut = signatures[:, : bands * rows].reshape(n, bands, rows)
    for t in range(rows):
        h = _hash_int(cut[:, :, t], h)
    return h.view(np.int64)


def explode_bands(signatures: DataFrame, bands: int, rows: int, *extra: str) -> DataFrame:
    """``(id, signature, ...) -> (id, band, bucket, *extra)``: one row per band.

    Signatures with a :data:`BUCKETS_COL` column (the signature pass of MinHash
    on word shingles writes the keys instead of the signature) give
    ``posexplode`` of it; its metadata must name the same ``(bands, rows)``, or
    this raises ``ValueError``.  Otherwise each row takes a band number from
    ``sequence(0, bands - 1)`` and its key from :func:`band_key`, so the
    generated code is the same few lines for any ``(b, r)``.  Written out
    instead as one hash expression per band, the bands made one method of the
    stage's generated code longer than the 8,000 bytes of bytecode HotSpot
    compiles at most (``-XX:+DontCompileHugeMethods``, its default), so the JVM
    interpreted it, and a profile found a large share of all task time in that
    method; the sequence form is several times faster for every ``(b, r)``
    measured.

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
    if BUCKETS_COL in signatures.columns:
        made = _buckets_made_by(signatures)
        if made != (bands, rows):
            raise ValueError(
                f"signatures hold the bucket keys of {made[0]} bands of {made[1]} rows, "
                f"not of the {bands} bands of {rows} rows asked for: run the signature "
                "stage again with these settings"
            )
        keys = F.posexplode(BUCKETS_COL).alias("band", "bucket")
        return signatures.select("id", keys, *extra)
    band = F.explode(F.sequence(F.lit(0), F.lit(bands - 1))).alias("band")
    return signatures.select("id", "signature", band, *extra).select(
        "id", "band", band_key("signature", F.col("band"), rows).alias("bucket"), *extra
    )


def buckets_column(bands: int, rows: int) -> Column:
    """The :data:`BUCKETS_COL` column, with the metadata that
    :func:`explode_bands` checks."""
    return F.col(BUCKETS_COL).alias(BUCKETS_COL, metadata={BANDS_META: bands, ROWS_META: rows})


def _buckets_made_by(signatures: DataFrame) -> tuple[int | None, int | None]:
    meta = signatures.schema[BUCKETS_COL].metadata
    return meta.get(BANDS_META), meta.get(ROWS_META)
