"""The signature pass of a MinHash run on word shingles, in one Python pass per Arrow batch.

Normalization, word shingling, the exact-duplicate fingerprint and MinHash all
run in the Python worker that receives the raw text, so the normalized text and
the shingle sets never make a round trip through the JVM between them.  The
values are the same as those of the Spark path (:func:`lsh_spark.normalize.prepare`,
:func:`lsh_spark.shingle.add_shingles`, :func:`lsh_spark.shingle.text_hash`,
:func:`lsh_spark.signature.minhash`), which character shingles and SimHash still take.

Example
-------
>>> from lsh_spark.normalize import checked_texts
>>> spark = getfixture("spark")
>>> raw = spark.createDataFrame([("a", "One two three"), ("b", "!!")], "id string, text string")
>>> checked = checked_texts(raw, "text", 10**7, binary=False, passed_len=False)
>>> feats = word_minhash_features(checked, 2, 1, 16)
>>> feats.columns
['id', 'text_len', 'reason', 'text_hash', 'shingles', 'signature', 'num_shingles']
>>> [(row.id, row.num_shingles) for row in feats.orderBy("id").collect()]
[('a', 2), ('b', 0)]
>>> feats.filter("id = 'b'").first().reason
'no_text_content: no letters or digits left after normalization'
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from lsh_spark.banding import BUCKETS_COL, bucket_keys
from lsh_spark.normalize import (
    NO_TEXT,
    TEXT_CHAR,
    binary_reasons,
    char_lengths,
    keep_where,
    normalize_array,
)
from lsh_spark.shingle import pack_shingles, packed_slices, text_hash_arrow, word_shingles_arrow
from lsh_spark.signature import permutation_params, signature_arrays, signature_matrix


def _buckets_array(
    shingles: pa.Array, a: np.ndarray, b: np.ndarray, bands: tuple[int, int]
) -> tuple[pa.Array, pa.Array]:
    """(``buckets`` as ``list<int64>``, ``num_shingles``): every row's bucket key
    of each band (:func:`lsh_spark.banding.bucket_keys`); a row without shingles
    gets the keys of a null signature, the hash of the band number alone, as
    :func:`lsh_spark.banding.band_key` gives it."""
    sig, present, lengths = signature_matrix(shingles, a, b)
    n_bands, rows = bands
    keys = np.empty((len(lengths), n_bands), dtype=np.int64)
    keys[present] = bucket_keys(sig, n_bands, rows)
    if not present.all():
        keys[~present] = bucket_keys(np.zeros((1, 0), dtype=np.int32), n_bands, 0)
    offsets = np.arange(0, (len(lengths) + 1) * n_bands, n_bands, dtype=np.int32)
    return (
        pa.ListArray.from_arrays(pa.array(offsets), pa.array(keys.ravel())),
        pa.array(lengths.astype(np.int32)),
    )


def _features_batch(
    batch: pa.RecordBatch,
    k: int,
    seed: int,
    a,
    b,
    tokens: str,
    bands: tuple[int, int] | None = None,
) -> pa.RecordBatch:
    text = batch.column("text")
    # The control-character check, left out of the JVM checks (see checked_texts).
    # Both it and normalize_array read malformed UTF-8 as U+FFFD (valid_utf8).
    reason = pc.coalesce(batch.column("reason"), binary_reasons(text))
    norm = normalize_array(keep_where(pc.is_null(reason), text), tokens)
    # No letter or digit left: rejected with a reason, like the Spark path.
    empty = pc.invert(pc.match_substring_regex(norm, TEXT_CHAR))
    reason = pc.coalesce(
        reason, pc.if_else(empty, pa.scalar(NO_TEXT), pa.scalar(None, pa.string()))
    )
    norm = keep_where(pc.is_null(reason), norm)
    shingles = word_shingles_arrow(norm, k, seed)
    if bands is None:
        signature, num_shingles = signature_arrays(shingles, a, b)
    else:
        signature, num_shingles = _buckets_array(shingles, a, b, bands)
    # The characters of the texts passed on (checked_texts(passed_len=False)
    # counted only those it withheld).
    text_len = pc.coalesce(batch.column("text_len"), char_lengths(text))
    return pa.RecordBatch.from_arrays(
        [
            batch.column("id"),
            text_len,
            reason,
            text_hash_arrow(norm, seed),
            shingles,
            signature,
            num_shingles,
        ],
        names=[
            "id",
            "text_len",
            "reason",
            "text_hash",
            "shingles",
            "signature" if bands is None else BUCKETS_COL,
            "num_shingles",
        ],
    )


def word_minhash_features(
    checked: DataFrame,
    k: int,
    seed: int,
    num_perm: int,
    packed: bool = False,
    tokens: str = "script",
    bands: tuple[int, int] | None = None,
) -> DataFrame:
    """``(id, text_len, text, reason)`` from :func:`lsh_spark.normalize.checked_texts`
    (``text_len`` may be null where ``text`` is not: it is counted here)
    -> ``(id, text_len, reason, text_hash, shingles, signature, num_shingles)``.

    One row per record.  The control-character check of
    :func:`lsh_spark.normalize.reject_reason` runs here, on the raw text of
    records no earlier check rejected (so ``checked`` may leave it out).
    Accepted records (``reason`` null) get the sorted
    distinct word ``k``-gram hashes, the 16-byte fingerprint of the normalized
    text and the MinHash signature; rejected ones keep their reason (a text
    with no letter or digit after normalization gets ``no_text_content``) and
    nulls.  ``packed``: ``shingles`` as ``binary``, each set's hashes packed
    by :func:`lsh_spark.shingle.pack_shingles` (what the verification kernels
    read fastest), instead of ``array<bigint>``.  ``tokens``: how the normalized
    text is cut into words (:func:`lsh_spark.normalize.normalize_array`).
    ``bands``: ``(b, r)``: instead of ``signature``, ``buckets`` (``array<bigint>``)
    holds the document's bucket key of each of the ``b`` bands of ``r`` rows
    (:func:`lsh_spark.banding.bucket_keys`), what banding needs of the signature:
    16 values a document to write instead of 128.
    """
    a, b = permutation_params(num_perm, seed)
    id_field = checked.schema["id"]
    schema = T.StructType(
        [
            id_field,
            T.StructField("text_len", T.IntegerType(), True),
            T.StructField("reason", T.StringType(), True),
            T.StructField("text_hash", T.BinaryType(), True),
            T.StructField(
                "shingles", T.BinaryType() if packed else T.ArrayType(T.LongType(), False), True
            ),
            T.StructField("signature", T.ArrayType(T.IntegerType(), False), True)
            if bands is None
            else T.StructField(BUCKETS_COL, T.ArrayType(T.LongType(), False), True),
            T.StructField("num_shingles", T.IntegerType(), False),
        ]
    )

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            out = _features_batch(batch, k, seed, a, b, tokens, bands)
            if not packed:
                yield out
                continue
            i = out.schema.get_field_index("shingles")
            for start, stop in packed_slices(out.column(i)):
                part = out.slice(start, stop - start)
                yield part.set_column(i, "shingles", pack_shingles(part.column(i)))

    return checked.select("id", "text_len", "text", "reason").mapInArrow(run, schema)
