"""Compact ids (lsh_spark.stages.ids): string ids as 64-bit keys and back."""

from pyspark.sql import functions as F

from lsh_spark.session import local_frame
from lsh_spark.stages.ids import id_pairs, key_of, keyed, keyed_pairs, keys_unique, name_keys

IDS = ["doc-1", "doc-10", "doc-2", "b", "a", "zz"]


def _docs(spark, ids=IDS):
    return local_frame(spark, [(i,) for i in ids], "id string")


def test_pairs_of_keys_come_back_as_pairs_of_ids_in_id_order(spark):
    docs = _docs(spark)
    # Each pair given in both orders across rows; a payload column rides along.
    pairs = local_frame(
        spark,
        [("doc-10", "doc-2", 0.9), ("zz", "a", 0.8), ("b", "doc-1", 1.0)],
        "id_a string, id_b string, jaccard double",
    )
    keys = keyed_pairs(pairs)
    assert keys.schema["id_a"].dataType.simpleString() == "bigint"
    assert all(r.id_a < r.id_b for r in keys.collect())
    back = id_pairs(keys, docs, len(IDS))
    assert back.columns == ["id_a", "id_b", "jaccard"]
    assert sorted(tuple(r) for r in back.collect()) == [
        ("a", "zz", 0.8),
        ("b", "doc-1", 1.0),
        ("doc-10", "doc-2", 0.9),
    ]
    # Above the broadcast bound the lookup is a shuffle join, with the same rows.
    shuffled = id_pairs(keys, docs, 10**9)
    assert sorted(tuple(r) for r in shuffled.collect()) == sorted(tuple(r) for r in back.collect())


def test_key_collisions_are_found_and_keys_name_their_ids(spark):
    docs = _docs(spark)
    assert keys_unique(docs)
    # The same id twice shares a key, as two colliding ids would.
    assert not keys_unique(_docs(spark, IDS + ["b"]))
    keys = {r.id: r.key for r in docs.select("id", key_of(F.col("id")).alias("key")).collect()}
    assert len(set(keys.values())) == len(IDS)
    assert {r.id for r in keyed(docs).collect()} == set(keys.values())
    entries = [{"member": keys["zz"], "size": 3}, {"member": keys["doc-2"], "size": 2}]
    name_keys(entries, "member", docs)
    assert entries == [{"member": "zz", "size": 3}, {"member": "doc-2", "size": 2}]
