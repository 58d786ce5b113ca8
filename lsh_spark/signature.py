"""MinHash signatures over Arrow record batches: a compiled kernel, or numpy.

Permutation ``i`` is ``h_i(x) = (a_i * x + b_i) mod p`` with the Mersenne prime
``p = 2**31 - 1``, ``1 <= a_i < p``, ``0 <= b_i < p`` and ``x`` the 64-bit shingle
hash reduced mod ``p``.  All operands are below ``2**31``, so ``a_i * x + b_i``
is below ``2**62`` and the arithmetic in ``uint64`` is exact: there is no
wrap-around anywhere.  Signature values lie in ``[0, p)`` and are stored as
``int32``.  (Reducing shingle hashes to 31 bits only for MinHash makes two
different shingles collide with probability ``2**-31``; verification uses the
full 64-bit hashes.)

``a_i`` and ``b_i`` come from SplitMix64 of the configured seed, pure integer
arithmetic that never changes between numpy versions or machines, so the same
seed gives the same signatures everywhere.

Two kernels compute the same values from a flat array of all shingles in a
batch and the Arrow list offsets:

* **compiled** (the default where numba is installed): one loop per document
  and shingle, all ``num_perm`` permutations of that shingle in registers
  (32-bit coefficients, so each product is one 32 x 32 -> 64-bit multiply the
  compiler vectorizes), folded into the document's running minima; compiled
  once per process and cached on disk by numba.  Several times faster than
  the numpy kernel on the same core (``bench/minhash_throughput.py`` compares
  both).
* **numpy** (the fallback, and the reference in the tests): the shingles cut
  at document boundaries into chunks of about ``CHUNK`` values (32K, 256 KB
  each: the chunk and its two scratch arrays stay in a core's L2 cache while
  all permutations pass over it); per permutation and chunk ``a_i * x + b_i``
  in place, the remainder as below, and per-document minima with
  ``np.minimum.reduceat``.

Both take the remainder by the Mersenne prime without a division: with
``h < 2**62``, ``t = (h & p) + (h >> 31)`` is congruent to ``h`` (``2**31 = 1 mod
p``) and below ``2 p``, and ``min(t, t - p)`` in wrapping ``uint64`` is ``t mod
p``.  The results are bit-identical to ``(a_i * x + b_i) % p`` (tested against
Python integers); numpy's ``%`` by a scalar is a hardware division per element,
three times slower than the fold.  ``LSH_SPARK_KERNELS=numpy`` in the
environment of the Python workers selects the numpy kernel.

Example
-------
>>> a, b = permutation_params(128, seed=1)
>>> sig = minhash_flat(np.array([1, 2, 3, 2, 3, 4], dtype=np.uint64),
...                    np.array([0, 3, 6]), a, b)
>>> sig.shape
(2, 128)
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lsh_spark.kernels import compiled, use_compiled
from lsh_spark.shingle import shingle_parts

MERSENNE_31 = np.uint64((1 << 31) - 1)
# Shingle values per chunk of the kernel (see the module docstring).
CHUNK = 1 << 15
# 32K rather than 64K keeps a chunk and its scratch arrays in a core's L2
# cache; 16K and less pay more in per-call overhead than they gain.
_P = (1 << 31) - 1
_MASK64 = (1 << 64) - 1


def _splitmix64(state: int) -> tuple[int, int]:
    """One SplitMix64 step (Steele, Lea, Flood 2014): returns (new_state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & _MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return state, z ^ (z >> 31)


def permutation_params(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)``: ``uint64`` arrays of ``num_perm`` coefficients below ``2**31 - 1``."""
    state = seed & _MASK64
    a = np.empty(num_perm, dtype=np.uint64)
    b = np.empty(num_perm, dtype=np.uint64)
    for i in range(num_perm):
        state, za = _splitmix64(state)
        state, zb = _splitmix64(state)
        a[i] = 1 + za % (_P - 1)
        b[i] = zb % _P
    return a, b


def minhash_flat(
    values: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray, kernel: str | None = None
) -> np.ndarray:
    """MinHash signatures of documents given as one flat array of shingle hashes.

    Parameters
    ----------
    values : uint64 array of all shingle hashes, document after document.
    offsets : int array of ``n_docs + 1`` boundaries into ``values``; every
        document must have at least one shingle.
    a, b : permutation coefficients from :func:`permutation_params`.
    kernel : ``"compiled"``, ``"numpy"`` or None: the environment variable
        ``LSH_SPARK_KERNELS`` if set, else the compiled kernel where numba is
        installed and numpy otherwise (:func:`lsh_spark.kernels.use_compiled`).
        Both give the same values.

    Returns
    -------
    ``(n_docs, num_perm)`` uint64 array, values in ``[0, 2**31 - 1)``.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    n_docs = len(offsets) - 1
    num_perm = len(a)
    if n_docs and np.any(np.diff(offsets) <= 0):
        raise ValueError("every document needs at least one shingle")
    if n_docs == 0:
        return np.full((0, num_perm), MERSENNE_31, dtype=np.uint64)
    if use_compiled(kernel):
        sig = np.empty((n_docs, num_perm), dtype=np.uint64)
        # Contiguous arrays of fixed types, so numba compiles (and caches) one
        # specialization per writability: Arrow's read-only buffers in the
        # workers, writable arrays elsewhere.
        values = values.view(np.uint64) if values.dtype == np.int64 else values
        compiled(_minhash_loop)(
            np.ascontiguousarray(values, dtype=np.uint64),
            np.ascontiguousarray(offsets),
            a.astype(np.uint32),
            b.astype(np.uint32),
            sig,
        )
        return sig
    return _minhash_numpy(values, offsets, a, b)


def _minhash_loop(values, offsets, a, b, out):
    """The compiled kernel's source (:func:`lsh_spark.kernels.compiled`): ``out[d, i]``
    is the minimum over document ``d``'s shingles ``x`` of ``(a[i] * (x mod p) +
    b[i]) mod p``, by the same division-free fold as the numpy kernel."""
    p = MERSENNE_31
    s31 = np.uint64(31)
    num_perm = a.shape[0]
    row = np.empty(num_perm, dtype=np.uint64)
    for d in range(offsets.shape[0] - 1):
        row[:] = p
        for j in range(offsets[d], offsets[d + 1]):
            x = values[j] % p
            for i in range(num_perm):
                h = np.uint64(a[i]) * x + np.uint64(b[i])
                t = (h & p) + (h >> s31)
                u = t - p  # wraps above t when t < p
                if u < t:
                    t = u
                if t < row[i]:
                    row[i] = t
        out[d, :] = row


def _minhash_numpy(
    values: np.ndarray, offsets: np.ndarray, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """The numpy kernel of :func:`minhash_flat` (checked arguments)."""
    n_docs = len(offsets) - 1
    num_perm = len(a)
    values = values[offsets[0] : offsets[-1]]
    starts = offsets[:-1] - offsets[0]
    ends = offsets[1:] - offsets[0]
    x = values.astype(np.uint64, copy=False) % MERSENNE_31
    sig = np.empty((num_perm, n_docs), dtype=np.uint64)
    # Chunks end at document boundaries; a document longer than CHUNK is a chunk alone.
    size = max(CHUNK, int((ends - starts).max()))
    h = np.empty(size, dtype=np.uint64)
    t = np.empty(size, dtype=np.uint64)
    shift = np.uint64(31)
    d0 = 0
    while d0 < n_docs:
        d1 = max(d0 + 1, int(np.searchsorted(ends, starts[d0] + CHUNK, side="right")))
        lo, hi = starts[d0], ends[d1 - 1]
        xc, hc, tc = x[lo:hi], h[: hi - lo], t[: hi - lo]
        local = starts[d0:d1] - lo
        for i in range(num_perm):
            np.multiply(xc, a[i], out=hc)
            hc += b[i]
            np.bitwise_and(hc, MERSENNE_31, out=tc)
            np.right_shift(hc, shift, out=hc)
            hc += tc
            np.subtract(hc, MERSENNE_31, out=tc)
            np.minimum(hc, tc, out=hc)
            np.minimum.reduceat(hc, local, out=sig[i, d0:d1])
        d0 = d1
    return np.ascontiguousarray(sig.T)


def signature_matrix(
    shingles: pa.Array, a: np.ndarray, b: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``list<int64>`` shingle sets -> (the signatures of the non-empty sets as an
    ``(n_present, num_perm)`` int32 matrix, which rows are present, every
    row's number of shingles)."""
    flat, lengths = shingle_parts(shingles)
    present = lengths > 0
    offsets = np.zeros(int(present.sum()) + 1, dtype=np.int64)
    np.cumsum(lengths[present], out=offsets[1:])
    values = flat.view(np.uint64)
    return minhash_flat(values, offsets, a, b).astype(np.int32), present, lengths


def signature_arrays(shingles: pa.Array, a: np.ndarray, b: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """``list<int64>`` shingle sets -> (``signature`` as ``list<int32>``, ``num_shingles``).

    A null or empty set gets a null signature and 0 shingles.
    """
    sig, present, lengths = signature_matrix(shingles, a, b)
    num_perm = len(a)
    # Rows without shingles (rejected records passing through) get a null signature.
    list_offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(np.where(present, num_perm, 0), out=list_offsets[1:])
    sig_arr = pa.ListArray.from_arrays(
        pa.array(list_offsets),
        pa.array(sig.ravel()),
        mask=None if present.all() else pa.array(~present),
    )
    return sig_arr, pa.array(lengths.astype(np.int32))


def _signature_batch(batch: pa.RecordBatch, a: np.ndarray, b: np.ndarray) -> pa.RecordBatch:
    shingles = batch.column(batch.schema.get_field_index("shingles"))
    sig_arr, lengths = signature_arrays(shingles, a, b)
    cols, names = [], []
    for name, col in zip(batch.schema.names, batch.columns, strict=False):
        if name == "shingles":
            cols += [sig_arr, lengths]
            names += ["signature", "num_shingles"]
        else:
            cols.append(col)
            names.append(name)
    return pa.RecordBatch.from_arrays(cols, names=names)


def minhash(df: DataFrame, num_perm: int, seed: int) -> DataFrame:
    """``(..., shingles, ...) -> (..., signature, num_shingles, ...)``.

    ``shingles`` (``array<bigint>``) is replaced by ``signature`` (``array<int>``
    of length ``num_perm``; null where ``shingles`` is null or empty) and
    ``num_shingles`` (``int``); all other columns pass through unchanged.
    """
    a, b = permutation_params(num_perm, seed)
    fields = []
    for f in df.schema.fields:
        if f.name == "shingles":
            fields.append(T.StructField("signature", T.ArrayType(T.IntegerType(), False), True))
            fields.append(T.StructField("num_shingles", T.IntegerType(), False))
        else:
            fields.append(f)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield _signature_batch(batch, a, b)

    return df.mapInArrow(run, T.StructType(fields))
