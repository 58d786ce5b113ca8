"""SimHash fingerprints and Hamming-distance search by permuted block tables.

**Fingerprints** (Charikar 2002): every shingle hash ``h`` (64-bit, from
:mod:`lsh_spark.shingle`) votes ``+w`` on bit ``j`` of the fingerprint if bit
``j`` of ``h`` is set and ``-w`` otherwise; bit ``j`` of the fingerprint is 1
where the sum is positive.  ``w`` is the shingle's term frequency (``tf``: the
votes of a shingle that occurs three times count three times) or 1
(``uniform``: the distinct shingle set).  Two documents' fingerprints agree on
a bit with probability ``1 - theta / pi`` for the angle ``theta`` between their
weighted shingle vectors, so near-duplicates have fingerprints a few bits apart.

**Search** (Manku, Jain and Das Sarma, *Detecting near-duplicates for web
crawling*, WWW 2007): split the 64 bits into ``B`` contiguous blocks.  Two
fingerprints at Hamming distance ``<= k`` differ in at most ``k`` blocks, so
they agree exactly on at least ``B - k`` of them.  One *table* per choice of
``B - k`` blocks out of ``B`` (``C(B, k)`` tables) keys every fingerprint by
those blocks; a pair within distance ``k`` shares the key of some table, so the
bucket join on ``(table, key)`` misses none of them (tested exhaustively on
short fingerprints).  More blocks mean more tables but longer keys (about
``64 (B - k) / B`` bits) and so fewer false candidates; every candidate's exact
Hamming distance is then checked.

Fingerprints are stored as signed 64-bit integers (the same 64 bits).

Example
-------
>>> fp = simhash_flat(np.array([1, 2, 3], dtype=np.uint64), np.array([0, 3]))
>>> fp.dtype
dtype('int64')
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

BITS = 64
# Shingles processed at a time: a (chunk x 64) int8 vote matrix, 16 MiB.
_CHUNK = 1 << 18


def simhash_flat(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """64-bit SimHash of each document: ``values[offsets[i]:offsets[i+1]]`` are its
    shingle hashes (repeated as often as they should weigh).  Returns ``int64``;
    an empty document gets 0."""
    values = np.ascontiguousarray(values, dtype=np.uint64)
    n_docs = len(offsets) - 1
    sums = np.zeros((n_docs, BITS), dtype=np.int64)
    doc_of = np.repeat(np.arange(n_docs), np.diff(offsets))
    shifts = np.arange(BITS, dtype=np.uint64)
    for start in range(0, len(values), _CHUNK):
        h = values[start : start + _CHUNK]
        votes = ((h[:, None] >> shifts) & np.uint64(1)).astype(np.int8) * 2 - 1
        _add_rows(sums, doc_of[start : start + _CHUNK], votes)
    bits = (sums > 0).astype(np.uint64)
    fp = (bits << shifts).sum(axis=1, dtype=np.uint64)
    return fp.view(np.int64)


def _add_rows(sums: np.ndarray, rows: np.ndarray, votes: np.ndarray) -> None:
    """``sums[rows[i]] += votes[i]`` for sorted ``rows`` (runs summed with reduceat)."""
    if len(rows) == 0:
        return
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    sums[rows[starts]] += np.add.reduceat(votes.astype(np.int32), starts, axis=0)


def add_simhash(df: DataFrame, col: str = "shingles") -> DataFrame:
    """``(..., <col>: array<bigint>, ...) -> (..., simhash: bigint, ...)``: ``col`` is
    replaced by the fingerprint of its values; other columns pass through."""
    fields = [
        T.StructField("simhash", T.LongType(), False) if f.name == col else f
        for f in df.schema.fields
    ]
    names = [f.name for f in df.schema.fields]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            lists = batch.column(col)
            offsets = lists.offsets.to_numpy() - lists.offsets[0].as_py()
            values = lists.values.to_numpy(zero_copy_only=False).view(np.uint64)
            fp = pa.array(simhash_flat(values, offsets), type=pa.int64())
            yield pa.RecordBatch.from_arrays(
                [fp if n == col else batch.column(n) for n in names],
                names=["simhash" if n == col else n for n in names],
            )

    return df.mapInArrow(run, T.StructType(fields))


def block_bounds(blocks: int, bits: int = BITS) -> list[tuple[int, int]]:
    """``(first bit, width)`` of ``blocks`` contiguous blocks covering ``bits`` bits."""
    if not 1 <= blocks <= bits:
        raise ValueError(f"--simhash-blocks: got {blocks}; allowed: 1..{bits}")
    edges = [round(i * bits / blocks) for i in range(blocks + 1)]
    return [(edges[i], edges[i + 1] - edges[i]) for i in range(blocks)]


def table_masks(max_hamming: int, blocks: int, bits: int = BITS) -> list[int]:
    """One bit mask per table: the union of ``blocks - max_hamming`` blocks.

    Returned as signed 64-bit values (as Spark ``bigint`` literals)."""
    if not 0 <= max_hamming < blocks:
        raise ValueError(
            f"--max-hamming: got {max_hamming}; allowed: 0..{blocks - 1} "
            f"(less than --simhash-blocks {blocks})"
        )
    bounds = block_bounds(blocks, bits)
    masks = []
    for combo in combinations(range(blocks), blocks - max_hamming):
        m = 0
        for i in combo:
            start, width = bounds[i]
            m |= ((1 << width) - 1) << start
        masks.append(m - (1 << 64) if m >= 1 << 63 else m)
    return masks


def table_keys(fp: Column, max_hamming: int, blocks: int, bits: int = BITS) -> Column:
    """``array<bigint>``: the key of ``fp`` in every table (table number hashed in)."""
    return F.array(
        *[
            F.xxhash64(F.lit(t), fp.bitwiseAND(F.lit(m).cast("bigint")))
            for t, m in enumerate(table_masks(max_hamming, blocks, bits))
        ]
    )


def hamming(a: Column, b: Column) -> Column:
    """Number of differing bits of two ``bigint`` fingerprints."""
    return F.bit_count(a.bitwiseXOR(b))


def explode_tables(fps: DataFrame, max_hamming: int, blocks: int, *extra: str) -> DataFrame:
    """``(id, simhash, ...) -> (id, band, bucket, ...)``: one row per table, as
    :func:`lsh_spark.banding.explode_bands` does for MinHash bands."""
    return fps.select(
        "id",
        *extra,
        F.posexplode(table_keys(F.col("simhash"), max_hamming, blocks)).alias("band", "bucket"),
    ).select("id", "band", "bucket", *extra)
