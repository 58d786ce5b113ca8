"""Text normalization and input validation (which records go to ``rejects/``).

Normalization is Unicode NFKC, then case folding, then NFKC again (the
composition Unicode calls NFKC_Casefold, up to ignorable characters), then every run of characters
that are not letters, digits or combining marks collapsed to one space, trimmed.
The tokens of the normalized text are its space-separated words.  With
``tokens="script"`` (the default) every character of a script written without
spaces between words (:data:`SPLIT_SCRIPTS`: Han, Hiragana, Katakana, Thai,
Lao, Khmer, Myanmar, Tibetan), with the combining marks that follow it, is
also set apart by spaces, so it is a token of its own: a clause of Japanese is
as many tokens as characters, not one "word".  ``tokens="space"`` is the
normalization of lsh-spark 0.2.0, where such a clause stays one token.
It runs once per Arrow batch of documents: NFKC and case folding
through Python's ``unicodedata``/``str.casefold`` (one C call per document,
never per character or shingle), the separator regex, the setting apart of
those scripts' characters and trimming as Arrow compute kernels (RE2) over the
whole batch.  Pure-ASCII texts skip all of that for one byte-table pass in numpy
with the same result (no ASCII character belongs to those scripts).

Example
-------
>>> normalize_array(pa.array(["Straße, ＡＢＣ!!"])).to_pylist()
['strasse abc']
>>> normalize_array(pa.array(["東京タワー, Tokyo"])).to_pylist()
['東 京 タ ワ ー tokyo']
>>> normalize_array(pa.array(["東京タワー, Tokyo"]), tokens="space").to_pylist()
['東京タワー tokyo']
"""

from __future__ import annotations

import functools
import re
import unicodedata
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.config import TOKEN_MODES

# Letters, numbers and combining marks are text; everything else separates words.
_SEPARATORS = r"[^\p{L}\p{N}\p{M}]+"
# Scripts written without spaces between words (Unicode script names, as RE2
# spells them).  Hangul is not here: Korean separates words by spaces.
SPLIT_SCRIPTS = ("Han", "Hiragana", "Katakana", "Thai", "Lao", "Khmer", "Myanmar", "Tibetan")
# A character of those scripts with the combining marks that follow it: set apart
# by a space on each side (the whole match, \0, put back between two spaces).  It
# runs after the separator pass, on the non-ASCII texts only; in a text of other
# scripts it finds nothing, and RE2 scans such a text in one DFA pass, so it costs
# about 1 ms per MB there (docs/performance.md: one alternation of both patterns
# cost 3-5 times as much on every non-ASCII text, so it was measured and dropped).
_SPLIT_CHAR = "[" + "".join(rf"\p{{{s}}}" for s in SPLIT_SCRIPTS) + r"]\p{M}*"
# Control characters (other than tab/newline/CR/FF) and U+FFFD mark bytes that were not text.
_BINARY_CHARS = "[\\x00-\\x08\\x0B\\x0E-\\x1F\\x7F\\uFFFD]"
BINARY_SHARE = 0.05


def _check_tokens(tokens: str) -> None:
    if tokens not in TOKEN_MODES:
        raise ValueError(f"tokens: got {tokens!r}; allowed: {' | '.join(TOKEN_MODES)}")


def normalize_array(arr: pa.Array, tokens: str = "script") -> pa.Array:
    """Normalize an Arrow string array (nulls stay null); returns ``large_string``.

    ``tokens``: one of :data:`TOKEN_MODES` (see the module's docstring).
    Texts that are pure ASCII (most of an English crawl) take a byte-level
    numpy path with the same result: NFKC leaves ASCII unchanged, case folding
    is lower-casing, and the only letters and digits are ``[A-Za-z0-9]``.  The
    others take the Unicode path below; both keep the batch's row order.
    """
    if not isinstance(arr, (pa.Array, pa.ChunkedArray)):
        arr = pa.array(arr, type=pa.large_string(), from_pandas=True)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks else pa.array([], pa.large_string())
    _check_tokens(tokens)
    arr = valid_utf8(arr.cast(pa.large_string()))
    ascii_rows = pc.fill_null(pc.string_is_ascii(arr), True)
    n_ascii = pc.sum(ascii_rows).as_py() or 0
    if n_ascii == len(arr):
        return _normalize_ascii(arr)
    if n_ascii == 0:
        return _normalize_unicode(arr, tokens)
    mask = np.asarray(ascii_rows.to_numpy(zero_copy_only=False), dtype=bool)
    fast, slow = np.flatnonzero(mask), np.flatnonzero(~mask)
    merged = pa.concat_arrays(
        [_normalize_ascii(arr.take(fast)), _normalize_unicode(arr.take(slow), tokens)]
    )
    order = np.empty(len(arr), dtype=np.int64)
    order[np.concatenate([fast, slow])] = np.arange(len(arr))
    return merged.take(order)


