"""Text normalization and input validation (which records go to ``rejects/``).

Normalization is Unicode NFKC, then case folding, then NFKC again (the
composition Unicode calls NFKC_Casefold, up to ignorable characters), then every run of characters
that are not letters, digits or combining marks collapsed to one space, trimmed.
It runs once per Arrow batch of documents (a pandas UDF): NFKC and case folding
through Python's ``unicodedata``/``str.casefold`` (one C call per document,
never per character or shingle), the separator regex and trimming as Arrow
compute kernels (RE2) over the whole batch.

Example
-------
>>> normalize_array(pa.array(["Straße, ＡＢＣ!!"])).to_pylist()  # doctest: +SKIP
['strasse abc']
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

# Letters, numbers and combining marks are text; everything else separates words.
_SEPARATORS = r"[^\p{L}\p{N}\p{M}]+"
# Control characters (other than tab/newline/CR/FF) and U+FFFD mark bytes that were not text.
_BINARY_CHARS = "[\\x00-\\x08\\x0B\\x0E-\\x1F\\x7F\\uFFFD]"
BINARY_SHARE = 0.05


def normalize_array(arr: pa.Array) -> pa.Array:
    """Normalize an Arrow string array (nulls stay null)."""
    texts = arr.to_pandas() if isinstance(arr, (pa.Array, pa.ChunkedArray)) else arr
    # pyarrow's utf8_normalize does not compose (NFC of "e\u0301" stays
    # decomposed in pyarrow 21), so NFKC and full case folding use Python's
    # unicodedata through pandas' per-string C calls; the regex and trim
    # passes run as Arrow kernels (RE2) over the whole batch.
    folded = texts.str.normalize("NFKC").str.casefold().str.normalize("NFKC")
    out = pa.array(folded, type=pa.large_string(), from_pandas=True)
    out = pc.replace_substring_regex(out, _SEPARATORS, " ")
    # A combining mark that starts a token belongs to no letter (e.g. the
    # variation selector U+FE0F left behind by an emoji): drop it.
    out = pc.replace_substring_regex(out, r"(^| )\p{M}+", r"\1")
    out = pc.replace_substring_regex(out, r" {2,}", " ")
    return pc.utf8_trim(out, " ")


@F.pandas_udf(T.StringType())
def _normalize_udf(texts: pd.Series) -> pd.Series:
    return normalize_array(texts).to_pandas()


def normalize_col(text: Column) -> Column:
    """Column expression for the normalized text (vectorized over Arrow batches)."""
    return _normalize_udf(text)


def reject_reason(text: Column, max_chars: int) -> Column:
    """Why a raw text cannot be processed, or null when it can.

    Checks run cheapest first and before normalization, so a 5 GB blob or a
    binary file never reaches the Python workers.
    """
    n = F.length(text)
    # Both scans only touch the rare characters they look for (removing the
    # binary ones, finding one visible character), never rebuild the whole text.
    binary = (n - F.length(F.regexp_replace(text, _BINARY_CHARS, ""))) / n
    return (
        F.when(text.isNull(), F.lit("missing_text: text field is null or absent"))
        .when(n == 0, F.lit("empty_text: text is the empty string"))
        .when(~text.rlike(r"[^\s\p{Z}\u0085\u200B\uFEFF]"),
              F.lit("whitespace_only_text: text holds only white space"))
        .when(n > max_chars, F.format_string(
            "too_large: %d characters > max_text_chars %d", n, F.lit(max_chars)))
        .when(binary > BINARY_SHARE, F.format_string(
            "binary_content: %.0f%% of characters are control or undecodable bytes",
            binary * 100))
    )


NO_TEXT = "no_text_content: no letters or digits left after normalization"
# A normalized text is accepted when it holds one of these (Java regex and RE2 alike).
TEXT_CHAR = r"[\p{L}\p{N}]"


def checked_texts(df: DataFrame, text_col: str, max_chars: int) -> DataFrame:
    """``(id, text_col, [reject_reason]) -> (id, text_len, text, reason)``: the cheap checks.

    ``text`` is the raw text where ``reason`` is null (still to be normalized),
    null otherwise, so a rejected blob never reaches the Python workers.  A
    pre-existing ``reject_reason`` column (from the reader: unparseable lines,
    null ids) takes precedence over the text checks.
    """
    reason = reject_reason(F.col(text_col), max_chars)
    if "reject_reason" in df.columns:
        reason = F.coalesce(F.col("reject_reason"), reason)
    staged = df.select("id", F.col(text_col).alias("_text"), reason.alias("reason"))
    return staged.select("id", F.length("_text").alias("text_len"),
                         F.when(F.col("reason").isNull(), F.col("_text")).alias("text"),
                         "reason")


def prepare(df: DataFrame, text_col: str, max_chars: int) -> DataFrame:
    """``(id, text_col, [reject_reason]) -> (id, text_len, norm, reason)``, one row per record.

    ``reason`` is null for an accepted document, whose ``norm`` (normalized text)
    holds at least one letter or digit; otherwise ``reason`` says why the record is
    rejected and ``norm`` may be null.  Only texts that passed the cheap checks
    are sent to the Python normalizer, so a 5 GB blob or binary junk never is.
    A pre-existing ``reject_reason`` column (from the reader: unparseable lines,
    null ids) takes precedence over the text checks.
    """
    staged = checked_texts(df, text_col, max_chars)
    normed = staged.select("id", "text_len", normalize_col(F.col("text")).alias("norm"),
                           "reason")
    no_text = F.when(~F.col("norm").rlike(TEXT_CHAR), F.lit(NO_TEXT))
    return normed.select("id", "text_len", "norm",
                         F.coalesce("reason", no_text).alias("reason"))


def prepare_documents(df: DataFrame, text_col: str, max_chars: int) -> tuple[DataFrame, DataFrame]:
    """:func:`prepare` split into accepted documents and rejects.

    Returns
    -------
    docs : DataFrame
        ``id``, ``text_len`` (characters of the raw text), ``norm`` (never empty).
    rejects : DataFrame
        ``id``, ``reason`` for every record that cannot be processed.
    """
    prepared = prepare(df, text_col, max_chars)
    docs = prepared.filter(F.col("reason").isNull()).select("id", "text_len", "norm")
    rejects = prepared.filter(F.col("reason").isNotNull()).select("id", "reason")
    return docs, rejects
