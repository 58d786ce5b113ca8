"""The crawl index's commit on its own: the manifest compare-and-swap (local disk
and an S3 API server on 127.0.0.1), failures inside it, the fall-back past a
damaged manifest and what garbage collection may delete.  The batch-level
faults (SIGKILL at each step, two writers at once) are in test_crawl.py."""

from __future__ import annotations

import errno
import logging
import os
import threading
import time

import pytest

from lsh_spark import faults
from lsh_spark import index as index_mod
from lsh_spark.config import DedupConfig
from lsh_spark.index import CrawlIndex, IndexConflict, Manifest, index_params
from lsh_spark.store import FileSystem

PARAMS = index_params(DedupConfig())
DAY_S = 86_400


def manifest(version: int, *segments: str) -> Manifest:
    entries = [{"name": n, "docs": 1, "bytes": 1} for n in segments]
    return Manifest(version, PARAMS, segments=entries)


def made(idx: CrawlIndex, version: int, *segments: str) -> Manifest:
    """:func:`manifest` of segments that exist in ``idx`` (a marker file each):
    a commit syncs the segments it adds, and refuses to name one that is missing."""
    for name in segments:
        marker = f"{idx.segment_path(name)}/docs/_SUCCESS"
        if not idx.fs.exists(marker):
            idx.fs.write_bytes(marker, b"")
    return manifest(version, *segments)


