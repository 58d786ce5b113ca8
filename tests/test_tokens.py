"""Script-aware word tokens (``--tokens``): one tokenizer on every path, pinned values.

The normalization cuts the words; every path that shingles text (the fused
Python pass of MinHash, the Spark path of SimHash, decontamination's n-grams,
the advisor's sample, ``lsh_spark.shingles``) reads the same normalized text, so
they must give the same shingle sets.  The expected tokens come from the
independent oracle in tests/reference.py, whose script table is written out from
Unicode's Scripts.txt; the hashes of 0.2.0 (``space``) are literals written by
that release (tests/data/v0.2.0 holds whole outputs of it).
"""

from __future__ import annotations

import json
import sys
import unicodedata

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from reference import tokens as reference_tokens
from reference import word_shingles as reference_shingles

from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.normalize import checked_texts, normalize_array, prepare
from lsh_spark.shingle import add_shingles, text_hash_arrow, word_shingles_arrow
from lsh_spark.signature import permutation_params, signature_arrays

MIXED = (
    "Release notes 2026: 日本語の説明を追加しました。Обновлены переводы. ภาษาไทย "
    "더 많은 언어 Ελληνικά ﾃｽﾄ Ｆｕｌｌｗｉｄｔｈ Straße"
)
# One text per script the tokenizer splits, and some it does not (written for the tests).
TEXTS = [
    MIXED,
    "東京タワーは、高さ333メートルの電波塔です。コーヒーを飲みました",
    "网络上的许多网页只是在日期或者作者上有所不同",
    "เว็บไซต์จำนวนมากคัดลอกบทความเดียวกัน ภาษาไทยไม่เว้นวรรค",
    "ພາສາລາວ ບໍ່ມີຍະຫວ່າງ",
    "ភាសាខ្មែរមិនដកឃ្លា",
    "မြန်မာဘာသာစကား",
    "བོད་ཡིག་ནི་",
    "한국어는 단어 사이에 띄어쓰기를 합니다",
    "mixed日本English中文ไทยwords and a lone mark aิ",
    "短い",
]


@pytest.mark.parametrize("mode", ["script", "space"])
def test_every_letter_digit_and_mark_is_cut_as_the_reference_cuts_it(mode):
    """Each letter, digit and mark of Unicode (as Python knows it), between
    letters, as a mark after another and doubled: the code's regex tables agree
    with the oracle's script table on every one."""
    points = [
        c
        for c in range(0x80, 0x32400)
        if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c))[0] in "LNM"
    ]
    texts = [f"x{chr(c)}y{chr(c)}{chr(c)}z กิ{chr(c)} 日{chr(c)}" for c in points]
    got = normalize_array(pa.array(texts), mode).to_pylist()
    split = mode == "script"
    wrong = [
        hex(c)
        for c, text, norm in zip(points, texts, got, strict=True)
        if norm.split(" ") != reference_tokens(text, split)
    ]
    assert len(points) > 100_000 and wrong == []


def test_normalized_mixed_text_is_pinned():
    assert normalize_array(pa.array([MIXED])).to_pylist() == [
        "release notes 2026 日 本 語 の 説 明 を 追 加 し ま し た обновлены переводы "
        "ภ า ษ า ไ ท ย 더 많은 언어 ελληνικά テ ス ト fullwidth strasse"
    ]
    # lsh-spark 0.2.0's normalization, unchanged.
    assert normalize_array(pa.array([MIXED]), "space").to_pylist() == [
        "release notes 2026 日本語の説明を追加しました обновлены переводы ภาษาไทย "
        "더 많은 언어 ελληνικά テスト fullwidth strasse"
    ]


@pytest.mark.parametrize(
    "mode,text_hash,signature,num_shingles",
    [
        # Written by lsh-spark 0.2.0 (commit cd0386f): a 0.2.0 index holds these.
        (
            "space",
            "de6ced5fddb8142ddb8836116b0e8fd9",
            [7855544, 86249283, 4615006, 39169012, 84401818, 113772526, 114266698, 244001652],
            10,
        ),
        (
            "script",
            "9ac4df87c0e87c3a13bf2a983d49d06c",
            [75820043, 70652600, 85172568, 21327705, 90908691, 79363474, 139139837, 106686581],
            30,
        ),
    ],
)
def test_text_hash_and_signature_of_a_mixed_text_are_pinned(
    mode, text_hash, signature, num_shingles
):
    norm = normalize_array(pa.array([MIXED]), mode)
    assert text_hash_arrow(norm, 1).to_pylist()[0].hex() == text_hash
    a, b = permutation_params(128, 1)
    sig, n = signature_arrays(word_shingles_arrow(norm, 5, 1), a, b)
    assert sig.to_pylist()[0][:8] == signature and n.to_pylist() == [num_shingles]
    assert len(reference_shingles(MIXED, 5, mode == "script")) == num_shingles


