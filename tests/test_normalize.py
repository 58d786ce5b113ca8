import random

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T
from reference import normalize as reference_normalize

from lsh_spark.normalize import _normalize_unicode, normalize_array, prepare

TEXTS = [
    "Straße, STRASSE & strasse!!",
    "ＦＵＬＬ－ＷＩＤＴＨ　ｔｅｘｔ １２３",
    "ﬁne ligatures — and “quotes”",
    "ΣΊΣΥΦΟΣ ςσ",
    "emoji 😀 inside👍words",
    "hindi हिन्दी text with marks",
    "tabs\tand\nnewlines\r\nand   spaces",
    "under_score and hy-phen",
    "İstanbul DŽ ǅ",
    "   ",
    "😀😀",
    "❤️ ☀️ ✔️",  # emoji with VARIATION SELECTOR-16 only
    "I ❤️ NY ✈️ trips",
    "e\u0301cole \u0301lone mark",  # decomposed accent composes; a lone mark is dropped
]

# The binary characters of lsh_spark.normalize for RE2 (Arrow's regex kernels),
# which spells U+FFFD \x{FFFD}: the reference count of binary_char_counts.
_BINARY_CHARS_RE2 = "[\\x00-\\x08\\x0B\\x0E-\\x1F\\x7F\\x{FFFD}]"


def prepare_documents(df, text_col, max_chars):
    """:func:`prepare` split into accepted ``(id, text_len, norm)`` and ``(id, reason)``."""
    prepared = prepare(df, text_col, max_chars)
    docs = prepared.filter(F.col("reason").isNull()).select("id", "text_len", "norm")
    rejects = prepared.filter(F.col("reason").isNotNull()).select("id", "reason")
    return docs, rejects


@pytest.mark.parametrize("text", TEXTS)
def test_arrow_normalization_equals_python_nfkc_casefold(text):
    got = normalize_array(pa.array([text])).to_pylist()[0]
    assert got == reference_normalize(text)


def test_ascii_path_equals_the_unicode_path():
    rng = random.Random(7)
    texts = [
        "".join(
            rng.choice([chr(c) for c in range(128)] + list(" ,.aZ9\t") * 20)
            for _ in range(rng.choice([0, 1, 2, 3, 8, 60]))
        )
        for _ in range(3000)
    ]
    texts += [None, "", " ", "  a  ", " a", "a ", "A,B", "--x--y--", "é", "Straße X", None]
    arr = pa.array(texts)
    want = [None if t is None else reference_normalize(t) for t in texts]
    assert normalize_array(arr).to_pylist() == want  # mixed batch
    assert normalize_array(arr.slice(5, 400)).to_pylist() == want[5:405]
    plain = pa.array([t for t in texts if t is None or t.isascii()])
    assert normalize_array(plain).to_pylist() == _normalize_unicode(plain, "script").to_pylist()
    assert normalize_array(pa.array(["", None, ""])).to_pylist() == ["", None, ""]


def test_nulls_stay_null():
    assert normalize_array(pa.array([None, "A"])).to_pylist() == [None, "a"]


def test_prepare_documents_splits_rejects(spark):
    schema = T.StructType(
        [T.StructField("id", T.StringType()), T.StructField("text", T.StringType())]
    )
    rows = [
        ("ok", "Hello World"),
        ("null", None),
        ("empty", ""),
        ("ws", " \t\n\u3000"),
        ("big", "x" * 101),
        ("bin", "\x00\x01\x02\ufffd\ufffdab"),
        ("punct", "?!... 😀"),
        # Leading white space, then words: not white space only.
        ("lead", "\u3000 \tHello"),
        # 120 bytes but 60 characters: within the limit of 100 characters.
        ("multi", "é" * 60),
        # Too large is found first: the white-space regex never sees a blob.
        ("big_ws", " " * 101),
        # White space only, starting with separators outside ASCII.
        ("ws_line", "\u2028\u00a0\ufeff"),
        ("ws_nel", "\u0085 "),
    ]
    docs, rejects = prepare_documents(spark.createDataFrame(rows, schema), "text", 100)
    assert {r.id: (r.norm, r.text_len) for r in docs.collect()} == {
        "ok": ("hello world", 11),
        "lead": ("hello", 8),
        "multi": ("é" * 60, 60),
    }
    reasons = {r.id: r.reason.split(":")[0] for r in rejects.collect()}
    assert reasons == {
        "null": "missing_text",
        "empty": "empty_text",
        "ws": "whitespace_only_text",
        "big": "too_large",
        "bin": "binary_content",
        "punct": "no_text_content",
        "big_ws": "too_large",
        "ws_line": "whitespace_only_text",
        "ws_nel": "whitespace_only_text",
    }


