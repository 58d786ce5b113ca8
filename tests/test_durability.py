"""Power cuts: what a commit returned from survives one, and a cut at any step of
a commit leaves, after recovery, the one state the design names.

tests/powercut.py forgets, at the cut, everything that was not fsynced (files,
and names in directories).  Datasets are written here the way Spark writes them
on a local disk: closed, never synced.  The index test runs a real crawl batch.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from commit_child import DATASETS, ROWS_PER_FILE
from powercut import PowerCut
from test_commit import AFTER_RECOVERY, leftovers, output_label
from test_crawl import WORDS, _small_batch

from lsh_spark import outputs, owners
from lsh_spark.config import DedupConfig
from lsh_spark.crawl import run_crawl_batch
from lsh_spark.index import CrawlIndex
from lsh_spark.outputs import StagedOutput, StagewiseOutput, recover_output, recover_stages

CFG = DedupConfig()


class Cut(Exception):
    """The power went out at a commit step."""


def unsynced_dataset(path: str, label: str, files: int) -> None:
    """A dataset as Spark leaves it on a local disk: whole files, none synced."""
    path = path.removeprefix("file:")
    os.makedirs(path, exist_ok=True)
    for i in range(files):
        ids = [f"{label}-{i}-{j}" for j in range(ROWS_PER_FILE)]
        pq.write_table(
            pa.table({"id": ids, "label": [label] * len(ids)}), f"{path}/part-{i}.parquet"
        )
    open(f"{path}/_SUCCESS", "wb").close()


def staged(out, label) -> StagedOutput:
    run = StagedOutput(None, str(out), overwrite=True)
    for name, files in DATASETS.items():
        unsynced_dataset(run.path(name), label, files)
    with open(run.path("report.json").removeprefix("file:"), "w") as fh:
        json.dump({"label": label}, fh)
    return run


def after_reboot(monkeypatch) -> None:
    """This process as it looks after the machine restarted: a new boot, and every
    lease written before the cut long over."""
    real = owners.identity()
    monkeypatch.setattr(owners, "identity", lambda: dict(real, boot_id="after-the-cut"))
    monkeypatch.setattr(owners, "CLOCK_SKEW_SECONDS", -owners.LEASE_SECONDS - 1)


def test_an_output_whose_commit_returned_survives_a_power_cut(tmp_path, monkeypatch):
    out = tmp_path / "out"
    staged(out, "old").commit()
    power = PowerCut(tmp_path).install(monkeypatch)
    staged(out, "new").commit()
    power.cut()
    assert output_label(out) == "new" and leftovers(tmp_path) == []


@pytest.mark.parametrize("step", ["staged", "aside", "published", "deleting-old"])
def test_a_power_cut_at_each_output_commit_step_then_recovery(tmp_path, monkeypatch, step):
    out = tmp_path / "out"
    staged(out, "old").commit()
    power = PowerCut(tmp_path).install(monkeypatch)

    def die(name):
        if name == f"commit:{step}":
            raise Cut(name)

    monkeypatch.setattr(outputs, "maybe_die", die)
    with pytest.raises(Cut):
        staged(out, "new").commit()
    power.cut()
    after_reboot(monkeypatch)
    recover_output(None, str(out))
    assert output_label(out) == AFTER_RECOVERY[step] and leftovers(tmp_path) == []


def test_a_stage_commit_survives_a_power_cut(tmp_path, monkeypatch):
    out = tmp_path / "out"
    stage = StagewiseOutput(None, str(out))
    unsynced_dataset(stage.staged("clusters"), "old", 3)
    stage.commit()
    power = PowerCut(tmp_path).install(monkeypatch)
    stage = StagewiseOutput(None, str(out))
    unsynced_dataset(stage.staged("clusters"), "new", 3)
    stage.commit()
    power.cut()
    after_reboot(monkeypatch)
    assert recover_stages(None, str(out)) == []
    rows = pq.read_table(str(out / "clusters")).to_pylist()
    assert {r["label"] for r in rows} == {"new"} and len(rows) == 3 * ROWS_PER_FILE


def _texts(prefix: str, n: int) -> dict[str, str]:
    return {f"{prefix}{i}": " ".join(WORDS[i:] + WORDS[:i] + [prefix]) * 3 for i in range(n)}


def test_a_crawl_index_survives_a_power_cut_after_a_batch(spark, tmp_path, monkeypatch):
    """The manifest of version 2 is synced when the batch returns: the segment files
    it names, and the names leading to them, must be too (0.2.0 synced only the
    manifest, so after a cut the index named empty files and could not be read)."""
    index = str(tmp_path / "index")
    b1 = _small_batch(tmp_path, "b1", _texts("a", 4))
    run_crawl_batch(spark, b1, index, str(tmp_path / "o1"), CFG)
    b2 = _small_batch(tmp_path, "b2", {**_texts("b", 3), "copy": _texts("a", 1)["a0"]})
    power = PowerCut(tmp_path).install(monkeypatch)
    report = run_crawl_batch(spark, b2, index, str(tmp_path / "o2"), CFG)
    assert report["counts"]["duplicates_of_index"] == 1
    power.cut()
    idx = CrawlIndex(spark, index)
    manifest = idx.current()
    assert manifest.version == 2 and idx.skipped == []
    docs = idx.docs(manifest)
    assert docs.count() == manifest.documents == 7
    assert idx.bands(manifest).count() == 7 * manifest.params["bands"]
    keys = docs.select("doc").orderBy("doc").limit(3)
    found, _ = idx.lookup(manifest, "docs", "doc", keys, 3)
    assert sorted(r["doc"] for r in found.collect()) == sorted(r["doc"] for r in keys.collect())
    out = json.loads((tmp_path / "o2" / "report.json").read_text())
    assert out["status"] == "committed"
    deduped = spark.read.parquet(str(tmp_path / "o2" / "deduped"))
    assert sorted(r["id"] for r in deduped.collect()) == ["b0", "b1", "b2"]
