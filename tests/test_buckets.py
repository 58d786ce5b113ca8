import random
from itertools import combinations

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.buckets import (
    DuplicateGroups,
    bucket_members,
    bucket_summary,
    candidate_pairs,
)
from lsh_spark.session import local_frame

ROWS = T.StructType(
    [
        T.StructField("id", T.StringType(), False),
        T.StructField("band", T.IntegerType(), False),
        T.StructField("bucket", T.LongType(), False),
        T.StructField("text_hash", T.BinaryType(), False),
    ]
)
PAIRS = T.StructType(
    [
        T.StructField("id_a", T.StringType(), True),
        T.StructField("id_b", T.StringType(), True),
    ]
)


def h(i):
    return bytes([i]) * 16


# (id, text_hash): four groups of exact copies, {a, q}, {b, c, d}, {e}, {f, g, h}.
GROUPED_DOCS = [
    ("a", h(1)),
    ("q", h(1)),
    ("b", h(2)),
    ("c", h(2)),
    ("d", h(2)),
    ("e", h(3)),
    ("f", h(4)),
    ("g", h(4)),
    ("h", h(4)),
]


def test_pairs_from_shared_buckets_distinct_and_ordered(spark):
    rows = [
        ("c", 0, 10, h(1)),
        ("a", 0, 10, h(2)),
        ("b", 0, 10, h(3)),  # bucket of 3
        ("a", 1, 20, h(2)),
        ("b", 1, 20, h(3)),  # same pair again
        ("d", 0, 30, h(4)),  # singleton: dropped
        ("d", 1, 10, h(4)),
        ("e", 1, 10, h(5)),  # same bucket value, other band
    ]
    buckets = bucket_members(local_frame(spark, rows, ROWS))
    got = candidate_pairs(buckets, max_bucket_size=100)
    want = local_frame(spark, [("a", "b"), ("a", "c"), ("b", "c"), ("d", "e")], PAIRS)
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_exact_duplicates_collapse_to_smallest_id_within_bucket(spark):
    rows = [("x3", 0, 1, h(9)), ("x1", 0, 1, h(9)), ("x2", 0, 1, h(9)), ("y", 0, 1, h(8))]
    got = candidate_pairs(bucket_members(local_frame(spark, rows, ROWS)), 100)
    want = local_frame(spark, [("x1", "y")], PAIRS)
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_large_bucket_is_bounded_to_star_edges(spark):
    ids = [f"d{i:03d}" for i in range(50)]
    rows = [(i, 0, 7, h(n)) for n, i in enumerate(ids)]
    rows += [("d001", 1, 8, h(1)), ("d002", 1, 8, h(2))]  # a small bucket stays complete
    buckets = bucket_members(local_frame(spark, rows, ROWS)).cache()
    got = {(r.id_a, r.id_b) for r in candidate_pairs(buckets, max_bucket_size=10).collect()}
    assert got == {("d000", i) for i in ids[1:]} | {("d001", "d002")}
    summary = bucket_summary(buckets, 10)
    assert summary["bounded_buckets"] == 1
    assert summary["max_bucket_size_seen"] == 50
    assert summary["largest_bounded_buckets"][0]["size"] == 50
    assert summary["largest_bounded_buckets"][0]["star_center"] == "d000"
    assert summary["pairs_generated_before_distinct"] == 49 + 1
    assert summary["pairs_avoided_by_bounding"] == 50 * 49 // 2
    # At the limit, all pairs are still generated.
    small = {(r.id_a, r.id_b) for r in candidate_pairs(buckets, max_bucket_size=50).collect()}
    assert small == set(combinations(ids, 2))