def test_white_code_points_are_the_white_space_regex(spark):
    # The reject check reads the first character's code point (``ascii``) and
    # looks it up instead of matching _WHITE_RE: the same answer for every
    # character of the Basic Multilingual Plane and a few beyond it.
    from lsh_spark.normalize import _WHITE_CODEPOINTS, _WHITE_RE

    chars = [chr(c) + "x" for c in [*range(0xD800), *range(0xE000, 0x10000), 0x1F600, 0x10FFFF]]
    df = spark.createDataFrame([(t,) for t in chars], "t string")
    got = (
        df.select(
            F.col("t"),
            F.ascii("t").isin(*_WHITE_CODEPOINTS).alias("lookup"),
            F.substring("t", 1, 1).rlike(_WHITE_RE).alias("regex"),
        )
        .filter(F.col("lookup") != F.col("regex"))
        .collect()
    )
    assert got == []
    assert (
        df.filter(F.ascii("t").isin(*_WHITE_CODEPOINTS)).count()
        == len(set(_WHITE_CODEPOINTS))
        == 27
    )


def test_char_lengths_equal_sparks_length(spark):
    # Spark's length() of strings whose bytes it never checked (the text
    # reader's): valid UTF-8, lone continuation bytes, sequences cut short,
    # C0/C1/F5-FF lead bytes; and a batch of valid strings alone.
    from lsh_spark.normalize import char_lengths

    rng = random.Random(11)
    pieces = [
        b"a",
        b" ",
        "é".encode(),
        "€".encode(),
        "😀".encode(),
        b"\x80",
        b"\xbf",
        b"\xc0",
        b"\xc1",
        b"\xc3",
        b"\xe2\x82",
        b"\xf0\x9f",
        b"\xf5",
        b"\xff",
        b"\xed\xa0\x80",
    ]
    raw = [b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 12))) for _ in range(2000)]
    raw += [b"\xc3", b"\xf0", b"\xe2\x82", b"", None]
    want = [
        r.n
        for r in spark.createDataFrame([(b,) for b in raw], "b binary")
        .select(F.length(F.col("b").cast("string")).alias("n"))
        .collect()
    ]
    arr = pa.array(raw, pa.binary()).view(pa.string())
    assert char_lengths(arr).to_pylist() == want
    valid = [b for b in raw if b is None or _decodes(b)]
    arr = pa.array(valid, pa.binary()).view(pa.string())
    assert char_lengths(arr).to_pylist() == [None if b is None else len(b.decode()) for b in valid]
    assert char_lengths(arr).type == pa.int32()


def _decodes(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_reader_reason_takes_precedence(spark):
    df = spark.createDataFrame(
        [("a", "fine text", "invalid_record: x")], "id string, text string, reject_reason string"
    )
    docs, rejects = prepare_documents(df, "text", 100)
    assert docs.count() == 0
    assert rejects.select(F.col("reason")).first().reason == "invalid_record: x"


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string(), pa.binary()])
def test_keep_where_of_a_sliced_array_is_valid(typ):
    """pyarrow 21's if_else with a null scalar breaks sliced string arrays
    (apache/arrow#49410); keep_where must not."""
    from lsh_spark.normalize import keep_where

    arr = pa.array(["abc", "defg", None, "jklmn", "op"] * 3, typ).slice(5, 5)
    for keep in ([True] * 5, [True, False, True, True, False], [None, True, True, False, True]):
        out = keep_where(pa.array(keep, pa.bool_()), arr)
        out.validate(full=True)
        assert out.to_pylist() == [
            v if k else None for v, k in zip(arr.to_pylist(), keep, strict=False)
        ]
    assert keep_where(pa.array([True] * 5), arr) is arr  # nothing to null: no copy


