import numpy as np
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.banding import explode_bands
from lsh_spark.config import candidate_probability, choose_bands, s_curve
from lsh_spark.signature import minhash_flat, permutation_params


@pytest.mark.parametrize("s, b, r", [(0.8, 16, 6), (0.5, 20, 5), (0.9, 1, 1), (0.3, 50, 2)])
def test_probability_matches_formula(s, b, r):
    assert candidate_probability(s, b, r) == pytest.approx(1 - (1 - s**r) ** b)


@pytest.mark.parametrize("t, n", [(0.5, 128), (0.7, 128), (0.8, 128), (0.9, 256), (0.8, 64)])
def test_choice_reaches_target_and_is_cheapest(t, n):
    b, r = choose_bands(t, n, 0.99)
    assert b * r <= n
    assert candidate_probability(t, b, r) >= 0.99
    # No feasible choice with more rows per band (fewer false positives) fits.
    for r2 in range(r + 1, n + 1):
        assert candidate_probability(t, n // r2, r2) < 0.99


def test_s_curve_is_monotone_and_spans_0_to_1():
    pts = s_curve(16, 6)
    ps = [p["p"] for p in pts]
    assert ps[0] == 0.0 and ps[-1] == 1.0
    assert all(a <= b for a, b in zip(ps, ps[1:], strict=False))


def test_measured_candidate_rate_matches_theory():
    """Signatures of random set pairs at known Jaccard share a band at the S-curve rate."""
    rng = np.random.default_rng(7)
    a, b_ = permutation_params(24, seed=3)
    bands, rows = 6, 4
    for s_target in (0.3, 0.6, 0.8):
        hits, trials = 0, 400
        for _ in range(trials):
            common = rng.integers(0, 2**62, size=int(200 * s_target), dtype=np.uint64)
            only_a = rng.integers(0, 2**62, size=int(100 * (1 - s_target)), dtype=np.uint64)
            only_b = rng.integers(0, 2**62, size=int(100 * (1 - s_target)), dtype=np.uint64)
            sa = np.concatenate([common, only_a])
            sb = np.concatenate([common, only_b])
            true_j = len(common) / (len(common) + len(only_a) + len(only_b))
            sig = minhash_flat(np.concatenate([sa, sb]), [0, len(sa), len(sa) + len(sb)], a, b_)
            same = (sig[0] == sig[1]).reshape(bands, rows).all(axis=1).any()
            hits += bool(same)
        expected = candidate_probability(true_j, bands, rows)
        # Binomial standard error at 400 trials is at most 0.025; allow 4 sigma.
        assert abs(hits / trials - expected) < 0.1, (s_target, hits / trials, expected)


def test_explode_bands_rows_and_keys(spark):
    schema = T.StructType(
        [
            T.StructField("id", T.StringType()),
            T.StructField("signature", T.ArrayType(T.IntegerType())),
        ]
    )
    sig1 = list(range(12))
    sig2 = list(range(6)) + [99] * 6  # shares band 0 with sig1 (rows 0..5), not band 1
    df = spark.createDataFrame([("a", sig1), ("b", sig2)], schema)
    rows = explode_bands(df, 2, 6).collect()
    assert sorted((r.id, r.band) for r in rows) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    key = {(r.id, r.band): r.bucket for r in rows}
    assert key[("a", 0)] == key[("b", 0)]
    assert key[("a", 1)] != key[("b", 1)]
    # The band number is part of the key: identical values in two bands differ.
    same = spark.createDataFrame([("c", [5] * 12)], schema)
    k = {r.band: r.bucket for r in explode_bands(same, 2, 6).collect()}
    assert k[0] != k[1]


# The keys of the signature 0..11 in 2 bands of 6 rows, as Spark's
# xxhash64(band, slice(signature, ...)) with its seed 42 gives them.
GOLDEN_BAND_KEYS = [3489607848613141767, -3513857557410735426]


def _slice_keys(bands: int, rows: int):
    """The keys in their first form: xxhash64(band, slice) in a transform."""
    return F.transform(
        F.sequence(F.lit(0), F.lit(bands - 1)),
        lambda i: F.xxhash64(i, F.slice(F.col("signature"), i * rows + 1, F.lit(rows))),
    )


def _listed_keys(bands: int, rows: int):
    """The keys in their second form: xxhash64(band, value_1, ..., value_r) listed."""
    return F.expr(
        "array("
        + ", ".join(
            f"xxhash64({b}, " + ", ".join(f"signature[{b * rows + j}]" for j in range(rows)) + ")"
            for b in range(bands)
        )
        + ")"
    )


def test_band_keys_equal_the_hash_of_each_band_slice(spark):
    """explode_bands keys every band by Spark's xxhash64 of (band, slice of the
    signature): the keys the crawl index was written with, in both earlier
    forms of the expression, on random signatures and a null one, for short,
    long and single-row bands."""
    import random

    rng = random.Random(7)
    schema = T.StructType(
        [
            T.StructField("id", T.StringType()),
            T.StructField("signature", T.ArrayType(T.IntegerType())),
        ]
    )
    rows = [(f"d{i}", [rng.randrange(0, (1 << 31) - 1) for _ in range(128)]) for i in range(50)]
    df = spark.createDataFrame(rows + [("null", None)], schema)
    for bands, r in ((16, 6), (4, 32), (128, 1)):
        got = {(row.id, row.band): row.bucket for row in explode_bands(df, bands, r).collect()}
        assert len(got) == 51 * bands, (bands, r)
        for name, ref in (("slice", _slice_keys(bands, r)), ("listed", _listed_keys(bands, r))):
            want = {
                (row.id, band): key
                for row in df.select("id", ref.alias("k")).collect()
                for band, key in enumerate(row.k)
            }
            assert got == want, (bands, r, name)
    # A golden value, so that a change of the hash (or of Spark's) shows.
    golden = spark.createDataFrame([("g", list(range(12)))], schema)
    keys = sorted((r.band, r.bucket) for r in explode_bands(golden, 2, 6).collect())
    assert [k for _, k in keys] == GOLDEN_BAND_KEYS


def test_numpy_bucket_keys_equal_spark_band_keys(spark):
    """bucket_keys (numpy, the signature pass) gives the keys explode_bands
    computes in Spark: random signatures with negative values and both int32
    extremes, for short, long and single-row bands, fewer rows than num_perm
    used, and the golden value; explode_bands of a ``buckets`` column gives
    the same rows and refuses keys made for another banding."""
    import numpy as np

    from lsh_spark.banding import BUCKETS_COL, bucket_keys, buckets_column

    rng = np.random.default_rng(3)
    sig = rng.integers(-(1 << 31), 1 << 31, size=(40, 128), dtype=np.int64).astype(np.int32)
    sig[0, :4] = [-(1 << 31), (1 << 31) - 1, 0, -1]
    schema = "id string, signature array<int>"
    df = spark.createDataFrame(
        [(f"d{i}", [int(v) for v in row]) for i, row in enumerate(sig)], schema
    )
    for bands, r in ((16, 6), (4, 32), (128, 1), (9, 13)):
        spark_keys = {
            (row.id, row.band): row.bucket for row in explode_bands(df, bands, r).collect()
        }
        keys = bucket_keys(sig, bands, r)
        assert keys.dtype == np.int64 and keys.shape == (40, bands)
        ours = {(f"d{i}", b): int(keys[i, b]) for i in range(40) for b in range(bands)}
        assert ours == spark_keys, (bands, r)
    assert bucket_keys(np.arange(12, dtype=np.int32).reshape(1, 12), 2, 6).tolist() == [
        GOLDEN_BAND_KEYS
    ]
    # A null signature's keys: the band number alone.
    null = spark.createDataFrame([("n", None)], schema)
    want = [row.bucket for row in explode_bands(null, 3, 2).orderBy("band").collect()]
    assert bucket_keys(np.zeros((1, 0), dtype=np.int32), 3, 0)[0].tolist() == want
    keyed = spark.createDataFrame(
        [(f"d{i}", [int(v) for v in keys[i]]) for i in range(40)],
        "id string, buckets array<bigint>",
    ).select("id", buckets_column(9, 13))
    got = {(row.id, row.band): row.bucket for row in explode_bands(keyed, 9, 13).collect()}
    assert got == {(f"d{i}", b): int(keys[i, b]) for i in range(40) for b in range(9)}
    assert BUCKETS_COL == "buckets"
    with pytest.raises(ValueError, match="bucket keys of 9 bands of 13 rows, not of the 16 bands"):
        explode_bands(keyed, 16, 6)
