"""The crawl index's manifests stay small and few: the batch ledger and pruning.

Compaction folds every batch the index holds into ``batches.jsonl`` of the
segment it writes, and its manifest lists none (``folded_batches`` says where
they are, ``format_version`` 2); later batches append to ``batches`` again.
Every batch prunes manifests whose next readable version is older than the
retention period, and the segments no remaining manifest names.  The batches
are those of test_crawl.py (``crawlgen.batches``), under literal batch ids.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from crawlgen import batches, day, page, write_warc
from test_crawl import CFG, tree_digest
from test_index_commit import DAY_S, _age, manifest

from lsh_spark.crawl import run_crawl_batch
from lsh_spark.index import CrawlIndex, IndexError, Manifest, compact, describe

IDS = ["night-1", "night-2", "night-3"]
V020_INDEX = os.path.join(os.path.dirname(__file__), "data", "v0.2.0", "crawl-index")


def manifest_json(index, version: int) -> dict:
    return json.loads((index / "_manifests" / f"v{version:08d}.json").read_text())


def ledger(index, m: Manifest) -> list[dict]:
    path = index / "segments" / m.folded_batches["segment"] / "batches.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def fourth_batch(root) -> str:
    """A batch of two pages: a copy of an indexed page (lwn-1, batch 3) and a new one."""
    b4 = root / "batch-4"
    write_warc(
        str(b4 / "x.warc.gz"),
        [
            dict(url="https://late.example/lwn", date=day(20), html=page("lwn-1")),
            dict(url="https://new.example/moz/2", date=day(20), html=page("mozilla-2")),
        ],
    )
    return str(b4)


@pytest.fixture(scope="module")
def history(spark, tmp_path_factory):
    """Batches 1 to 3 committed as versions 1 to 3 under ``IDS``, then compacted
    (version 4); tests change copies of the index."""
    root = tmp_path_factory.mktemp("manifests")
    b = batches(str(root / "in"))
    index = root / "index"
    reports = {}
    for n, batch_id in enumerate(IDS, 1):
        out = str(root / "out" / batch_id)
        reports[batch_id] = run_crawl_batch(
            spark, b[f"batch-{n}"], str(index), out, CFG, batch_id=batch_id
        )
    compacted = compact(spark, str(index))
    return {"root": root, "batches": b, "index": index, "reports": reports, "compact": compacted}


def copy_of(history, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(history["index"], index)
    return index


# -- (a) compaction folds the batches into a ledger -------------------------------
@pytest.mark.heavy
def test_compaction_folds_every_batch_into_the_ledger(history, spark, tmp_path):
    idx = CrawlIndex(spark, str(history["index"]))
    m = idx.current()
    assert m.version == 4 and m.batches == []
    assert m.folded_batches == {"segment": m.segments[0]["name"], "count": 3}
    entries = ledger(history["index"], m)
    assert [e["batch_id"] for e in entries] == ["night-1", "night-2", "night-3"]
    assert [e["version"] for e in entries] == [1, 2, 3]
    assert [e["new_documents"] for e in entries] == [
        history["reports"][i]["counts"]["new_documents"] for i in IDS
    ]
    # One lookup for both places; the report counts the folded batches.
    assert idx.find_batch(m, "night-1") == entries[0]
    assert idx.find_batch(m, "night-9") is None
    assert describe(m)["batches"] == 3 and history["compact"]["after"]["batches"] == 3

    # A batch from before the compaction, run again: already applied, nothing added.
    index = copy_of(history, tmp_path)
    before = tree_digest(str(index))
    r = run_crawl_batch(
        spark,
        history["batches"]["batch-1"],
        str(index),
        str(tmp_path / "o"),
        CFG,
        batch_id="night-1",
    )
    assert r["status"] == "already_applied" and r["original_run"]["version"] == 1
    assert r["index"]["after"]["documents"] == 10 == m.documents
    assert tree_digest(str(index)) == before


@pytest.mark.heavy
def test_a_ledger_that_cannot_be_read_is_an_error_never_not_applied(history, spark, tmp_path):
    index = copy_of(history, tmp_path)
    idx = CrawlIndex(spark, str(index))
    m = idx.current()
    path = index / "segments" / m.folded_batches["segment"] / "batches.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2]))  # the last batch lost (a truncated file)
    with pytest.raises(IndexError, match=r"batches\.jsonl of index version 4 holds 2 lines"):
        idx.find_batch(m, "night-3")
    path.write_text("".join(lines[:2]) + lines[2][:20])  # cut inside a line
    with pytest.raises(IndexError, match=r"cannot read the batch ledger .*batches\.jsonl"):
        idx.find_batch(m, "night-3")
    path.unlink()
    with pytest.raises(IndexError, match=r"cannot read the batch ledger .*batches\.jsonl"):
        run_crawl_batch(
            spark,
            history["batches"]["batch-3"],
            str(index),
            str(tmp_path / "o"),
            CFG,
            batch_id="night-3",
        )
    assert idx.versions() == [1, 2, 3, 4] and not (tmp_path / "o").exists()


# -- (b) later batches append; the next compaction folds them all ------------------
@pytest.mark.heavy
def test_batches_after_a_compaction_append_and_the_next_compaction_folds_all(
    history, spark, tmp_path
):
    index = copy_of(history, tmp_path)
    idx = CrawlIndex(spark, str(index))
    folded = idx.current().folded_batches
    r = run_crawl_batch(
        spark, fourth_batch(tmp_path), str(index), str(tmp_path / "o4"), CFG, batch_id="night-4"
    )
    assert r["status"] == "committed" and r["index"]["after"]["batches"] == 4
    m5 = idx.current()
    assert m5.version == 5 and [b["batch_id"] for b in m5.batches] == ["night-4"]
    assert m5.folded_batches == folded  # carried forward unchanged
    assert manifest_json(index, 5)["folded_batches"] == folded
    assert idx.find_batch(m5, "night-2")["version"] == 2
    assert idx.find_batch(m5, "night-4")["version"] == 5

    compact(spark, str(index))
    m6 = idx.current()
    assert m6.version == 6 and m6.batches == []
    assert m6.folded_batches == {"segment": m6.segments[0]["name"], "count": 4}
    assert [e["batch_id"] for e in ledger(index, m6)] == [*IDS, "night-4"]
    assert idx.find_batch(m6, "night-1")["version"] == 1
    # The manifest does not grow with the folded batches: it lists none of them.
    data = manifest_json(index, 6)
    assert data["batches"] == [] and len(manifest_json(index, 4)["batches"]) == 0
    assert not any(i in json.dumps(data) for i in [*IDS, "night-4"])
    assert describe(m6)["batches"] == 4


# -- (c) every batch prunes old manifests and the segments only they named --------
@pytest.mark.heavy
def test_a_batch_prunes_manifests_older_than_the_retention(history, spark, tmp_path):
    index = copy_of(history, tmp_path)
    idx = CrawlIndex(spark, str(index))
    m4 = idx.current()
    ledger_segment = m4.folded_batches["segment"]
    old_segments = {s["name"] for s in idx.load(3).segments}
    assert ledger_segment not in old_segments
    # Everything is days old, the compacted segment (which holds the ledger) too.
    for v in (1, 2, 3, 4):
        _age(index / "_manifests" / f"v{v:08d}.json", (6 - v) * DAY_S)
    _age(index / "segments", 5 * DAY_S)
    r = run_crawl_batch(
        spark, fourth_batch(tmp_path), str(index), str(tmp_path / "o4"), CFG, batch_id="night-4"
    )
    assert r["status"] == "committed" and r["index"]["after"]["version"] == 5
    # v1..v3 are retired (each one's successor is days old); v4, the newest readable
    # when the batch started, stays although it is old, and so does v5.
    assert idx.versions() == [4, 5]
    # The batch segments of v1..v3 were named by no remaining manifest: deleted.
    # The compacted segment holding the ledger is named by v4 and v5: kept.
    m5 = idx.current()
    assert set(os.listdir(index / "segments")) == {s["name"] for s in m5.segments}
    assert ledger_segment in os.listdir(index / "segments")
    assert not old_segments & set(os.listdir(index / "segments"))
    # The index still opens and looks up, in the ledger and in the manifest.
    assert m5.documents == 11 and idx.docs(m5).count() == 11
    assert idx.find_batch(m5, "night-2")["version"] == 2
    again = run_crawl_batch(
        spark,
        history["batches"]["batch-2"],
        str(index),
        str(tmp_path / "o2"),
        CFG,
        batch_id="night-2",
    )
    assert again["status"] == "already_applied"


def segments(root, *names: str) -> None:
    """Segment directories with one file each (a commit syncs what it names)."""
    for name in names:
        (root / "segments" / name / "docs").mkdir(parents=True)
        (root / "segments" / name / "docs" / "part-0.parquet").write_bytes(b"x")


def test_pruning_keeps_the_version_a_reader_may_hold(spark, tmp_path):
    """Unit test of the rule, on hand-made manifests: a manifest is retired once its
    next readable version is older than the retention period; a damaged one is
    nobody's successor; the newest readable is never retired; the head a batch
    commits on does not move."""
    root = tmp_path / "index"
    segments(root, "a", "b", "c")
    idx = CrawlIndex(spark, str(root))
    idx.commit(None, manifest(1, "a"))
    (root / "_manifests" / "v00000002.json").write_text("")  # damaged by a power loss
    idx.commit(None, manifest(3, "a", "b"))
    _age(root / "_manifests" / "v00000001.json", 3 * DAY_S)
    _age(root / "_manifests" / "v00000002.json", 2 * DAY_S)
    assert idx.current().version == 3 and idx.head == 3
    # v1's successor is v3 (v2 was never read), which is young: all stay.
    assert idx.collect_garbage(DAY_S, retire_manifests=True) == []
    # Another run commits v4 meanwhile: this run's head stays where it read.
    CrawlIndex(spark, str(root)).commit(None, manifest(4, "a", "b", "c"))
    _age(root / "_manifests" / "v00000003.json", 2 * DAY_S)
    _age(root / "_manifests" / "v00000004.json", 2 * DAY_S)
    deleted = idx.collect_garbage(DAY_S, retire_manifests=True)
    assert idx.head == 3
    assert [os.path.basename(p) for p in deleted] == [f"v0000000{v}.json" for v in (1, 2, 3)]
    assert idx.versions() == [4]  # the newest readable, old as it is


def test_a_manifest_whose_ledger_it_does_not_name_is_never_committed(spark, tmp_path):
    segments(tmp_path / "index", "a")
    idx = CrawlIndex(spark, str(tmp_path / "index"))
    bad = manifest(1, "a")
    bad.folded_batches = {"segment": "elsewhere", "count": 1}
    with pytest.raises(IndexError, match="ledger of segment elsewhere, which it does not name"):
        idx.commit(None, bad)
    assert idx.versions() == []
    good = manifest(1, "a")
    good.folded_batches = {"segment": "a", "count": 1}
    idx.commit(None, good)
    assert idx.current().segment_names() == {"a"}


# -- (d) format_version --------------------------------------------------------------
@pytest.mark.heavy
def test_a_folded_manifest_has_format_version_2_an_unfolded_one_1(history, spark, tmp_path):
    index = history["index"]
    assert [manifest_json(index, v)["format_version"] for v in (1, 2, 3, 4)] == [1, 1, 1, 2]
    assert "folded_batches" not in manifest_json(index, 3)
    # A format this release does not know is refused in one line.
    index = copy_of(history, tmp_path)
    data = manifest_json(index, 4)
    (index / "_manifests" / "v00000005.json").write_text(json.dumps(dict(data, format_version=3)))
    with pytest.raises(IndexError, match=r"has format_version 3; this lsh-spark reads 1 and 2$"):
        CrawlIndex(spark, str(index)).current()


def test_the_0_2_0_index_opens_and_finds_its_batches(spark, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(V020_INDEX, index)
    idx = CrawlIndex(spark, str(index))
    m = idx.current()
    assert m.version == 2 and m.folded_batches is None
    assert idx.find_batch(m, "batch-1")["version"] == 1
    assert describe(m)["batches"] == 2
