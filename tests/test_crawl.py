"""Incremental crawl dedup: three nightly WARC batches against one index.

The batches (``crawlgen.batches``) are built from real pages: later batches
hold exact and near copies of earlier pages, pages of the same site template
with other articles (never duplicates), new pages, and an archive copy older
than the indexed page.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

import pytest
from crawlgen import batches, day
from servers import spark_submit

from lsh_spark import index as index_mod
from lsh_spark.config import DedupConfig
from lsh_spark.crawl import run_crawl_batch
from lsh_spark.index import CrawlIndex, IndexConflict, IndexError, compact

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CFG = DedupConfig()


def tree_digest(root: str, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """{relative path: sha256} of every file under root (the bytes of the index)."""
    out = {}
    for d, _, files in os.walk(root):
        rel_d = os.path.relpath(d, root)
        if any(rel_d == s or rel_d.startswith(s + os.sep) for s in skip):
            continue
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def rows(spark, path, *cols):
    return sorted(tuple(r[c] for c in cols) for r in spark.read.parquet(str(path)).collect())


@pytest.fixture(scope="module")
def crawl(spark, tmp_path_factory):
    """Batches 1 and 2 committed; batch 3 left to the tests (on copies of the index)."""
    root = tmp_path_factory.mktemp("crawl")
    b = batches(str(root / "in"))
    index = root / "index"
    reports = {}
    for name in ("batch-1", "batch-2"):
        reports[name] = run_crawl_batch(spark, b[name], str(index), str(root / "out" / name), CFG)
    return {"root": root, "batches": b, "index": index, "reports": reports}


def crawl_job(batch, index, out, fault: str | None = None) -> tuple[list[str], dict[str, str]]:
    """The spark-submit command of jobs/crawl_dedup.py and its environment
    (``fault``: the value of $LSH_SPARK_FAULT, see lsh_spark/faults.py)."""
    cmd, env = spark_submit(
        "crawl_dedup.py", "--batch", str(batch), "--index", str(index), "--output", str(out)
    )
    env.pop("LSH_SPARK_FAULT", None)
    if fault:
        env["LSH_SPARK_FAULT"] = fault
    return cmd, env


def urls(spark, out, name, col="url"):
    return sorted(r[col] for r in spark.read.parquet(str(out / name)).collect())


@pytest.mark.heavy
def test_first_batch_creates_the_index(crawl, spark):
    r = crawl["reports"]["batch-1"]
    out = crawl["root"] / "out" / "batch-1"
    assert r["status"] == "committed" and r["index"]["after"]["version"] == 1
    # 10 records: a 404, a request and a JSON response are skipped, a page
    # without text is rejected, the mirror is a duplicate within the batch.
    assert r["warc"]["skipped_by_reason"] == {
        "http_status: 404": 1,
        "record_type: request": 1,
        "not_html: application/json": 1,
    }
    assert r["rejects_by_reason"] == {"empty_text": 1}
    assert r["counts"]["new_documents"] == 5 and r["counts"]["duplicates_within_batch"] == 1
    dups = spark.read.parquet(str(out / "duplicates")).collect()
    assert len(dups) == 1 and dups[0]["jaccard"] == 1.0
    assert dups[0]["duplicate_of_source"] == "batch"
    assert r["index"]["after"]["documents"] == 5
    assert r["index"]["after"]["bytes"] > 0 and r["index"]["after"]["bytes_per_document"] > 0


@pytest.mark.heavy
def test_second_batch_finds_copies_of_indexed_pages(crawl, spark):
    r = crawl["reports"]["batch-2"]
    out = crawl["root"] / "out" / "batch-2"
    assert r["counts"]["duplicates_of_index"] == 2
    assert r["counts"]["duplicates_within_batch"] == 1
    assert urls(spark, out, "deduped") == [
        "https://news.example/moz/1",
        "https://news.example/nyt/2",
        "https://news.example/wapo/2",
    ]
    dups = {row["id"]: row for row in spark.read.parquet(str(out / "duplicates")).collect()}
    index_docs = {
        row["id"]: row["url"]
        for row in CrawlIndex(spark, str(crawl["index"]))
        .docs(CrawlIndex(spark, str(crawl["index"])).current())
        .collect()
    }
    by_url = {}
    deduped_raw = spark.read.parquet(str(crawl["root"] / "out" / "batch-2" / "deduped"))
    batch_urls = {row["id"]: row["url"] for row in deduped_raw.collect()}
    for row in dups.values():
        target = index_docs.get(row["duplicate_of"]) or batch_urls.get(row["duplicate_of"])
        by_url[target] = (row["duplicate_of_source"], row["jaccard"])
    assert by_url["https://news.example/wapo/1"] == ("index", 1.0)
    src, j = by_url["https://news.example/medium/1"]
    assert src == "index" and 0.8 <= j < 1.0
    src, j = by_url["https://news.example/wapo/2"]
    assert src == "batch" and 0.8 <= j < 1.0
    # same template (nytimes-2 vs nytimes-1 in the index), different article: new
    assert "https://news.example/nyt/2" in batch_urls.values()
    assert r["index"]["after"]["documents"] == 8 and r["index"]["before"]["documents"] == 5
    assert r["lookup"]["index_documents_looked_up"] >= 2


@pytest.mark.heavy
def test_rerun_of_a_committed_batch_changes_nothing(crawl, spark):
    index = str(crawl["index"])
    before = tree_digest(index)
    out = crawl["root"] / "out" / "batch-2"
    out_before = tree_digest(str(out))
    r = run_crawl_batch(spark, crawl["batches"]["batch-2"], index, str(out), CFG)
    assert r["status"] == "already_applied"
    assert r["counts"]["new_documents"] == 0
    assert tree_digest(index) == before
    assert tree_digest(str(out)) == out_before  # the first run's output stands
    # to a new output directory: only a report saying so
    fresh = crawl["root"] / "out" / "batch-2-again"
    r = run_crawl_batch(spark, crawl["batches"]["batch-2"], index, str(fresh), CFG)
    assert json.loads((fresh / "report.json").read_text())["status"] == "already_applied"
    assert tree_digest(index) == before


@pytest.fixture(scope="module")
def third(crawl, spark, tmp_path_factory):
    """Batch 3 run once, undisturbed, on a copy of the index after batches 1 and 2
    (tests that change the index copy it again)."""
    root = tmp_path_factory.mktemp("third")
    index, out = root / "index", root / "out"
    shutil.copytree(crawl["index"], index)
    report = run_crawl_batch(spark, crawl["batches"]["batch-3"], str(index), str(out), CFG)
    return {"index": index, "out": out, "report": report}


@pytest.mark.heavy
def test_third_batch_and_keep_oldest_supersedes(crawl, third, spark, tmp_path):
    index, out, r = third["index"], third["out"], third["report"]
    assert r["counts"]["duplicates_of_index"] == 1  # near copy of nyt/2 (batch 2)
    assert r["counts"]["superseded_index_documents"] == 1  # ars/1, by an older copy
    sup = spark.read.parquet(str(out / "superseded")).collect()
    assert len(sup) == 1 and 0.8 <= sup[0]["jaccard"] < 1.0
    idx = CrawlIndex(spark, str(index))
    live = {row["url"] for row in idx.docs(idx.current()).collect()}
    assert "https://archive.example/ars-1" in live and "https://news.example/ars/1" not in live
    assert "https://news.example/nyt/3" in live  # third article of the template: new
    assert r["index"]["after"]["documents"] == 8 + 3 - 1

    # --keep newest on the same state: the archive copy is a duplicate instead
    index2 = tmp_path / "index2"
    shutil.copytree(crawl["index"], index2)
    r2 = run_crawl_batch(
        spark, crawl["batches"]["batch-3"], str(index2), str(tmp_path / "o2"), CFG, keep="newest"
    )
    assert r2["counts"]["superseded_index_documents"] == 1  # nyt/2 replaced by its copy
    assert r2["counts"]["duplicates_of_index"] == 1  # the older archive copy of ars


OLD_DOCS_ORDER = (
    "doc",
    "id",
    "url",
    "fetch_time",
    "content_digest",
    "batch_id",
    "added_version",
    "text_hash",
    "text_len",
    "num_shingles",
    "shingles",
)


@pytest.mark.heavy
def test_an_index_of_the_earlier_layout_is_read_and_compacts_to_the_new_one(crawl, spark, tmp_path):
    """Segments written before layout 2 (files in the earlier column order, no
    layout or table sizes in the manifest) are read whole, give the same
    results, and compaction rewrites them in the current layout."""
    index = tmp_path / "index"
    shutil.copytree(crawl["index"], index)
    idx = CrawlIndex(spark, str(index))
    m = idx.current()
    for seg in m.segments:
        docs = idx.segment_path(seg["name"]) + "/docs"
        spark.read.parquet(docs).select(*OLD_DOCS_ORDER).write.parquet(docs + ".old")
        idx.fs.delete(docs)
        idx.fs.rename(docs + ".old", docs)
    manifest_file = index / "_manifests" / f"v{m.version:08d}.json"
    data = json.loads(manifest_file.read_text())
    for seg in data["segments"]:
        del seg["layout"], seg["tables"]
    manifest_file.write_text(json.dumps(data))
    (index / "_manifests" / f".v{m.version:08d}.json.crc").unlink(missing_ok=True)

    r = run_crawl_batch(spark, crawl["batches"]["batch-3"], str(index), str(tmp_path / "o"), CFG)
    assert r["lookup"]["document_table_read"] == {
        "keys": r["lookup"]["index_documents_looked_up"],
        "expected_read_fraction": 1.0,
        "how": "scan",
    }
    assert r["counts"]["duplicates_of_index"] == 1
    assert r["counts"]["superseded_index_documents"] == 1
    assert r["index"]["after"]["documents"] == 8 + 3 - 1
    result = compact(spark, str(index))
    seg = idx.current().segments[0]
    assert seg["layout"] == index_mod.LAYOUT and seg["docs"] == 10
    assert result["after"]["documents"] == 10
    assert idx.docs(idx.current()).columns == [f.name for f in index_mod.DOCS_SCHEMA.fields]


@pytest.mark.heavy
def test_a_run_that_dies_leaves_the_index_as_it_was(crawl, spark, tmp_path, clean_third):
    """The batch dies (a write error) in verification, in the index lookup, while
    writing its segment and at the manifest's exclusive create: each time the
    index keeps its bytes.  Then, over what the four runs left behind, the batch
    runs normally and ends as a run that never died."""
    import lsh_spark.crawl as crawl_mod
    import lsh_spark.index as index_mod

    index, out = tmp_path / "index", tmp_path / "out"
    shutil.copytree(crawl["index"], index)
    before = tree_digest(str(index))
    targets = {
        "stage_verify": (crawl_mod, "stage_verify"),
        "_lookup": (crawl_mod, "_lookup"),
        "write_segment": (index_mod.CrawlIndex, "write_segment"),
        "link": (os, "link"),  # the manifest's exclusive create on local disk
    }
    for where, target in targets.items():

        def die(*a, where=where, **k):
            raise OSError(errno.ENOSPC, "No space left on device: killed at " + where)

        with pytest.MonkeyPatch.context() as m:
            m.setattr(*target, die)
            with pytest.raises(OSError, match="killed at " + where):
                run_crawl_batch(spark, crawl["batches"]["batch-3"], str(index), str(out), CFG)
        assert tree_digest(str(index)) == before, where
    r = run_crawl_batch(spark, crawl["batches"]["batch-3"], str(index), str(out), CFG)
    assert r["status"] == "committed" and r["index"]["after"]["version"] == 3
    content, counts, kept = clean_third
    assert r["counts"] == counts and rows(spark, out / "deduped", "id") == kept
    assert index_content(spark, index) == content


@pytest.mark.heavy
def test_conflicting_commit_and_wrong_parameters_are_refused(crawl, spark, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(crawl["index"], index)
    idx = CrawlIndex(spark, str(index))
    stale = idx.load(1)
    with pytest.raises(IndexConflict, match="version 2 of .* committed by another run"):
        idx.commit(stale, type(stale)(version=2, params=stale.params))
    with pytest.raises(IndexError, match=r"--num-perm: got 64 but the index .* built with 128"):
        run_crawl_batch(
            spark,
            crawl["batches"]["batch-3"],
            str(index),
            str(tmp_path / "o"),
            DedupConfig(num_perm=64),
        )
    assert idx.current().version == 2


@pytest.mark.heavy
def test_compaction_keeps_the_content_and_lookups_work(third, spark, tmp_path, monkeypatch):
    index = tmp_path / "index"
    shutil.copytree(third["index"], index)
    idx = CrawlIndex(spark, str(index))
    cols = ("doc", "id", "url", "fetch_time", "batch_id", "added_version", "shingles")
    docs_before = sorted(
        tuple(map(str, (r[c] for c in cols))) for r in idx.docs(idx.current()).collect()
    )
    bands_before = sorted(
        tuple(r)
        for r in idx.bands(idx.current())
        .join(idx.docs(idx.current()).select("doc"), "doc", "left_semi")
        .collect()
    )
    result = compact(spark, str(index), retention_seconds=0)
    assert result["before"]["segments"] == 3 and result["after"]["segments"] == 1
    assert result["after"]["documents"] == result["before"]["documents"] == 10
    m = idx.current()
    assert m.version == 4 and m.batches == [] and m.batch_count == 3  # folded (ledger)
    assert (
        sorted(tuple(map(str, (r[c] for c in cols))) for r in idx.docs(m).collect()) == docs_before
    )
    assert sorted(tuple(r) for r in idx.bands(m).collect()) == bands_before
    assert os.listdir(index / "segments") == [m.segments[0]["name"]]
    assert m.segments[0]["layout"] == index_mod.LAYOUT
    assert m.segments[0]["tables"]["docs"]["row_groups"] >= 1
    # a later batch still finds copies of compacted documents, with its keys
    # pushed down to the Parquet reader (forced: a 10-document index is one row
    # group, which a scan reads as cheaply)
    monkeypatch.setattr(index_mod, "MAX_READ_FRACTION", 1.0)
    from crawlgen import page, write_warc

    b4 = tmp_path / "batch-4"
    write_warc(
        str(b4 / "x.warc.gz"),
        [
            dict(url="https://late.example/lwn", date=day(20), html=page("lwn-1")),
            dict(url="https://new.example/moz/2", date=day(20), html=page("mozilla-2")),
        ],
    )
    r = run_crawl_batch(spark, str(b4), str(index), str(tmp_path / "o4"), CFG)
    assert r["lookup"]["band_table_read"]["how"] == "row-group skipping"
    assert r["lookup"]["document_table_read"]["how"] == "row-group skipping"
    assert r["counts"]["duplicates_of_index"] == 1 and r["index"]["after"]["version"] == 5
    assert r["counts"]["new_documents"] == 1
    dup = spark.read.parquet(str(tmp_path / "o4" / "duplicates")).first()
    assert dup["duplicate_of_source"] == "index" and dup["jaccard"] >= CFG.threshold


@pytest.mark.heavy
def test_already_indexed_record_ids_are_rejected(crawl, spark, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(crawl["index"], index)
    r = run_crawl_batch(
        spark,
        crawl["batches"]["batch-2"],
        str(index),
        str(tmp_path / "o"),
        CFG,
        batch_id="batch-2-under-another-id",
    )
    assert r["counts"]["already_indexed"] == 3  # the three new pages of batch 2
    assert r["counts"]["new_documents"] == 0
    reasons = {
        row["reason"].split(":")[0]
        for row in spark.read.parquet(str(tmp_path / "o" / "rejects")).collect()
    }
    assert reasons == {"already_indexed"}


@pytest.mark.slow
def test_spark_submit_killed_mid_run_leaves_the_index_unchanged(crawl, spark, tmp_path):
    """SIGKILL the whole spark-submit process group once verification has
    written its pairs, then re-run the same batch to completion (in this
    process: what is tested is the state the kill left)."""
    index = tmp_path / "index"
    shutil.copytree(crawl["index"], index)
    before = tree_digest(str(index))
    out = tmp_path / "out"
    cmd, env = crawl_job(crawl["batches"]["batch-3"], index, out)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env
    )
    try:
        deadline = time.time() + 240
        killed = False
        while time.time() < deadline and proc.poll() is None:
            staged = [d for d in os.listdir(tmp_path) if d.startswith(".out.inprogress-")]
            if staged and os.path.exists(tmp_path / staged[0] / "pairs" / "_SUCCESS"):
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.1)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert killed, "the job ended before it could be killed between stages"
    assert tree_digest(str(index), skip=("_staging",)) == before
    assert not out.exists()
    r = run_crawl_batch(spark, crawl["batches"]["batch-3"], str(index), str(out), CFG)
    assert r["status"] == "committed" and r["index"]["after"]["version"] == 3


def index_content(spark, root) -> tuple:
    """What a reader of the index sees: version, live documents, batches."""
    idx = CrawlIndex(spark, str(root))
    m = idx.current()
    cols = ("id", "url", "batch_id", "added_version", "shingles")
    docs = sorted(tuple(str(r[c]) for c in cols) for r in idx.docs(m).collect())
    keys = ("batch_id", "version", "new_documents", "duplicates", "superseded_index_documents")
    return m.version, docs, sorted(tuple(b[k] for k in keys) for b in m.batches)


def run_child(cmd, env, log, timeout=600, until=None) -> subprocess.Popen:
    """Run ``cmd`` in its own process group, output to ``log``; with ``until``
    (a callable), return as soon as it is true, else wait for the end.  The
    caller kills the group in a finally (:func:`kill_child`)."""
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
    deadline = time.time() + timeout
    while proc.poll() is None and time.time() < deadline:
        if until is not None and until():
            return proc
        time.sleep(0.2)
    if until is not None and not until():
        kill_child(proc)
        raise AssertionError(f"the job never reached the hold: {log.read_text()[-3000:]}")
    return proc


def kill_child(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def summary_of(log) -> dict:
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith('{"batch_id"')]
    assert lines, text[-3000:]
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def clean_third(third, spark):
    """The index content and the output's counts and kept ids after batch 3 ran
    once, undisturbed."""
    kept = rows(spark, third["out"] / "deduped", "id")
    return index_content(spark, third["index"]), third["report"]["counts"], kept


@pytest.mark.slow
@pytest.mark.parametrize("step", ["index:before_manifest", "index:after_manifest"])
def test_sigkill_at_an_index_commit_step_then_a_rerun_ends_as_a_clean_run(
    crawl, spark, tmp_path, clean_third, step
):
    """SIGKILL the job after its output and segment are written and before its
    manifest, or after its manifest and before its output is marked committed:
    the index is at the old or the new version, the output is complete but says
    ``pending_index``, and a re-run ends as a clean run with a committed output."""
    index, out = tmp_path / "index", tmp_path / "out"
    shutil.copytree(crawl["index"], index)
    segments = set(os.listdir(index / "segments"))
    cmd, env = crawl_job(crawl["batches"]["batch-3"], index, out, fault=step)
    proc = run_child(cmd, env, tmp_path / "job.log")
    kill_child(proc)
    assert proc.returncode != 0
    assert json.loads((out / "report.json").read_text())["status"] == "pending_index"
    assert (out / "_SUCCESS").exists() and (out / "deduped").is_dir()
    versions = CrawlIndex(spark, str(index)).versions()
    orphans = set(os.listdir(index / "segments")) - segments
    assert len(orphans) == 1  # the killed run's segment, named by a manifest or not
    if step == "index:before_manifest":
        assert versions == [1, 2]
    else:
        assert versions == [1, 2, 3]
    r = run_crawl_batch(spark, crawl["batches"]["batch-3"], str(index), str(out), CFG)
    expected = "committed" if step == "index:before_manifest" else "already_applied"
    assert r["status"] == expected
    written = json.loads((out / "report.json").read_text())
    content, counts, kept = clean_third
    assert written["status"] == "committed" and written["counts"] == counts
    assert rows(spark, out / "deduped", "id") == kept
    assert index_content(spark, index) == content


@pytest.mark.slow
@pytest.mark.parametrize("rival", ["batch", "compaction"])
def test_a_batch_that_loses_the_race_runs_again_from_the_new_version(crawl, spark, tmp_path, rival):
    """Batch A (a child process) reads version 2 and is held just before its
    compare-and-swap while a rival, which also read version 2, commits version
    3: another batch holding a copy of one of A's pages, or a compaction.  A
    then loses, runs again from version 3 and commits version 4."""
    index, go = tmp_path / "index", tmp_path / "go"
    shutil.copytree(crawl["index"], index)
    segments = set(os.listdir(index / "segments"))
    cmd, env = crawl_job(
        crawl["batches"]["batch-3"], index, tmp_path / "out", f"index:before_manifest=wait:{go}"
    )
    log = tmp_path / "a.log"
    proc = run_child(cmd, env, log, until=lambda: os.path.exists(f"{go}.waiting"))
    try:
        held = set(os.listdir(index / "segments")) - segments  # A's segment, not committed
        assert len(held) == 1
        if rival == "batch":
            from crawlgen import page, write_warc

            b4 = tmp_path / "batch-4"
            copy = dict(url="https://copy.example/nyt-3", date=day(13), html=page("nytimes-3"))
            write_warc(str(b4 / "x.warc.gz"), [copy])
            r = run_crawl_batch(spark, str(b4), str(index), str(tmp_path / "o4"), CFG)
            assert r["status"] == "committed" and r["index"]["after"]["version"] == 3
        else:
            assert compact(spark, str(index))["after"]["version"] == 3
            assert held <= set(os.listdir(index / "segments"))  # in flight: kept
        go.touch()
        proc.wait(600)
    finally:
        kill_child(proc)
    assert proc.returncode == 0, log.read_text()[-3000:]
    a = summary_of(log)
    assert (a["status"], a["attempts"], a["index_version"]) == ("committed", 2, 4)
    idx = CrawlIndex(spark, str(index))
    m = idx.current()
    assert all(os.path.isdir(index / "segments" / s["name"]) for s in m.segments)
    assert not held & set(os.listdir(index / "segments"))  # A removed its first segment
    live = [(r["id"], r["url"]) for r in idx.docs(m).collect()]
    assert len(live) == len(set(live)) == 10  # none lost, none twice
    if rival == "batch":
        # A's re-run found B's copy and superseded it with its older page.
        assert a["superseded_index_documents"] == 2
        live_urls = {u for _, u in live}
        assert "https://news.example/nyt/3" in live_urls
        assert "https://copy.example/nyt-3" not in live_urls
        assert [b["version"] for b in m.batches] == [1, 2, 3, 4]


def test_cli_arguments_and_config_file(tmp_path, spark):
    from lsh_spark.cli import parse
    from lsh_spark.commands import crawl_parser
    from lsh_spark.config import ConfigError

    conf = tmp_path / "crawl.yaml"
    conf.write_text("keep: newest\nthreshold: 0.85\n")
    args, cfg = parse(
        crawl_parser(),
        ["--batch", "b", "--index", "i", "--output", "o", "--config", str(conf)],
    )
    assert args.keep == "newest" and cfg.threshold == 0.85
    args, _ = parse(
        crawl_parser(),
        [
            "--batch",
            "b",
            "--index",
            "i",
            "--output",
            "o",
            "--config",
            str(conf),
            "--keep",
            "oldest",
        ],
    )
    assert args.keep == "oldest"  # the command line wins
    with pytest.raises(SystemExit) as exc:
        parse(
            crawl_parser(),
            ["--batch", "b", "--index", "i", "--output", "o", "--keep", "min-id"],
        )
    assert exc.value.code == 2
    with pytest.raises(ConfigError, match="--batch: path does not exist"):
        run_crawl_batch(
            spark, str(tmp_path / "missing"), str(tmp_path / "i"), str(tmp_path / "o"), CFG
        )
    allowed = re.escape("--keep: got 'min-id'; allowed: oldest | newest")
    with pytest.raises(ConfigError, match=allowed):
        run_crawl_batch(
            spark, str(tmp_path), str(tmp_path / "i"), str(tmp_path / "o"), CFG, keep="min-id"
        )


WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()  # noqa: SIM905


def _small_batch(tmp_path, name: str, texts: dict[str, str]) -> str:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in texts.items()))
    return str(path)


def test_a_committed_output_without_its_report_keeps_its_datasets(spark, tmp_path):
    """A kill or power cut can leave a committed batch's datasets without report.json
    (HDFS's replace deletes the old file before it renames the new one).  The re-run
    finds the batch in the index: it must rebuild the report from the index and delete
    nothing (0.2.0 replaced the whole output with a report, losing deduped/)."""
    texts = {f"d{i}": " ".join(WORDS[i:] + WORDS[:i]) * 3 for i in range(4)}
    texts["d9"] = texts["d0"]
    batch = _small_batch(tmp_path, "b1", texts)
    out, index = tmp_path / "out", str(tmp_path / "index")
    first = run_crawl_batch(spark, batch, index, str(out), CFG, batch_id="b1")
    assert first["status"] == "committed"
    (out / "report.json").unlink()
    datasets = tree_digest(str(out))
    again = run_crawl_batch(spark, batch, index, str(out), CFG, batch_id="b1")
    assert again["status"] == "already_applied"
    after = tree_digest(str(out))
    assert {k: v for k, v in after.items() if k != "report.json"} == datasets
    rebuilt = json.loads((out / "report.json").read_text())
    assert rebuilt["status"] == "committed" and rebuilt["batch_id"] == "b1"
    assert rebuilt["counts"]["new_documents"] == first["counts"]["new_documents"] == 4
    assert rebuilt["counts"]["duplicates"] == 1
    assert sorted(r["id"] for r in spark.read.parquet(str(out / "deduped")).collect()) == [
        "d0", "d1", "d2", "d3"
    ]  # fmt: skip
    # A damaged report is not replaced blindly either: one line says what to do.
    (out / "report.json").write_text("{trunc")
    with pytest.raises(Exception, match=r"report.json is damaged \(not JSON\)"):
        run_crawl_batch(spark, batch, index, str(out), CFG, batch_id="b1")
    assert {k: v for k, v in tree_digest(str(out)).items() if k != "report.json"} == datasets
