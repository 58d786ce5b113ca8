import numpy as np
import pytest
from pyspark.sql import types as T

from lsh_spark.kernels import KERNELS
from lsh_spark.signature import (
    minhash,
    minhash_flat,
    permutation_params,
)

P = (1 << 31) - 1


def test_permutation_params_golden_values():
    # SplitMix64 from seed 1: these numbers must never change (signatures are stored).
    a, b = permutation_params(3, seed=1)
    assert a.tolist() == [int(x) for x in a]  # plain uint64
    assert a.tolist() == GOLDEN_A and b.tolist() == GOLDEN_B
    assert all(1 <= x < P for x in a) and all(0 <= x < P for x in b)
    a2, _ = permutation_params(3, seed=2)
    assert a2.tolist() != a.tolist()


GOLDEN_A = [1294668924, 1568727337, 401541412]
GOLDEN_B = [1667631020, 1371919918, 380574338]


def test_splitmix64_matches_published_test_vector():
    # Reference outputs of SplitMix64 seeded with 1234567 (Vigna's splitmix64.c).
    from lsh_spark.signature import _splitmix64

    state, out = 1234567, []
    for _ in range(3):
        state, z = _splitmix64(state)
        out.append(z)
    assert out == [6457827717110365317, 3203168211198807973, 9817491932198370423]


def _reference(values, offsets, a, b):
    out = []
    for d in range(len(offsets) - 1):
        xs = [int(v) % P for v in values[offsets[d] : offsets[d + 1]]]
        out.append(
            [min((int(ai) * x + int(bi)) % P for x in xs) for ai, bi in zip(a, b, strict=False)]
        )
    return np.array(out, dtype=np.uint64)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("num_perm", [1, 7, 64])
def test_kernel_equals_python_bigint_reference(num_perm, kernel):
    rng = np.random.default_rng(1)
    lengths = [1, 3, 17, 2, 1, 40, 5]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    values = rng.integers(0, 2**64 - 1, size=offsets[-1], dtype=np.uint64)
    a, b = permutation_params(num_perm, seed=5)
    assert np.array_equal(
        minhash_flat(values, offsets, a, b, kernel), _reference(values, offsets, a, b)
    )
    # Offsets into the middle of a larger buffer (an Arrow slice) give the same rows.
    padded = np.concatenate([values[:4], values, values[:3]])
    assert np.array_equal(
        minhash_flat(padded, offsets + 4, a, b, kernel), _reference(values, offsets, a, b)
    )
    # Signed hashes (Arrow's int64 view of the same bits) give the same rows.
    assert np.array_equal(
        minhash_flat(values.view(np.int64), offsets, a, b, kernel),
        _reference(values, offsets, a, b),
    )
    # Extreme inputs: 0, p - 1, p, p + 1 and 2**64 - 1 reduce exactly.
    edge = np.array([0, P - 1, P, P + 1, 2**64 - 1], dtype=np.uint64)
    assert np.array_equal(
        minhash_flat(edge, np.array([0, 1, 2, 3, 4, 5]), a, b, kernel),
        _reference(edge, [0, 1, 2, 3, 4, 5], a, b),
    )


def test_kernels_agree_on_a_large_batch(monkeypatch):
    # 2,000 documents of 1 to 600 shingles, 128 permutations: the compiled and
    # numpy kernels give the same signatures, and the environment variable
    # selects either.
    rng = np.random.default_rng(11)
    lengths = rng.integers(1, 600, size=2000)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    values = rng.integers(0, 2**64 - 1, size=offsets[-1], dtype=np.uint64)
    a, b = permutation_params(128, seed=1)
    numpy_sig = minhash_flat(values, offsets, a, b, "numpy")
    assert np.array_equal(minhash_flat(values, offsets, a, b, "compiled"), numpy_sig)
    monkeypatch.setenv("LSH_SPARK_KERNELS", "numpy")
    assert np.array_equal(minhash_flat(values, offsets, a, b), numpy_sig)
    monkeypatch.setenv("LSH_SPARK_KERNELS", "fortran")
    with pytest.raises(
        ValueError, match="LSH_SPARK_KERNELS 'fortran': allowed values are compiled, numpy"
    ):
        minhash_flat(values, offsets, a, b)
    # An explicit choice wins over the environment, and is checked the same way.
    assert np.array_equal(minhash_flat(values, offsets, a, b, "compiled"), numpy_sig)
    with pytest.raises(ValueError, match="kernel 'gpu': allowed values are compiled, numpy"):
        minhash_flat(values, offsets, a, b, "gpu")


