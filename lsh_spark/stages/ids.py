"""Compact internal ids: string ids travel as 64-bit keys from the band rows to the outputs.

Band rows, bucket members, candidate pairs, blocks and the verification joins
carry a document's id in every row.  When the ids are strings, the candidate
and verify stages replace them with a 64-bit key, Spark's ``xxhash64`` of the
id, computed where ``signatures/`` and ``shingles/`` are read (no table is
rewritten or joined to get it).  ``candidates/`` and ``pairs/`` are mapped back
to ids, in id order, before they are written; ``blocks/`` keeps the keys (only
verification reads it, and its ``ids`` type tells verification which it holds).
Integer ids are used as they are.

Keys are unique only with high probability: among n ids, two share a key with
probability about n^2 / 2^65 (3e-8 at 10^6 ids, 3% at 10^9).  The candidate
stage checks its keys beside its own work and, if two ids share one, runs again
on the string ids.  Inside the two stages, every choice by order (the copy that
stands for an identical text, a bounded bucket's star centre) follows key order:
the same on every run, though not the smallest id.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.stages.verify_plan import small_id_list


def key_of(id_col: Column) -> Column:
    """The 64-bit key of a string id."""
    return F.xxhash64(id_col)


def string_ids(df: DataFrame, col: str = "id") -> bool:
    """Whether ``df``'s ids (column ``col``, or the elements of an array column) are strings."""
    dtype = df.schema[col].dataType
    if isinstance(dtype, T.ArrayType):
        dtype = dtype.elementType
    return isinstance(dtype, T.StringType)


def keys_unique(docs: DataFrame) -> bool:
    """Whether no two rows of ``docs`` share a key (one small aggregation of the id column)."""
    return (
        docs.groupBy(key_of(F.col("id")).alias("key")).count().filter(F.col("count") > 1).isEmpty()
    )


def keyed(df: DataFrame) -> DataFrame:
    """``df`` with its ``id`` replaced by the id's key."""
    return df.withColumn("id", key_of(F.col("id")))


def keyed_pairs(pairs: DataFrame) -> DataFrame:
    """Pairs of ids ``(id_a, id_b, ...)`` as pairs of keys, ``id_a < id_b`` by key."""
    a, b = key_of(F.col("id_a")), key_of(F.col("id_b"))
    return pairs.withColumns({"id_a": F.least(a, b), "id_b": F.greatest(a, b)})


def id_pairs(pairs: DataFrame, docs: DataFrame, n_docs: int) -> DataFrame:
    """Pairs of keys ``(id_a, id_b, ...)`` as pairs of ids, ``id_a < id_b`` by id.

    ``docs``: the documents' ``id`` column (``signatures/``), ``n_docs`` rows;
    looked up by a broadcast join up to ``BROADCAST_ID_ROWS`` ids, else by a
    shuffle join.
    """
    # Accepted documents have ids; the filter also makes the ids written non-null.
    named = docs.filter(F.col("id").isNotNull())
    ids = small_id_list(named.select(key_of(F.col("id")).alias("key"), "id"), n_docs)
    rest = [c for c in pairs.columns if c not in ("id_a", "id_b")]
    a, b = F.col("_id_a"), F.col("_id_b")
    return (
        pairs.join(ids.withColumnsRenamed({"key": "id_a", "id": "_id_a"}), "id_a")
        .join(ids.withColumnsRenamed({"key": "id_b", "id": "_id_b"}), "id_b")
        .select(F.least(a, b).alias("id_a"), F.greatest(a, b).alias("id_b"), *rest)
    )


def name_keys(entries: list[dict], field: str, docs: DataFrame) -> None:
    """Replace the key in ``field`` of each of a few report ``entries`` by its id:
    one small filtering job over ``docs``."""
    if not entries:
        return
    key = key_of(F.col("id"))
    wanted = [e[field] for e in entries]
    rows = docs.filter(key.isin(wanted)).select(key.alias("key"), "id").collect()
    names = {r["key"]: r["id"] for r in rows}
    for e in entries:
        e[field] = names[e[field]]