def test_bucket_above_the_in_memory_bound_is_split_into_bounded_rows(spark):
    """A bucket of 50 members with rows of at most 8 ids: every row starts with
    its smallest id, and the star edges, the bucket counts and the small
    bucket beside it are what the unsplit bucket gives."""
    ids = [f"d{i:03d}" for i in range(50)]
    rows = [(i, 0, 7, h(n)) for n, i in enumerate(ids)]
    rows += [("d001", 1, 8, h(1)), ("d002", 1, 8, h(2))]
    band_rows = local_frame(spark, rows, ROWS).repartition(3)
    split = bucket_members(band_rows, max_ids=8).cache()
    big = split.filter("bucket = 7").collect()
    assert len(big) == 7 and max(len(r.ids) for r in big) <= 8
    assert {r.part for r in big} == set(range(7)) and {r.size for r in big} == {50}
    assert all(r.ids[0] == "d000" for r in big)
    assert sorted(i for r in big for i in r.ids[1:]) == ids[1:]
    whole = bucket_members(band_rows).cache()
    assert whole.filter("bucket = 7").count() == 1
    want = candidate_pairs(whole, max_bucket_size=8)
    assert_df_equality(candidate_pairs(split, max_bucket_size=8), want, ignore_row_order=True)
    assert bucket_summary(split, 8) == bucket_summary(whole, 8)
    with pytest.raises(ValueError, match="max_ids"):
        bucket_members(band_rows, max_ids=1)


def test_exact_duplicate_pairs_list_every_pair_of_a_group_with_jaccard_1(spark):
    df = local_frame(
        spark, [("b", h(1)), ("a", h(1)), ("c", h(1)), ("z", h(2))], "id string, text_hash binary"
    )
    got = {(r.id_a, r.id_b, r.jaccard) for r in DuplicateGroups(df, 5000).pairs().collect()}
    assert got == {("a", "b", 1.0), ("a", "c", 1.0), ("b", "c", 1.0)}
    # Above max_group: star edges to the smallest id.
    got = {(r.id_a, r.id_b) for r in DuplicateGroups(df, max_group=2).pairs().collect()}
    assert got == {("a", "b"), ("a", "c")}


def test_duplicate_groups_give_every_copy_its_representatives_pairs(spark):
    docs = local_frame(
        spark,
        GROUPED_DOCS,
        "id string, text_hash binary",
    )
    # Verified pairs between representatives (smallest id of each group).
    near = local_frame(
        spark,
        [("a", "b", 0.9), ("b", "e", 0.85), ("e", "f", 0.8)],
        "id_a string, id_b string, jaccard double",
    )
    dups = DuplicateGroups(docs, max_group=2)
    got = {(r.id_a, r.id_b, r.jaccard) for r in dups.expand(near, 100).collect()}
    # Group {b, c, d} and {f, g, h} exceed max_group 2: only their representative
    # carries pairs; {a, q} is expanded, on either side of a pair.
    assert got == {("a", "b", 0.9), ("b", "q", 0.9), ("b", "e", 0.85), ("e", "f", 0.8)}
    dups = DuplicateGroups(docs, max_group=3)
    got = {(r.id_a, r.id_b) for r in dups.expand(near, 0).collect()}  # shuffle join
    assert got == {
        (x, y)
        for x, y in [
            ("a", "b"),
            ("a", "c"),
            ("a", "d"),
            ("b", "q"),
            ("c", "q"),
            ("d", "q"),
            ("b", "e"),
            ("c", "e"),
            ("d", "e"),
            ("e", "f"),
            ("e", "g"),
            ("e", "h"),
        ]
    }
    assert dups.stats() == {
        "groups": 3,
        "documents": 8,
        "largest_group": 3,
        "bounded_groups": 0,
        "expanded_documents": 8,
        "max_group": 3,
    }
    assert DuplicateGroups(docs, 2).stats()["bounded_groups"] == 2
    # No group at all: the pairs come back as they are.
    single = DuplicateGroups(docs.filter("id in ('a', 'b', 'e')"), 3)
    assert single.expand(near, 100) is near


@pytest.mark.heavy
@pytest.mark.parametrize("subset", ["abcdefghq", "abe"])
def test_duplicate_groups_planned_for_a_bound_give_the_counted_results(spark, subset):
    """plan_for: expand and copies planned without counting the groups first
    (the member table joined even when empty) give what counting gives, and
    stats are still counted when asked."""
    docs = local_frame(
        spark,
        GROUPED_DOCS,
        "id string, text_hash binary",
    ).filter(F.col("id").isin(list(subset)))
    near = local_frame(
        spark,
        [("a", "b", 0.9), ("b", "e", 0.85), ("e", "f", 0.8)],
        "id_a string, id_b string, jaccard double",
    )
    counted = DuplicateGroups(docs, max_group=2)
    planned = DuplicateGroups(docs, max_group=2)
    planned.plan_for(len(subset))
    expanded = planned.expand(near, 100)
    assert expanded is not near  # joined, not skipped, whatever the groups hold
    assert sorted(tuple(r) for r in expanded.collect()) == sorted(
        tuple(r) for r in counted.expand(near, 100).collect()
    )
    copies = planned.copies(100)
    want = counted.copies(100)
    assert sorted((r.rep, tuple(r.copies)) for r in copies.collect()) == (
        [] if want is None else sorted((r.rep, tuple(r.copies)) for r in want.collect())
    )
    assert planned.stats() == counted.stats()