def test_features_of_a_sliced_batch_equal_those_of_a_copy():
    from lsh_spark.features import _features_batch
    from lsh_spark.signature import permutation_params

    texts = [
        "Hello, World! and more words here",
        "\x00\x01\x02\x03 binary",
        "   ",
        "Straße ＡＢＣ and friends of the text",
        None,
        "short one",
    ] * 3
    whole = pa.RecordBatch.from_arrays(
        [
            pa.array([f"d{i}" for i in range(len(texts))]),
            pa.array([None if t is None else len(t) for t in texts], pa.int32()),
            pa.array(texts),
            pa.nulls(len(texts), pa.string()),
        ],
        names=["id", "text_len", "text", "reason"],
    )
    a, b = permutation_params(16, 3)
    part = whole.slice(4, 9)
    copy = pa.RecordBatch.from_pylist(part.to_pylist(), schema=part.schema)
    assert (
        _features_batch(part, 3, 3, a, b, "script").to_pylist()
        == _features_batch(copy, 3, 3, a, b, "script").to_pylist()
    )


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string()])
def test_binary_char_counts_equal_the_regex_count(typ):
    # The numpy count of control characters and U+FFFD that binary_reasons
    # uses: the same as RE2's count of the class, for texts mixing them with
    # tabs, newlines and other multi-byte characters (EF BF BE is U+FFFE, not
    # counted), nulls, empty texts, and a sliced array.
    import numpy as np
    import pyarrow.compute as pc

    from lsh_spark.normalize import binary_char_counts

    rng = random.Random(7)
    pieces = [
        "a",
        "Zz ",
        "\t",
        "\n",
        "\r",
        "\x0c",
        "\x00",
        "\x07",
        "\x0b",
        "\x1f",
        "\x7f",
        "\ufffd",
        "\ufffe",
        "\uefbf",
        "é",
        "€",
        "日本",
        "\U0001f600",
    ]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40))) for _ in range(400)]
    texts[3] = texts[50] = None
    texts[7] = ""
    arr = pa.array(texts, typ)
    for part in (arr, arr.slice(13, 300), arr.slice(0, 0)):
        want = pc.count_substring_regex(part, _BINARY_CHARS_RE2).fill_null(0)
        got = binary_char_counts(part)
        assert got.dtype == np.int64 and got.tolist() == want.to_pylist()
    assert binary_char_counts(arr).sum() > 200


def test_ascii_path_of_long_texts_equals_the_reference():
    # Long texts (over _COUNT_PER_TEXT_BYTES a text on average) count their
    # kept bytes text by text instead of by one reduceat: the same result.
    from lsh_spark.normalize import _COUNT_PER_TEXT_BYTES

    rng = random.Random(11)
    words = ["alpha", "Beta", "GAMMA", "d3lta", "", " ", "--", "..", "\t\n", "x"]
    texts = [
        ("  " if i % 3 == 0 else "")
        + " ".join(rng.choice(words) for _ in range(600))
        + (" ,." if i % 4 == 0 else "")
        for i in range(60)
    ]
    texts += ["", " ,;", None, "  lead and trail  "]
    arr = pa.array(texts)
    assert sum(len(t or "") for t in texts) >= _COUNT_PER_TEXT_BYTES * len(texts)
    want = [None if t is None else reference_normalize(t) for t in texts]
    assert normalize_array(arr).to_pylist() == want
    assert normalize_array(arr.slice(2, 40)).to_pylist() == want[2:42]
