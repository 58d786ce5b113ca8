"""The index's layout: range-partitioned segments whose row groups a lookup skips.

A segment is written with tiny row groups and files (module constants patched)
so that a few thousand synthetic documents span many of both; lookups are
checked against a plain scan, and the bytes they read (Hadoop FileSystem
statistics) against the table's size.
"""

from __future__ import annotations

import glob
import os

import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from lsh_spark import index as index_mod
from lsh_spark.config import DedupConfig
from lsh_spark.index import CrawlIndex, Manifest, any_of, index_params, segment_entry

N_DOCS = 3000


def bytes_read(spark) -> int:
    fs = spark.sparkContext._jvm.org.apache.hadoop.fs.FileSystem
    return sum(int(s.getBytesRead()) for s in fs.getAllStatistics())


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setattr(index_mod, "DOCS_ROW_GROUP_BYTES", 16 << 10)
    mp.setattr(index_mod, "BANDS_ROW_GROUP_BYTES", 4 << 10)
    root = str(tmp_path_factory.mktemp("layout") / "index")
    index = CrawlIndex(spark, root)
    ids = spark.range(N_DOCS).select(F.format_string("doc-%05d", "id").alias("id"))
    docs = ids.select(
        index_mod.doc_key(F.col("id")).alias("doc"),
        "id",
        F.concat(F.lit("https://example.org/"), "id").alias("url"),
        F.lit(None).cast("timestamp").alias("fetch_time"),
        F.lit(None).cast("string").alias("content_digest"),
        F.lit("b-1").alias("batch_id"),
        F.lit(1).alias("added_version"),
        F.lit(None).cast("binary").alias("text_hash"),
        F.lit(100).alias("text_len"),
        F.lit(40).alias("num_shingles"),
        F.transform(F.sequence(F.lit(1), F.lit(40)), lambda i: F.xxhash64(F.col("id"), i)).alias(
            "shingles"
        ),
    )
    bands = ids.select(F.explode(F.sequence(F.lit(0), F.lit(3))).alias("band"), "id").select(
        F.xxhash64("band", "id").alias("bucket"), index_mod.doc_key(F.col("id")).alias("doc")
    )
    removed = spark.createDataFrame([], "doc bigint, id string")
    name = index.new_segment_name(1)
    # About 1 MB of documents in files of 256 KB: 4 files.
    stats = index.write_segment(name, docs, bands, removed, 1 << 20, file_bytes=256 << 10)
    manifest = Manifest(
        version=1,
        params=index_params(DedupConfig()),
        segments=[segment_entry(stats, 1, "b-1", "batch")],
    )
    index.commit(None, manifest)
    mp.undo()
    return index, index.current(), stats


def _stats(path: str, column: str) -> list[list[tuple[int, int]]]:
    """Per Parquet file, the (min, max) of ``column`` in each row group."""
    out = []
    for f in sorted(glob.glob(os.path.join(path, "*.parquet"))):
        md = pq.ParquetFile(f).metadata
        col = [md.row_group(0).column(i).path_in_schema for i in range(md.num_columns)].index(
            column
        )
        out.append(
            [
                (
                    md.row_group(g).column(col).statistics.min,
                    md.row_group(g).column(col).statistics.max,
                )
                for g in range(md.num_row_groups)
            ]
        )
    return out


def test_each_file_holds_one_sorted_key_range(built):
    index, manifest, stats = built
    seg = index.segment_path(stats["name"]).removeprefix("file:")
    assert stats["layout"] == index_mod.LAYOUT
    for table, column in (("docs", "doc"), ("bands", "bucket")):
        files = _stats(f"{seg}/{table}", column)
        t = stats["tables"][table]
        assert t["files"] == len(files) >= 3
        assert t["row_groups"] == sum(map(len, files)) >= 4 * t["files"]
        groups = sorted(g for f in files for g in f)
        # Row groups, across all files, cover disjoint key ranges in order.
        for (lo, hi), (nlo, _) in zip(groups, groups[1:], strict=False):
            assert lo <= hi < nlo
    assert index.docs(manifest).count() == N_DOCS


def test_pushdown_lookup_returns_what_a_scan_returns(built, spark):
    index, manifest, _ = built
    all_docs = index.docs(manifest).select("doc", "id")
    keys = sorted(r["doc"] for r in all_docs.sample(0.1, seed=1).collect())
    assert len(keys) > 2 * index_mod.PUSHDOWN_CHUNK  # several chunks of the OR
    absent = [1, 2, 3]  # keys that match nothing
    key_df = spark.createDataFrame([(k,) for k in keys + absent], "doc bigint")
    found, facts = index.lookup(
        manifest, "docs", "doc", key_df, len(keys) + 3, max_read_fraction=1.0
    )
    assert facts["how"] == "row-group skipping"
    scan = all_docs.join(key_df, "doc", "left_semi")
    assert sorted(map(tuple, found.select("doc", "id").collect())) == sorted(
        map(tuple, scan.collect())
    )
    assert found.count() == len(keys)


def test_a_lookup_of_few_keys_reads_few_row_groups(built, spark):
    index, manifest, stats = built
    docs_bytes = stats["tables"]["docs"]["bytes"]
    keys = [r["doc"] for r in index.docs(manifest).select("doc").limit(3).collect()]
    key_df = spark.createDataFrame([(k,) for k in keys], "doc bigint")
    found, facts = index.lookup(manifest, "docs", "doc", key_df, 3)
    assert facts["how"] == "row-group skipping"
    assert facts["expected_read_fraction"] < 0.1
    before = bytes_read(spark)
    assert sorted(r["doc"] for r in found.select("doc", "shingles").collect()) == sorted(keys)
    pushed = bytes_read(spark) - before
    # Against the table's size, not a plain semi join's reads: Spark 4.0 reads the whole
    # table for the join, 4.3 prunes row groups with the join's keys by itself.
    assert 0 < pushed < 0.3 * docs_bytes, (pushed, docs_bytes)


def test_many_keys_fall_back_to_a_scan_and_old_segments_count_as_whole(built, spark):
    index, manifest, stats = built
    groups = stats["tables"]["bands"]["row_groups"]
    key_df = spark.createDataFrame([(i,) for i in range(3 * groups)], "bucket bigint")
    _, facts = index.lookup(manifest, "bands", "bucket", key_df, 3 * groups)
    assert facts["how"] == "scan" and facts["expected_read_fraction"] > 0.9
    old = dict(manifest.segments[0])
    old.pop("layout")
    mixed = Manifest(version=1, params=manifest.params, segments=[old])
    assert index.read_fraction(mixed, "docs", 1) == 1.0
    assert index.read_fraction(manifest, "docs", 1) < 0.05


def test_any_of_is_in_for_every_chunking(spark):
    df = spark.range(1000).withColumnRenamed("id", "k")
    for values in ([], [5], list(range(0, 1000, 3)), list(range(0, 1000, 7))):
        got = sorted(r["k"] for r in df.filter(any_of("k", values)).collect())
        assert got == values