def keep_where(keep: pa.Array, arr: pa.Array) -> pa.Array:
    """``arr`` where ``keep`` is true, null elsewhere (``arr`` itself when all are kept).

    Not ``pc.if_else(keep, arr, <null scalar>)``: for a sliced string or binary
    array pyarrow 21 returns offsets that point past its data there (apache/arrow
    issues 41479 and 49410, fixed by pull request 49443), which is garbage text;
    a null array in the scalar's place takes the kernel's general path.
    """
    if keep.null_count == 0 and keep.true_count == len(keep):
        return arr
    return pc.if_else(keep, arr, pa.nulls(len(arr), arr.type))


def valid_utf8(arr: pa.Array) -> pa.Array:
    """``arr`` with every malformed UTF-8 sequence replaced by U+FFFD.

    Spark's text and Parquet readers pass a string's bytes on unchecked (a
    Latin-1 file read as text, say), and the JVM decodes malformed bytes to
    U+FFFD in its string functions; this gives the Python side the same
    characters.  A batch of valid UTF-8 (one vectorized check) is returned as
    it is.
    """
    try:
        arr.validate(full=True)
        return arr
    except pa.ArrowInvalid:
        return pa.array(
            [None if b is None else b.decode("utf-8", "replace") for b in _raw_bytes(arr)], arr.type
        )


def _raw_bytes(arr: pa.Array) -> list[bytes | None]:
    """The bytes of each string of ``arr``, unchecked (malformed UTF-8 included)."""
    return arr.cast(
        pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary()
    ).to_pylist()


def _normalize_unicode(arr: pa.Array, tokens: str) -> pa.Array:
    # pyarrow's utf8_normalize does not compose (NFC of "e\u0301" stays
    # decomposed in pyarrow 21), so NFKC and full case folding use Python's
    # unicodedata, one C call per text and step (what pandas' str.normalize
    # does too, without importing pandas into the worker); the regex and trim
    # passes run as Arrow kernels (RE2) over the whole batch.
    nfkc = unicodedata.normalize
    folded = [
        None if t is None else nfkc("NFKC", nfkc("NFKC", t).casefold()) for t in arr.to_pylist()
    ]
    out = pa.array(folded, type=pa.large_string())
    out = pc.replace_substring_regex(out, _SEPARATORS, " ")
    if tokens == "script":
        out = pc.replace_substring_regex(out, _SPLIT_CHAR, r" \0 ")
    # A combining mark that starts a token belongs to no letter (e.g. the
    # variation selector U+FE0F left behind by an emoji): drop it.
    out = pc.replace_substring_regex(out, r"(^| )\p{M}+", r"\1")
    out = pc.replace_substring_regex(out, r" {2,}", " ")
    return pc.utf8_trim(out, " ")


# Byte map of the ASCII path: letters lower-cased, digits kept, all else a space.
_ASCII_MAP = np.full(256, ord(" "), dtype=np.uint8)
for _c in b"abcdefghijklmnopqrstuvwxyz0123456789":
    _ASCII_MAP[_c] = _c
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ":
    _ASCII_MAP[_c] = _c + 32
_SPACE = np.uint8(ord(" "))
# Mean text length (bytes) from which _normalize_ascii counts kept bytes text by text.
_COUNT_PER_TEXT_BYTES = 1536