@pytest.mark.heavy
@pytest.mark.parametrize("max_group", [2, 3])
def test_persisted_duplicate_groups_give_the_same_results(spark, max_group):
    # Groups of 2 (expanded), 3 (bounded at max_group 2) and 1 (none); the
    # persisted member table must serve every method as the plain one does.
    docs = local_frame(
        spark,
        [("a", h(1)), ("q", h(1)), ("b", h(2)), ("c", h(2)), ("d", h(2)), ("e", h(3))],
        "id string, text_hash binary",
    )
    near = local_frame(
        spark, [("a", "b", 0.9), ("b", "e", 0.85)], "id_a string, id_b string, jaccard double"
    )

    def results(dups: DuplicateGroups) -> tuple:
        copies = dups.copies(100)
        return (
            dups.stats(),
            sorted(tuple(r) for r in dups.pairs().collect()),
            sorted(tuple(r) for r in dups.expand(near, 100).collect()),
            sorted((r.rep, tuple(r.copies)) for r in copies.collect()),
        )

    plain = results(DuplicateGroups(docs, max_group))
    kept = DuplicateGroups(docs, max_group).persist()
    try:
        assert kept.members.is_cached
        assert results(kept) == plain
    finally:
        kept.unpersist()
    assert not kept.members.is_cached
    bounded = 1 if max_group == 2 else 0
    assert plain[0] == {
        "groups": 2,
        "documents": 5,
        "largest_group": 3,
        "bounded_groups": bounded,
        "expanded_documents": 5 - 3 * bounded,
        "max_group": max_group,
    }
    # The bounded group gets star edges, the others all their pairs.
    assert plain[1] == [("a", "q", 1.0), ("b", "c", 1.0), ("b", "d", 1.0)] + (
        [] if bounded else [("c", "d", 1.0)]
    )


def test_integer_ids_order_numerically(spark):
    schema = T.StructType([T.StructField("id", T.LongType()), *ROWS.fields[1:]])
    rows = [(10, 0, 1, h(1)), (9, 0, 1, h(2)), (100, 0, 1, h(3))]
    got = {
        (r.id_a, r.id_b)
        for r in candidate_pairs(bucket_members(local_frame(spark, rows, schema)), 10).collect()
    }
    assert got == {(9, 10), (9, 100), (10, 100)}


@pytest.mark.parametrize("keys", ["per_band", "shared_by_bands"])
def test_bucket_members_equal_a_reference_grouping(spark, keys):
    # Random band rows with non-ASCII ids of mixed lengths, copies of one text
    # in a bucket and several partitions; ids order bytewise in UTF-8, as Spark
    # orders strings.  Real bucket keys hash their band in ("per_band"); equal
    # keys in different bands ("shared_by_bands", a 64-bit collision) must still
    # be different buckets.
    rng = random.Random(5)
    offset = 1000 if keys == "per_band" else 0
    alphabet = ["a", "b", "z", "é", "ß", "中", "😀", "0"]
    ids = sorted(
        {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(300)}
    )
    texts = {i: h(rng.randrange(40)) for i in ids}  # about 7 documents per text
    rows = [
        (i, band, band * offset + rng.randrange(25), texts[i]) for i in ids for band in range(3)
    ]
    got = {
        (r.band, r.bucket): (list(r.ids), r.size)
        for r in bucket_members(local_frame(spark, rows, ROWS).repartition(3)).collect()
    }
    groups = {}
    for i, band, bucket, text in rows:
        groups.setdefault((band, bucket), {}).setdefault(text, []).append(i)

    def utf8(s):
        return s.encode("utf-8")

    want = {}
    for key, by_text in groups.items():
        members = sorted((min(g, key=utf8) for g in by_text.values()), key=utf8)
        if len(members) > 1:
            want[key] = (members, len(members))
    assert got == want