def race(n: int, fn) -> list:
    """Run ``fn(i)`` in ``n`` threads released together; results or exceptions."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def run(i):
        barrier.wait()
        try:
            results[i] = fn(i)
        except Exception as exc:  # the outcome under test
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def held_together(monkeypatch, n: int) -> list[str]:
    """Hold every writer at ``index:before_manifest`` (inside the commit, its parent
    version read, its create not yet sent) until all ``n`` are there, so the race is
    proven to happen: writers that ran one after the other would break the barrier
    (each then gets ``BrokenBarrierError``).  Returns the arrivals, one per writer."""
    inside = threading.Barrier(n, timeout=60)
    arrived: list[str] = []
    real = faults.maybe_die  # the hook itself, however often this is called

    def hold(step: str) -> None:
        if step == "index:before_manifest":
            arrived.append(threading.current_thread().name)
            inside.wait()
        real(step)

    monkeypatch.setattr(index_mod, "maybe_die", hold)
    return arrived


def test_exclusive_create_has_one_winner_and_leaves_no_temporary_file(spark, tmp_path):
    fs = FileSystem(spark, str(tmp_path))
    path = f"{tmp_path}/m/v00000001.json"
    won = race(8, lambda i: fs.create_exclusive(path, f"writer {i}".encode()))
    assert sorted(won) == [False] * 7 + [True]
    assert (tmp_path / "m" / "v00000001.json").read_text() == f"writer {won.index(True)}"
    assert os.listdir(tmp_path / "m") == ["v00000001.json"]


def test_concurrent_commits_from_one_version_one_wins_the_rest_conflict(
    spark, tmp_path, monkeypatch
):
    idx = CrawlIndex(spark, str(tmp_path / "index"))
    idx.commit(None, made(idx, 1, "a"))
    parent = idx.current()
    arrived = held_together(monkeypatch, 4)
    out = race(4, lambda i: idx.commit(parent, made(idx, 2, "a", f"seg-{i}")))
    assert len(set(arrived)) == 4  # all four were inside the commit at once
    winners = [i for i, r in enumerate(out) if r is None]
    assert len(winners) == 1
    assert all(isinstance(r, IndexConflict) for r in out if r is not None)
    assert [s["name"] for s in idx.current().segments] == ["a", f"seg-{winners[0]}"]


def test_a_link_that_fails_leaves_the_index_at_the_old_version(spark, tmp_path, monkeypatch):
    idx = CrawlIndex(spark, str(tmp_path / "index"))
    idx.commit(None, made(idx, 1, "a"))

    def no_space(*a):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "link", no_space)
    with pytest.raises(OSError, match="No space left"):
        idx.commit(idx.current(), made(idx, 2, "a", "b"))
    monkeypatch.undo()
    assert idx.current().version == 1
    assert os.listdir(tmp_path / "index" / "_manifests") == ["v00000001.json"]
    idx.commit(idx.current(), made(idx, 2, "a", "b"))
    assert idx.current().version == 2


def test_a_damaged_newest_manifest_falls_back_with_a_warning(spark, tmp_path, caplog):
    idx = CrawlIndex(spark, str(tmp_path / "index"))
    idx.commit(None, made(idx, 1, "a"))
    (tmp_path / "index" / "_manifests" / "v00000002.json").write_text("")  # power loss
    with caplog.at_level(logging.WARNING, logger="lsh_spark.index"):
        m = idx.current()
    assert m.version == 1 and idx.head == 2
    assert [s["version"] for s in idx.skipped] == [2]
    assert "v00000002.json is damaged" in caplog.text
    with pytest.raises(IndexConflict):  # version 2 is taken, even damaged
        idx.commit(m, made(idx, 2, "a", "b"))
    idx.commit(m, made(idx, idx.head + 1, "a", "b"))
    assert idx.current().version == 3 and idx.skipped == []


def _age(path, seconds: float) -> None:
    """Set the modification time of ``path`` and every file below it."""
    t = time.time() - seconds
    for d, _, files in os.walk(path):
        for f in files:
            os.utime(os.path.join(d, f), (t, t))
    if os.path.isfile(path):
        os.utime(path, (t, t))


def test_garbage_collection_keeps_what_a_reader_or_writer_may_need(spark, tmp_path):
    root = tmp_path / "index"
    idx = CrawlIndex(spark, str(root))
    for seg in ("a", "b", "c", "dead", "young"):
        (root / "segments" / seg / "docs").mkdir(parents=True)
        (root / "segments" / seg / "docs" / "part-0.parquet").write_bytes(b"x")
    (root / "segments" / "starting" / "_temporary").mkdir(parents=True)  # no file yet
    idx.commit(None, made(idx, 1, "a"))
    idx.commit(idx.current(), made(idx, 2, "a", "b"))
    idx.commit(idx.current(), made(idx, 3, "b"))  # e.g. a compaction
    idx.commit(idx.current(), made(idx, 4, "b", "c"))  # a batch after it
    (root / "_manifests" / ".v00000004.json.0123abcd.tmp").write_text("{")  # killed writer
    (root / "_staging" / "old-layout").mkdir(parents=True)
    (root / "_staging" / "old-layout" / "part-0.parquet").write_bytes(b"x")
    for path in ("segments/a", "segments/b", "segments/c", "segments/dead", "_staging"):
        _age(root / path, 4 * DAY_S)
    for v in (1, 2, 3):
        _age(root / "_manifests" / f"v0000000{v}.json", (5 - v) * DAY_S)
    idx.current()
    deleted = idx.collect_garbage(3 * DAY_S - 3600, retire_manifests=True)
    # v1 is retired (its successor v2 is older than the retention), v2 is not
    # (v3 is younger); no retained manifest names "dead", which is old.
    assert sorted(os.path.relpath(p.split(":", 1)[1], root) for p in deleted) == [
        "_manifests/.v00000004.json.0123abcd.tmp",
        "_manifests/v00000001.json",
        "_staging/old-layout",
        "segments/dead",
    ]
    # "a" (named by v2, kept for readers of v2), "c" (named only by the newer
    # v4), "young" (a writer's segment not committed yet) and "starting" stay.
    assert sorted(os.listdir(root / "segments")) == ["a", "b", "c", "starting", "young"]
    idx.collect_garbage(0, retire_manifests=True)
    assert sorted(os.listdir(root / "segments")) == ["b", "c", "starting"]
    assert os.listdir(root / "_manifests") == ["v00000004.json"]


# -- S3: an S3 API server (moto) on 127.0.0.1 -------------------------------------
@pytest.mark.s3
def test_the_s3_server_refuses_a_second_conditional_put(s3):
    from botocore.exceptions import ClientError

    s3.put_object(Bucket="lsh-index", Key="k", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket="lsh-index", Key="k", Body=b"2", IfNoneMatch="*")
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3.get_object(Bucket="lsh-index", Key="k")["Body"].read() == b"1"


@pytest.mark.s3
def test_s3_commits_from_two_writers_at_once_one_wins_each_round(s3, spark, monkeypatch):
    idx = CrawlIndex(spark, "s3a://lsh-index/crawl")
    assert idx.current() is None
    idx.commit(None, made(idx, 1, "seed"))
    for version in range(2, 6):
        parent = idx.current()
        arrived = held_together(monkeypatch, 2)
        out = race(2, lambda i, p=parent, v=version: idx.commit(p, made(idx, v, f"w{i}-{v}")))
        assert len(set(arrived)) == 2  # both writers were inside the commit at once
        assert sum(r is None for r in out) == 1, out
        assert sum(isinstance(r, IndexConflict) for r in out) == 1
        winner = out.index(None)
        assert [s["name"] for s in idx.current().segments] == [f"w{winner}-{version}"]
    listed = s3.list_objects_v2(Bucket="lsh-index")["Contents"]
    keys = [o["Key"] for o in listed if not o["Key"].endswith("/")]  # not directory markers
    manifests = [f"crawl/_manifests/v0000000{v}.json" for v in range(1, 6)]
    assert [k for k in keys if "/segments/" not in k] == manifests  # nothing else written


@pytest.mark.s3
def test_an_s3_manifest_put_whose_answer_is_lost_commits_and_keeps_its_segment(s3, spark):
    """The conditional PUT of version 2 succeeds at the server, its answer is lost,
    botocore retries and the retry is refused (412): the object is this writer's
    own.  The commit must read what won and succeed, and the segment it names must
    survive the writer's clean-up (which deleted it before)."""
    from servers import LosingProxy

    upstream = spark.conf.get("spark.hadoop.fs.s3a.endpoint")
    idx = CrawlIndex(spark, "s3a://lsh-index/crawl")
    idx.commit(None, made(idx, 1, "seed"))
    s3.put_object(Bucket="lsh-index", Key="crawl/segments/mine/docs/part-0.parquet", Body=b"x")
    proxy = LosingProxy(
        upstream,
        lambda method, path, headers: (
            method == "PUT"
            and path.endswith("_manifests/v00000002.json")
            and headers.get("If-None-Match") == "*"
        ),
    )
    spark.conf.set("spark.hadoop.fs.s3a.endpoint", proxy.endpoint)
    try:
        idx = CrawlIndex(spark, "s3a://lsh-index/crawl")
        parent = idx.current()
        idx.commit(parent, manifest(2, "seed", "mine"))  # no IndexConflict
        idx.discard(["mine"])  # what a writer's clean-up would do after a failure
    finally:
        spark.conf.set("spark.hadoop.fs.s3a.endpoint", upstream)
        proxy.close()
    # The fault happened: the first PUT was applied and its answer lost, the retry refused.
    puts = [(status, lost) for m, p, status, lost in proxy.log if m == "PUT" and "v00000002" in p]
    assert puts == [(200, True), (412, False)]
    assert [s["name"] for s in CrawlIndex(spark, "s3a://lsh-index/crawl").current().segments] == [
        "seed",
        "mine",
    ]
    kept = s3.list_objects_v2(Bucket="lsh-index", Prefix="crawl/segments/mine/")
    assert [o["Key"] for o in kept.get("Contents", [])] == [
        "crawl/segments/mine/docs/part-0.parquet"
    ]


def test_discard_keeps_a_segment_that_a_manifest_names_and_deletes_the_others(spark, tmp_path):
    idx = CrawlIndex(spark, str(tmp_path / "index"))
    idx.commit(None, made(idx, 1, "named"))
    for name in ("named", "orphan"):
        (tmp_path / "index" / "segments" / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / "index" / "segments" / name / "part-0.parquet").write_bytes(b"x")
    idx.discard(["named", "orphan"])
    assert sorted(os.listdir(tmp_path / "index" / "segments")) == ["named"]
