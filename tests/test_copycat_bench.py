"""bench/copycat.py's reading of the judgment folders and its scoring, on small
literal inputs with values worked out by hand (no Spark, no shared data)."""

from __future__ import annotations

import json

import pytest
from servers import bench_module


@pytest.fixture(scope="module")
def copycat():
    return bench_module("copycat")


def test_labels_are_the_four_judgments_and_anything_else_is_left_out(copycat):
    assert copycat.parse_label("3\n") == 3.0
    assert copycat.parse_label("0.5 \n") == 0.5
    assert copycat.parse_label("1") == 1.0
    for raw in ("unknown\n", "unkown", "0.5s", "4", "", "nan"):
        assert copycat.parse_label(raw) is None, raw


def test_pair_folders_name_source_then_target(copycat):
    assert copycat.pair_ids("cw09-a-1__to__cw09-a-2") == ("cw09-a-1", "cw09-a-2")
    for bad in ("a_to_b", "a__to__", "a__to__b__to__c"):
        with pytest.raises(SystemExit):
            copycat.pair_ids(bad)


def _pair(root, name, label, src, target):
    folder = root / name
    folder.mkdir()
    (folder / "label").write_text(label)
    (folder / "src-doc").write_text(src)
    (folder / "target-doc").write_text(target)
    (folder / "metadata").write_text("Canonical-Link: http://example.org/\n")


def test_judgments_load_labelled_pairs_once_per_page(copycat, tmp_path):
    _pair(tmp_path, "a__to__b", "3\n", "text a", "text b")
    _pair(tmp_path, "c__to__b", "0.5 \n", "text c", "text b")
    _pair(tmp_path, "d__to__e", "unknown\n", "text d", "text e")
    _pair(tmp_path, "f__to__g", "unkown\n", "text f", "text g")
    pairs, texts, skipped, uses = copycat.load_judgments(str(tmp_path))
    assert [(p.src, p.target, p.label) for p in pairs] == [("a", "b", 3.0), ("c", "b", 0.5)]
    assert texts == {"a": "text a", "b": "text b", "c": "text c"}
    assert skipped == {"unknown": 1, "unkown": 1}
    assert uses == {"a": 1, "b": 2, "c": 1}
    corpus = tmp_path / "corpus.jsonl"
    copycat.write_corpus(texts, str(corpus))
    lines = [json.loads(line) for line in corpus.read_text().splitlines()]
    assert lines == [{"id": i, "text": f"text {i}"} for i in "abc"]


def test_a_page_with_two_texts_stops_the_run(copycat, tmp_path):
    _pair(tmp_path, "a__to__b", "3", "text a", "text b")
    _pair(tmp_path, "c__to__b", "1", "text c", "another b")
    with pytest.raises(SystemExit, match="page b has two different texts"):
        copycat.load_judgments(str(tmp_path))


def test_confusion_precision_recall_f1(copycat):
    d = copycat.decisions([True, True, False, False, True], [True, False, True, False, True])
    assert (d["tp"], d["fp"], d["fn"], d["tn"]) == (2, 1, 1, 1)
    assert d["precision"] == pytest.approx(2 / 3)
    assert d["recall"] == pytest.approx(2 / 3)
    assert d["f1"] == pytest.approx(2 / 3)
    # Nothing predicted: precision undefined, F1 0.
    assert copycat.prf(0, 0, 3) == (None, 0.0, 0.0)
    assert copycat.prf(0, 2, 0) == (0.0, None, 0.0)


def test_thresholds_decide_at_or_above(copycat):
    scores = [0.9, 0.8, 0.7, 0.6, 0.5]
    actual = [True, False, True, False, False]
    at = copycat.at_threshold(scores, actual, 0.7)
    assert (at["tp"], at["fp"], at["fn"], at["tn"]) == (2, 1, 0, 2)
    # F1 per threshold: 0.9 -> 2/3, 0.8 -> 1/2, 0.7 -> 4/5, 0.6 -> 2/3, 0.5 -> 4/7.
    best = copycat.best_threshold(scores, actual)
    assert best["threshold"] == 0.7 and best["f1"] == pytest.approx(0.8)
    assert best["precision"] == pytest.approx(2 / 3) and best["recall"] == 1.0


def test_the_best_threshold_among_equal_f1_is_the_highest(copycat):
    # 0.9: tp 1, fn 1 -> F1 2/3; 0.4: tp 2, fp 2 -> F1 4/6 = 2/3; between: lower.
    best = copycat.best_threshold([0.9, 0.6, 0.5, 0.4], [True, False, False, True])
    assert best["threshold"] == 0.9 and best["f1"] == pytest.approx(2 / 3)


def test_roc_auc_counts_ordered_pairs_and_ties_half(copycat):
    # Positives 0.9 and 0.7 against negatives 0.8 and 0.6: 3 of 4 pairs ordered.
    assert copycat.roc_auc([0.9, 0.8, 0.7, 0.6], [True, False, True, False]) == 0.75
    # The positive ties one negative (1/2) and beats the other (1): 1.5 of 2.
    assert copycat.roc_auc([0.5, 0.5, 0.2], [True, False, False]) == 0.75
    assert copycat.roc_auc([0.1, 0.9], [True, False]) == 0.0
    assert copycat.roc_auc([0.1, 0.9], [True, True]) is None


def test_wilson_interval(copycat):
    # 5 of 10: centre 0.5, half-width 1.96 * sqrt(0.025 + 0.009604) / 1.38416.
    low, high = copycat.wilson(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)
    low, high = copycat.wilson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    assert copycat.wilson(10, 10)[1] == 1.0
    assert copycat.wilson(0, 0) is None


def test_merged_per_label(copycat):
    got = copycat.merged_per_label([0.5, 3.0, 3.0, 1.0], [False, True, False, True])
    assert got == {0.5: (1, 0), 1.0: (1, 1), 3.0: (2, 1)}
    assert list(got) == [0.5, 1.0, 3.0]


def test_table_pads_columns(copycat):
    assert copycat.table(["a", "bb"], [[1, 2345]]) == "| a | bb   |\n|---|------|\n| 1 | 2345 |"