def string_buffers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The ``n + 1`` int64 offsets and the uint8 data of an Arrow string or
    binary array (cast to ``large_string`` or ``large_binary`` first when its
    offsets are 32-bit; the data is not copied)."""
    if pa.types.is_string(texts.type):
        arr = texts.cast(pa.large_string())
    elif pa.types.is_binary(texts.type):
        arr = texts.cast(pa.large_binary())
    else:
        arr = texts
    n = len(arr)
    _, off_buf, data_buf = arr.buffers()
    off = (
        np.frombuffer(off_buf, dtype=np.int64, count=n + 1, offset=arr.offset * 8)
        if n
        else np.zeros(1, dtype=np.int64)
    )
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)
        if data_buf is not None
        else np.zeros(0, dtype=np.uint8)
    )
    return off, data


def _normalize_ascii(arr: pa.Array) -> pa.Array:
    """:func:`normalize_array` of a ``large_string`` array of ASCII texts, in numpy.

    Each byte is mapped once.  Of each run of separators only the last byte is
    kept, as a space, and only when a letter or digit of the same text follows
    and one precedes it.  That is the Unicode path's collapse-and-trim, with no
    per-byte running sums.
    """
    n = len(arr)
    off, data = string_buffers(arr)
    lo, hi = int(off[0]), int(off[-1])
    if hi == lo:
        return pc.utf8_trim(arr, " ")  # only empty texts (and nulls)
    mapped = _ASCII_MAP[data[lo:hi]]
    off = off - lo
    word = mapped != _SPACE
    keep = np.empty(len(word), dtype=bool)
    keep[-1] = False
    keep[:-1] = word[1:]
    lengths = np.diff(off)
    filled = lengths > 0
    keep[off[1:][filled] - 1] = False  # the next byte is another text's
    keep |= word
    # A text that begins with separators would begin with one space, the byte
    # before its first letter or digit: not kept (one short scan per such text).
    bounds = off.tolist()
    nonempty = np.flatnonzero(filled)
    for i in nonempty[mapped[off[:-1][nonempty]] == _SPACE].tolist():
        first = bounds[i] + int(np.argmax(word[bounds[i] : bounds[i + 1]]))
        if word[first]:
            keep[first - 1] = False
    # Each text's kept bytes.  numpy's reduceat of the bytes into int64
    # converts element by element; for long texts one vectorized count per
    # text is faster, for short ones the per-text call costs more than it
    # saves (below about 1 KB a text).
    kept = np.zeros(n, dtype=np.int64)
    if len(keep) >= _COUNT_PER_TEXT_BYTES * n:
        kept[:] = np.fromiter(
            (np.count_nonzero(keep[s:e]) for s, e in zip(bounds[:-1], bounds[1:], strict=False)),
            dtype=np.int64,
            count=n,
        )
    else:
        kept[filled] = np.add.reduceat(keep.view(np.uint8), off[:-1][filled], dtype=np.int64)
    packed = mapped[keep]
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(kept, out=starts[1:])
    out = pa.LargeStringArray.from_buffers(n, pa.py_buffer(starts), pa.py_buffer(packed.tobytes()))
    return out if not arr.null_count else keep_where(arr.is_valid(), out)


@functools.cache
def _normalize_udf(tokens: str):
    # Created on first use: pandas is imported only where a pandas UDF runs,
    # never by the Arrow pass of the workers.
    global pd
    import pandas as pd

    @F.pandas_udf(T.StringType())
    def normalize_udf(texts: pd.Series) -> pd.Series:
        return normalize_array(texts, tokens).to_pandas()

    return normalize_udf


def normalize_col(text: Column, tokens: str = "script") -> Column:
    """Column expression for the normalized text (vectorized over Arrow batches);
    ``tokens`` as in :func:`normalize_array`."""
    _check_tokens(tokens)
    return _normalize_udf(tokens)(text)


_BINARY_REASON = "binary_content: {}% of characters are control or undecodable bytes"
# White space for the whitespace_only_text check (Java regex): the check runs
# _NOT_WHITE_RE over a text whose first character is one of _WHITE_CODEPOINTS;
# _WHITE_RE, the class itself, is what the test checks that list against.
_WHITE_RE = r"[\s\p{Z}\u0085\u200B\uFEFF]"
_NOT_WHITE_RE = r"[^\s\p{Z}\u0085\u200B\uFEFF]"
# The code points _WHITE_RE matches: Java's \s (tab, line feed, vertical tab,
# form feed, carriage return, space), the Unicode separators \p{Z} (Zs, Zl, Zp
# in the JVM's Unicode 13 tables), U+0085, U+200B and U+FEFF.  A test checks
# them against the regex over every code point of the Basic Multilingual Plane.
_WHITE_CODEPOINTS = (
    0x09,
    0x0A,
    0x0B,
    0x0C,
    0x0D,
    0x20,
    0x85,
    0xA0,
    0x1680,
    *range(0x2000, 0x200C),
    0x2028,
    0x2029,
    0x202F,
    0x205F,
    0x3000,
    0xFEFF,
)


def reject_reason(text: Column, max_chars: int, binary: bool = True) -> Column:
    """Why a raw text cannot be processed, or null when it can.

    Checks run cheapest first and before normalization, so a 5 GB blob never
    reaches the Python workers.  ``binary=False`` leaves out the last check, the
    share of control characters, for a caller that runs
    :func:`binary_reasons` on the same texts in its Arrow pass (a regex over
    every character costs the JVM more than a byte table costs numpy).
    """
    n = F.length(text)
    n_bytes = F.octet_length(text)
    # The cheap tests guard the costly ones (Spark evaluates ``&`` left first and
    # stops at false): a text of at most max_chars bytes has at most max_chars
    # characters, so only longer ones are counted character by character; a
    # text whose first character is not white space is not all white space,
    # so the regex, which decodes the whole text into a Java string, runs only
    # on texts that start with white space, and never on one too large.  The
    # first character's code point comes from ``ascii``, which reads one
    # character; ``substring(text, 1, 1)`` counts every character of the text
    # first (a quarter of the JVM's samples in the signature pass).
    space_first = F.ascii(text).isin(*_WHITE_CODEPOINTS)
    reason = (
        F.when(text.isNull(), F.lit("missing_text: text field is null or absent"))
        .when(n_bytes == 0, F.lit("empty_text: text is the empty string"))
        .when(
            (n_bytes > max_chars) & (n > max_chars),
            F.format_string("too_large: %d characters > max_text_chars %d", n, F.lit(max_chars)),
        )
        .when(
            space_first & ~text.rlike(_NOT_WHITE_RE),
            F.lit("whitespace_only_text: text holds only white space"),
        )
    )
    if not binary:
        return reason
    share = (n - F.length(F.regexp_replace(text, _BINARY_CHARS, ""))) / n
    return reason.when(
        share > BINARY_SHARE,
        F.format_string(_BINARY_REASON.replace("%", "%%").format("%.0f"), share * 100),
    )


# The control characters of _BINARY_CHARS as a byte table (all are ASCII, and
# in UTF-8 an ASCII byte is always its own character).
_CONTROL = np.zeros(256, dtype=bool)
_CONTROL[[*range(0x00, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F]] = True


def binary_char_counts(texts: pa.Array) -> np.ndarray:
    """How many characters of :data:`_BINARY_CHARS` each text of a valid UTF-8
    Arrow string array holds (0 for nulls): what ``pc.count_substring_regex``
    with that class counts, from the text bytes in numpy.

    The control characters are single ASCII bytes and U+FFFD is the bytes
    ``EF BF BD``, which valid UTF-8 never splits; the rare positions found are
    assigned to their texts by their offsets.  Faster than RE2, which also
    compiles and warms up in every fresh process.
    """
    n = len(texts)
    counts = np.zeros(n, dtype=np.int64)
    if not n:
        return counts
    off, data = string_buffers(texts)
    lo, hi = int(off[0]), int(off[-1])
    if hi == lo:
        return counts
    b = data[lo:hi]
    ctrl = np.flatnonzero((b < 0x20) | (b == 0x7F))
    ctrl = ctrl[_CONTROL[b[ctrl]]]
    lead = np.flatnonzero(b[:-2] == 0xEF)
    lead = lead[(b[lead + 1] == 0xBF) & (b[lead + 2] == 0xBD)]
    found = np.concatenate([ctrl, lead]) + lo
    if len(found):
        counts += np.bincount(np.searchsorted(off, found, side="right") - 1, minlength=n)
        if texts.null_count:  # a null slot's bytes, if any, are not text
            counts[~np.asarray(texts.is_valid().to_numpy(zero_copy_only=False), bool)] = 0
    return counts


def binary_reasons(texts: pa.Array) -> pa.Array:
    """The ``binary_content`` reason of :func:`reject_reason`, over an Arrow batch.

    Null where a text is null, empty or within :data:`BINARY_SHARE`.  Characters
    are code points, as Spark's ``length`` counts them; the share is the same
    double division; the percentage is rounded half up from the shortest
    decimal form, as Java's ``%.0f`` does, so both paths write the same string.
    """
    texts = valid_utf8(texts)  # malformed bytes count as U+FFFD, as in the JVM
    found = binary_char_counts(texts)
    chars = pc.utf8_length(texts).fill_null(0)
    chars = np.asarray(chars.to_numpy(zero_copy_only=False), dtype=np.int64)
    share = found / np.maximum(chars, 1)
    out = np.full(len(share), None, dtype=object)
    for i in np.flatnonzero(share > BINARY_SHARE):
        pct = Decimal(repr(float(share[i] * 100))).quantize(Decimal(1), ROUND_HALF_UP)
        out[i] = _BINARY_REASON.format(pct)
    return pa.array(out, type=pa.string())


NO_TEXT = "no_text_content: no letters or digits left after normalization"
# A normalized text is accepted when it holds one of these (Java regex and RE2 alike).
TEXT_CHAR = r"[\p{L}\p{N}]"


def checked_texts(
    df: DataFrame, text_col: str, max_chars: int, binary: bool = True, passed_len: bool = True
) -> DataFrame:
    """``(id, text_col, [reject_reason]) -> (id, text_len, text, reason)``: the cheap checks.

    ``text`` is the raw text where ``reason`` is null (still to be normalized),
    null otherwise, so a rejected blob never reaches the Python workers.  A
    pre-existing ``reject_reason`` column (from the reader: unparseable lines,
    null ids) takes precedence over the text checks.  ``binary=False``: the
    control-character check is left to the caller (:func:`binary_reasons`).
    ``passed_len=False``: ``text_len`` is null where ``text`` is passed on, for
    a caller that counts those texts' characters itself (:func:`char_lengths`,
    in its Arrow pass): Spark's ``length`` walks every byte of every text.
    """
    reason = reject_reason(F.col(text_col), max_chars, binary)
    if "reject_reason" in df.columns:
        reason = F.coalesce(F.col("reject_reason"), reason)
    staged = df.select("id", F.col(text_col).alias("_text"), reason.alias("reason"))
    passed = F.col("reason").isNull()
    text_len = F.length("_text")
    if not passed_len:
        text_len = F.when(~passed, text_len)
    return staged.select(
        "id", text_len.alias("text_len"), F.when(passed, F.col("_text")).alias("text"), "reason"
    )


# How many bytes Spark's UTF8String.numChars (SQL ``length``) steps over for
# each first byte (measured on Spark 4.0 with every byte value): a malformed
# first byte (a continuation byte, C0, C1, F5-FF) counts as a character of one
# byte, and a sequence cut short by the end of the string as one character.
_SPARK_CHAR_BYTES = tuple(
    2 if 0xC2 <= b < 0xE0 else 3 if 0xE0 <= b < 0xF0 else 4 if 0xF0 <= b < 0xF5 else 1
    for b in range(256)
)
# The first bytes that make Spark step over more than one byte.
_SPARK_LEAD = re.compile(rb"[\xc2-\xf4]")


def _spark_num_chars(raw: bytes) -> int:
    """Spark's ``length`` of a string's bytes: its code points when they are
    valid UTF-8; otherwise the bytes less those Spark steps over, found by
    walking the lead bytes only (in a Latin-1 text, its accented letters), not
    every byte."""
    try:
        return len(raw.decode("utf-8"))
    except UnicodeDecodeError:
        pass
    n, skipped, resume = len(raw), 0, 0
    for m in _SPARK_LEAD.finditer(raw):
        p = m.start()
        if p < resume:  # stepped over by the lead byte before it
            continue
        step = min(_SPARK_CHAR_BYTES[raw[p]] - 1, n - p - 1)
        skipped += step
        resume = p + 1 + step
    return n - skipped


def char_lengths(texts: pa.Array) -> pa.Array:
    """Spark's ``length`` of every string of an Arrow string array (int32, null
    for null): its code points when it is valid UTF-8 (one vectorized check for
    the batch, then Arrow's count), otherwise Spark's byte walk over the
    malformed strings (:data:`_SPARK_CHAR_BYTES`)."""
    try:
        texts.validate(full=True)
        return pc.utf8_length(texts).cast(pa.int32())
    except pa.ArrowInvalid:
        return pa.array(
            [None if b is None else _spark_num_chars(b) for b in _raw_bytes(texts)], pa.int32()
        )


def prepare(df: DataFrame, text_col: str, max_chars: int, tokens: str = "script") -> DataFrame:
    """``(id, text_col, [reject_reason]) -> (id, text_len, norm, reason)``, one row per record.

    ``tokens``: how ``norm`` is cut into tokens (:func:`normalize_array`).

    ``reason`` is null for an accepted document, whose ``norm`` (normalized text)
    holds at least one letter or digit; otherwise ``reason`` says why the record is
    rejected and ``norm`` may be null.  Only texts that passed the cheap checks
    are sent to the Python normalizer, so a 5 GB blob or binary junk never is.
    A pre-existing ``reject_reason`` column (from the reader: unparseable lines,
    null ids) takes precedence over the text checks.
    """
    staged = checked_texts(df, text_col, max_chars)
    # Malformed UTF-8 (a Latin-1 line from the text reader) becomes U+FFFD, as
    # the JVM's checks saw it, before PySpark converts the batch to pandas.
    normed = staged.select(
        "id",
        "text_len",
        normalize_col(F.make_valid_utf8(F.col("text")), tokens).alias("norm"),
        "reason",
    )
    no_text = F.when(~F.col("norm").rlike(TEXT_CHAR), F.lit(NO_TEXT))
    return normed.select("id", "text_len", "norm", F.coalesce("reason", no_text).alias("reason"))
