from chispa import assert_df_equality
from pyspark.sql import types as T

from lsh_spark.verify import verify_pairs


def test_exact_jaccard_and_threshold(spark):
    sh = spark.createDataFrame(
        [("a", [1, 2, 3, 4, 5]), ("b", [1, 2, 3, 4, 6]), ("c", [1, 2, 3, 4, 5]),
         ("d", [7, 8]), ("e", [1, 2, 3, 4])],
        "id string, shingles array<bigint>")
    cands = spark.createDataFrame(
        [("a", "b"), ("a", "c"), ("a", "d"), ("a", "e"), ("b", "e")], "id_a string, id_b string")
    got = verify_pairs(cands, sh, threshold=0.66)
    schema = T.StructType([T.StructField("id_a", T.StringType()),
                           T.StructField("id_b", T.StringType()),
                           T.StructField("jaccard", T.DoubleType())])
    want = spark.createDataFrame(
        [("a", "b", 4 / 6), ("a", "c", 1.0), ("a", "e", 0.8), ("b", "e", 0.8)], schema)
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_pair_exactly_at_threshold_is_kept(spark):
    sh = spark.createDataFrame([("a", [1, 2, 3, 4, 5]), ("b", [1, 2, 3, 4])],
                               "id string, shingles array<bigint>")
    cands = spark.createDataFrame([("a", "b")], "id_a string, id_b string")
    assert verify_pairs(cands, sh, threshold=0.8).count() == 1
    assert verify_pairs(cands, sh, threshold=0.8000001).count() == 0


def test_large_arrays(spark):
    n = 200_000
    sh = spark.createDataFrame([("a", list(range(n))), ("b", list(range(n // 10, n + n // 10)))],
                               "id string, shingles array<bigint>")
    cands = spark.createDataFrame([("a", "b")], "id_a string, id_b string")
    j = verify_pairs(cands, sh, threshold=0.5).first().jaccard
    assert j == (n - n // 10) / (n + n // 10)


def test_broadcast_and_shuffle_joins_agree(spark):
    sh = spark.createDataFrame([(f"d{i}", list(range(i, i + 20))) for i in range(30)],
                               "id string, shingles array<bigint>")
    cands = spark.createDataFrame([(f"d{i}", f"d{j}") for i in range(30) for j in range(i + 1, 30)],
                                  "id_a string, id_b string")
    a = verify_pairs(cands, sh, 0.5, broadcast=False)
    b = verify_pairs(cands, sh, 0.5, broadcast=True)
    assert a.count() > 0
    assert_df_equality(a, b, ignore_row_order=True)