def test_compiled_kernel_needs_numba(monkeypatch):
    import lsh_spark.kernels as kernels

    monkeypatch.setattr(kernels, "_numba", lambda: None)  # as without numba
    a, b = permutation_params(4, 1)
    values, offsets = np.array([5, 6, 7], dtype=np.uint64), [0, 1, 3]
    assert np.array_equal(minhash_flat(values, offsets, a, b), _reference(values, offsets, a, b))
    with pytest.raises(ValueError, match="compiled kernels need numba"):
        minhash_flat(values, offsets, a, b, "compiled")


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_chunks_and_division_free_remainder_are_exact(monkeypatch, kernel):
    import lsh_spark.signature as mh

    # Chunks of 10 values (numpy kernel): documents shorter than, equal to and
    # longer than a chunk, so every chunk boundary case is crossed.
    monkeypatch.setattr(mh, "CHUNK", 10)
    rng = np.random.default_rng(7)
    lengths = [3, 7, 10, 1, 25, 9, 2, 11, 4]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    values = rng.integers(0, 2**64 - 1, size=offsets[-1], dtype=np.uint64)
    a, b = permutation_params(16, seed=9)
    assert np.array_equal(
        minhash_flat(values, offsets, a, b, kernel), _reference(values, offsets, a, b)
    )
    # a * x + b whose low 31 bits are all ones (h & p == p, h = 0 mod p on the
    # low half) and products near the top of the range reduce exactly too.
    hits = []
    for ai, bi in zip(a.tolist(), b.tolist(), strict=False):
        if ai % 2:  # solve a * x + b = 2**31 - 1 (mod 2**31) for x
            x = ((2**31 - 1 - bi) * pow(ai, -1, 2**31)) % 2**31
            if x < P:
                assert (ai * x + bi) & P == P
                hits.append(x)
    assert hits
    hits = np.array(hits, dtype=np.uint64)
    top = np.array([P - 1, P - 2, (P - 1) // 2], dtype=np.uint64)
    edge = np.concatenate([hits, top])
    one_each = np.arange(len(edge) + 1)
    assert np.array_equal(
        minhash_flat(edge, one_each, a, b, kernel), _reference(edge, one_each, a, b)
    )


@pytest.mark.parametrize("kernel", KERNELS)
def test_empty_document_is_refused(kernel):
    a, b = permutation_params(4, 1)
    with pytest.raises(ValueError, match="at least one shingle"):
        minhash_flat(np.array([1, 2], dtype=np.uint64), [0, 2, 2], a, b, kernel)


def test_estimate_within_tolerance_of_exact_jaccard():
    """Over 300 random set pairs the estimate's error has the binomial spread."""
    rng = np.random.default_rng(11)
    num_perm = 256
    a, b = permutation_params(num_perm, seed=9)
    errors = []
    for _ in range(300):
        universe = rng.choice(2**62, size=400, replace=False).astype(np.uint64)
        na, nb = rng.integers(20, 300, size=2)
        sa = set(rng.choice(universe, size=na, replace=False).tolist())
        sb = set(rng.choice(universe, size=nb, replace=False).tolist())
        exact = len(sa & sb) / len(sa | sb)
        va = np.array(sorted(sa), dtype=np.uint64)
        vb = np.array(sorted(sb), dtype=np.uint64)
        sig = minhash_flat(np.concatenate([va, vb]), [0, len(va), len(va) + len(vb)], a, b)
        errors.append(np.mean(sig[0] == sig[1]) - exact)
    errors = np.abs(np.array(errors))
    # Std error of the estimate is sqrt(J(1-J)/256) <= 0.031.
    assert errors.mean() < 0.03
    assert np.quantile(errors, 0.99) < 0.10
    assert errors.max() < 0.13


def test_minhash_stage_passes_columns_through(spark):
    schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("shingles", T.ArrayType(T.LongType())),
            T.StructField("extra", T.StringType()),
        ]
    )
    rows = [(1, [5, -3, 2**62], "x"), (2, [5, -3, 2**62], "y"), (3, [-(2**63)], "z")]
    out = minhash(spark.createDataFrame(rows, schema), num_perm=16, seed=4)
    assert out.columns == ["id", "signature", "num_shingles", "extra"]
    got = {r.id: r for r in out.collect()}
    assert got[1].signature == got[2].signature
    assert len(got[1].signature) == 16 and got[1].num_shingles == 3
    assert got[3].extra == "z" and got[3].num_shingles == 1
    a, b = permutation_params(16, 4)
    vals = np.array([5, -3, 2**62], dtype=np.int64).view(np.uint64)
    assert got[1].signature == minhash_flat(vals, [0, 3], a, b)[0].astype(int).tolist()


def test_rows_without_shingles_get_null_signature(spark):
    schema = T.StructType(
        [
            T.StructField("id", T.StringType()),
            T.StructField("shingles", T.ArrayType(T.LongType())),
        ]
    )
    rows = [("a", [1, 2, 3]), ("rejected", None), ("empty", []), ("b", [1, 2, 3])]
    got = {r.id: r for r in minhash(spark.createDataFrame(rows, schema), 8, 1).collect()}
    assert got["rejected"].signature is None and got["rejected"].num_shingles == 0
    assert got["empty"].signature is None
    assert got["a"].signature == got["b"].signature and len(got["a"].signature) == 8