def _frame(spark):
    return spark.createDataFrame(list(enumerate(TEXTS)), "id int, text string")


def _by_id(rows, col="shingles"):
    return {r["id"]: sorted(r[col]) for r in rows}


@pytest.mark.parametrize("mode", ["script", "space"])
def test_every_path_gives_the_same_shingles(spark, mode, tmp_path):
    """The fused Python pass, the Spark path (SimHash, prepare + add_shingles),
    decontamination's n-grams, the advisor's sample and ``lsh_spark.shingles``."""
    from lsh_spark import api
    from lsh_spark.advisor import collect_sample
    from lsh_spark.decontam import _ngrams
    from lsh_spark.features import word_minhash_features

    k, seed = 3, 1
    df = _frame(spark)
    checked = checked_texts(df, "text", 10**7, binary=False, passed_len=False)
    fused = _by_id(word_minhash_features(checked, k, seed, 16, tokens=mode).collect())
    prepared = prepare(df, "text", 10**7, mode)
    spark_path = _by_id(add_shingles(prepared, "word", k, seed).collect())
    grams = _ngrams(prepared, k, seed, ("id",)).groupBy("id").agg(F.collect_set("gram").alias("g"))
    decontam = _by_id(grams.collect(), "g")
    public = _by_id(api.shingles(df, k=k, seed=seed, tokens=mode).collect())
    split = mode == "script"
    assert fused == spark_path == public
    # Decontamination matches a text of fewer than k tokens by its own m-grams.
    assert decontam == {
        i: s for i, s in fused.items() if len(reference_tokens(TEXTS[i], split)) >= k
    }
    # The sizes are those of the oracle's k-grams of its tokens.
    assert {i: len(s) for i, s in fused.items()} == {
        i: len(reference_shingles(t, k, split)) for i, t in enumerate(TEXTS)
    }
    # The advisor samples the same sets from a corpus file.
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        "".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(TEXTS)),
        encoding="utf-8",
    )
    sample, n = collect_sample(
        spark, str(path), DedupConfig(tokens=mode, k=k, seed=seed), size=len(TEXTS)
    )
    assert n == len(TEXTS)
    assert sorted(map(sorted, sample)) == sorted(fused.values())


def test_script_tokens_change_only_texts_of_scripts_without_spaces():
    """Latin, Cyrillic, Greek, Hangul and Devanagari texts normalize as in 0.2.0,
    so their signatures, and the English benchmarks, do not change."""
    same = [
        "Straße, ＡＢＣ!!",
        "Обновлены переводы",
        "Ελληνικά",
        "한국어는 단어 사이에",
        "हिन्दी text",
        "ﬁne “quotes”",
    ]
    assert normalize_array(pa.array(same)).to_pylist() == (
        normalize_array(pa.array(same), "space").to_pylist()
    )
    assert normalize_array(pa.array(["日本"])).to_pylist() == ["日 本"]


def test_tokens_option_is_checked_and_recorded():
    assert DedupConfig().token_mode == "script"
    assert DedupConfig().to_dict()["tokens"] == "script"
    assert DedupConfig(tokens="space").to_dict()["tokens"] == "space"
    # Character k-grams read the text unsplit, whatever the default.
    assert DedupConfig(shingle="char").to_dict()["tokens"] == "space"
    with pytest.raises(ConfigError, match=r"^--tokens: got 'words'; allowed: script \| space$"):
        DedupConfig(tokens="words")
    with pytest.raises(ConfigError, match="--tokens: got 'script' with --shingle char"):
        DedupConfig(shingle="char", tokens="script")
    with pytest.raises(ValueError, match="tokens: got 'x'"):
        normalize_array(pa.array(["a"]), "x")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
