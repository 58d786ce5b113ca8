"""LSH for vectors: random hyperplanes (cosine) and p-stable projections (Euclidean).

**Random hyperplanes** (Charikar 2002): hash ``i`` of a vector ``v`` is the sign
bit of ``a_i . v`` for a random Gaussian direction ``a_i``.  Two vectors at
angle ``theta`` get the same bit with probability ``1 - theta / pi``, so at
cosine similarity ``t`` one row agrees with probability ``p(t) = 1 -
arccos(t) / pi``.

**p-stable projections** (Datar, Immorlica, Indyk and Mirrokni, SoCG 2004):
hash ``i`` is ``floor((a_i . v + b_i) / w)`` with Gaussian ``a_i`` (2-stable) and
``b_i`` uniform in ``[0, w)``.  Two vectors at Euclidean distance ``c`` get the
same value with probability

    p(c) = 1 - 2 Phi(-w/c) - 2 / (sqrt(2 pi) w/c) (1 - exp(-(w/c)^2 / 2))

(Datar et al., eq. in section 3.2), which falls from 1 at ``c = 0``.  Both
probabilities are :mod:`lsh_spark.config`'s (:func:`~lsh_spark.config.hyperplane_probability`,
:func:`~lsh_spark.config.pstable_probability`): the options derive ``(b, r)`` from them.

Both kinds of hashes are grouped into ``b`` bands of ``r`` rows exactly as
MinHash values are (:func:`lsh_spark.banding.explode_bands`), so a pair whose rows
agree with probability ``p`` becomes a candidate with ``1 - (1 - p^r)^b``; the
default ``(b, r)`` puts that at ``--target-recall`` for ``p`` at the threshold
(cosine ``--threshold``, or distance ``--max-distance``).  Every candidate is
then checked exactly (cosine, or distance) with native Spark array functions.

Projection matrices come from numpy's PCG64 generator seeded with ``--seed``:
the same seed gives the same hashes on every machine with the pinned numpy.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

# Vectors projected at a time (bounds the float64 matrix of one chunk).
_CHUNK = 4096


def projections(
    dim: int, n: int, seed: int, kind: str, width: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """``(A, b)``: a ``dim x n`` Gaussian matrix and offsets (zeros for hyperplanes,
    uniform in ``[0, width)`` for p-stable)."""
    rng = np.random.Generator(np.random.PCG64([seed, dim, n, 1 if kind == "pstable" else 0]))
    a = rng.standard_normal((dim, n))
    b = rng.uniform(0.0, width, n) if kind == "pstable" else np.zeros(n)
    return a, b


def hyperplane_bits(v: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``int32`` sign bits (1 where ``a_i . v >= 0``), one row per vector."""
    return (v @ a >= 0).astype(np.int32)


def pstable_hashes(v: np.ndarray, a: np.ndarray, b: np.ndarray, width: float) -> np.ndarray:
    """``int64`` ``floor((a_i . v + b_i) / w)``, one row per vector."""
    return np.floor((v @ a + b) / width).astype(np.int64)


def _signature_batches(kind: str, a: np.ndarray, b: np.ndarray, width: float, col: str):
    out_type = pa.list_(pa.int32() if kind == "hyperplane" else pa.int64())

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        n = a.shape[1]
        for batch in batches:
            lists = batch.column(col)
            flat = lists.values.to_numpy(zero_copy_only=False).astype(np.float64)
            v = flat.reshape(len(batch), a.shape[0]) if len(batch) else np.zeros((0, a.shape[0]))
            parts = []
            for s in range(0, len(v), _CHUNK):
                chunk = v[s : s + _CHUNK]
                parts.append(
                    hyperplane_bits(chunk, a)
                    if kind == "hyperplane"
                    else pstable_hashes(chunk, a, b, width)
                )
            sig = np.concatenate(parts) if parts else np.zeros((0, n))
            offsets = pa.array(np.arange(0, len(v) * n + 1, n, dtype=np.int32))
            values = pa.array(sig.reshape(-1), type=out_type.value_type)
            yield pa.RecordBatch.from_arrays(
                [batch.column("id"), pa.ListArray.from_arrays(offsets, values)],
                names=["id", "signature"],
            )

    return run


def add_vector_signatures(
    df: DataFrame,
    kind: str,
    dim: int,
    num_hashes: int,
    seed: int,
    width: float = 1.0,
    col: str = "vector",
) -> DataFrame:
    """``(id, <col>: array<double> of length dim) -> (id, signature)``.

    ``signature`` is ``array<int>`` of sign bits (hyperplane) or ``array<bigint>``
    of bucket numbers (pstable), ``num_hashes`` long.
    """
    if kind not in ("hyperplane", "pstable"):
        raise ValueError(f"--method: got {kind!r}; allowed here: hyperplane | pstable")
    a, b = projections(dim, num_hashes, seed, kind, width)
    elem = T.IntegerType() if kind == "hyperplane" else T.LongType()
    schema = T.StructType(
        [
            T.StructField("id", df.schema["id"].dataType, True),
            T.StructField("signature", T.ArrayType(elem, False), False),
        ]
    )
    return df.select("id", col).mapInArrow(_signature_batches(kind, a, b, width, col), schema)


def dot(a: Column, b: Column) -> Column:
    return F.aggregate(F.zip_with(a, b, lambda x, y: x * y), F.lit(0.0), lambda s, x: s + x)


def cosine(a: Column, b: Column) -> Column:
    """Exact cosine similarity of two equal-length ``array<double>``."""
    return dot(a, b) / (F.sqrt(dot(a, a)) * F.sqrt(dot(b, b)))


def distance(a: Column, b: Column) -> Column:
    """Exact Euclidean distance of two equal-length ``array<double>``."""
    diff = F.zip_with(a, b, lambda x, y: (x - y) * (x - y))
    return F.sqrt(F.aggregate(diff, F.lit(0.0), lambda s, x: s + x))


def as_double_array(col: Column, dtype: T.DataType) -> Column:
    """An ``array<float|double|int...>`` or MLlib vector column as ``array<double>``."""
    if isinstance(dtype, T.ArrayType):
        return col.cast(T.ArrayType(T.DoubleType()))
    from pyspark.ml.functions import vector_to_array

    return vector_to_array(col, "float64")


def vector_rejects(v: Column, dim: int, need_norm: bool) -> Column:
    """Reject reason of a vector (null when it is usable)."""
    finite = F.forall(v, lambda x: ~F.isnan(x) & (F.abs(x) < F.lit(float("inf"))))
    reason = (
        F.when(v.isNull(), F.lit("missing_vector: the vector column is null"))
        .when(
            F.size(v) != dim,
            F.concat(
                F.lit("wrong_dimension: "),
                F.size(v).cast("string"),
                F.lit(f" values, expected {dim}"),
            ),
        )
        .when(
            F.exists(v, lambda x: x.isNull()) | ~finite,
            F.lit("non_finite_vector: null, NaN or infinite value"),
        )
    )
    if need_norm:
        reason = reason.when(
            F.forall(v, lambda x: x == 0),
            F.lit("zero_vector: cosine is undefined for the zero vector"),
        )
    return reason
