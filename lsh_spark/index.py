"""The incremental crawl index: every document kept so far, as versioned Parquet.

Layout under ``--index DIR``::

    _manifests/v00000003.json     one file per committed version (the highest wins)
    segments/<name>/docs/         one row per kept document (Parquet, sorted by doc)
    segments/<name>/bands/        (bucket, doc): one row per LSH band (sorted by bucket)
    segments/<name>/removed/      (doc, id): earlier documents this segment supersedes
    _staging/                     segments being written (never read)

A batch adds one segment; ``jobs/index_compact.py`` rewrites all live segments
into one.  ``doc`` is XXH64 of the document id, an 8-byte join key: the band
table is two 64-bit columns per band (about 16 bytes x bands per document).  A
64-bit collision can only add a candidate, never lose one: candidates are
verified on their real ids and exact shingle sets.

**Reads in proportion to the batch.**  Each table of a segment is range
partitioned on its key (``docs`` on ``doc``, ``bands`` on ``bucket``), so every
file holds one key range, sorted, in small row groups (``DOCS_ROW_GROUP_BYTES``,
``BANDS_ROW_GROUP_BYTES``) whose min/max statistics are narrow; ``docs`` also
carries a Parquet bloom filter on ``doc``.  A lookup of K keys pushes them down
as equality predicates (:func:`any_of`), and the Parquet reader skips every row
group whose range (or bloom filter) holds none of them: it reads at most K row
groups per segment, however long the history.  The manifest records each
table's bytes and row groups, and :meth:`CrawlIndex.lookup` only pushes keys
down when the expected share of row groups read (``1 - exp(-K / G)`` per
segment) is at most ``MAX_READ_FRACTION``; beyond that a scan with a broadcast
semi-join is cheaper than planning thousands of predicates.

Commits are atomic and ordered.  A segment is written under ``_staging/``,
renamed into ``segments/`` and then made visible by writing the next manifest
version: the manifest is written to a hidden temporary file and renamed to
``v<N+1>.json`` only if no such version exists yet (Hadoop ``rename`` does not
replace an existing file on HDFS; on other file systems the check runs just
before the rename).  A run that dies before the rename leaves the committed
index exactly as it was; a writer that finds version ``N+1`` already taken
gets :class:`IndexConflict` and commits nothing.  Segments left behind by dead
runs are never read (no manifest names them); ``index_compact.py`` deletes
them.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.errors import LshSparkError
from lsh_spark.io import FileSystem

FORMAT_VERSION = 1
# Parameters that must match between an index and every batch added to it:
# they decide the shingle sets, the signatures and the band keys.
INDEX_PARAMS = ("threshold", "num_perm", "bands", "rows", "shingle", "k", "seed", "max_text_chars")
# Segment layout 2: tables range partitioned on their key (LAYOUT in the
# manifest's segment entries; segments without it are read whole).
LAYOUT = 2
# Row groups: about 200 documents' shingle sets, or about 4,000 band rows.  A
# lookup reads at most one row group per key and segment, so smaller groups read
# less; below these sizes per-group overheads (footer entries, read-ahead) grow.
DOCS_ROW_GROUP_BYTES = 256 << 10
BANDS_ROW_GROUP_BYTES = 64 << 10
# Bloom filter on docs.doc, per row group (Parquet rounds it to 2 KB).
DOCS_BLOOM_NDV = 1024
DOCS_BLOOM_FPP = 0.001
# Files of a segment: about this many bytes each.
SEGMENT_FILE_BYTES = 256 << 20
# Keys pushed down to Parquet: a search tree over IN lists of PUSHDOWN_CHUNK values.
# Spark 4.0 turns an IN list into a left-deep OR of equalities, which overflows
# a task thread's stack at about 1,000 values (measured), so lists are chunked.
PUSHDOWN_CHUNK = 128
MAX_PUSHDOWN_KEYS = 16_384
MAX_READ_FRACTION = 0.5
_MANIFEST = re.compile(r"^v(\d{8})\.json$")

# Column order is read order: a lookup reads doc..shingles in one run per row
# group, the already-indexed check reads doc, id, batch_id; the columns no lookup
# reads come last.
DOCS_SCHEMA = T.StructType(
    [
        T.StructField("doc", T.LongType(), False),
        T.StructField("id", T.StringType(), False),
        T.StructField("batch_id", T.StringType(), False),
        T.StructField("url", T.StringType(), True),
        T.StructField("fetch_time", T.TimestampType(), True),
        T.StructField("added_version", T.IntegerType(), False),
        T.StructField("text_len", T.IntegerType(), True),
        T.StructField("shingles", T.ArrayType(T.LongType(), True), True),
        T.StructField("content_digest", T.StringType(), True),
        T.StructField("text_hash", T.BinaryType(), True),
        T.StructField("num_shingles", T.IntegerType(), True),
    ]
)


class IndexError(ConfigError):  # noqa: A001 - a user-facing error of this module
    """The index cannot be used as asked (wrong parameters, damaged manifest)."""


class IndexConflict(LshSparkError, RuntimeError):
    """Another run committed a new index version while this one was running."""


def doc_key(id_col) -> Any:
    """The 64-bit join key of a document id (XXH64, Spark's ``xxhash64``)."""
    return F.xxhash64(id_col)


def index_params(cfg: DedupConfig) -> dict[str, Any]:
    d = cfg.to_dict()
    return {k: d[k] for k in INDEX_PARAMS}


@dataclass
class Manifest:
    version: int
    params: dict[str, Any]
    segments: list[dict[str, Any]] = field(default_factory=list)
    batches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def documents(self) -> int:
        return sum(s["docs"] - s.get("removed", 0) for s in self.segments)

    @property
    def bytes(self) -> int:
        return sum(s["bytes"] for s in self.segments)

    def batch(self, batch_id: str) -> dict[str, Any] | None:
        return next((b for b in self.batches if b["batch_id"] == batch_id), None)

    def to_json(self, parent: int | None) -> str:
        return (
            json.dumps(
                {
                    "format_version": FORMAT_VERSION,
                    "version": self.version,
                    "parent": parent,
                    "committed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "params": self.params,
                    "segments": self.segments,
                    "batches": self.batches,
                    "documents": self.documents,
                    "bytes": self.bytes,
                },
                indent=2,
                sort_keys=True,
            )
            + "\n"
        )


class CrawlIndex:
    """Reading and committing one index directory (any Hadoop file system)."""

    def __init__(self, spark: SparkSession, root: str):
        self.spark = spark
        self.fs = FileSystem(spark, root)
        self.root = self.fs.qualify(root).rstrip("/")

    # -- paths ------------------------------------------------------------
    def _manifest_path(self, version: int) -> str:
        return f"{self.root}/_manifests/v{version:08d}.json"

    def segment_path(self, name: str) -> str:
        return f"{self.root}/segments/{name}"

    def staging_path(self, name: str) -> str:
        return f"{self.root}/_staging/{name}"

    def new_segment_name(self, version: int) -> str:
        return f"v{version:08d}-{uuid.uuid4().hex[:12]}"

    # -- reading ------------------------------------------------------------
    def versions(self) -> list[int]:
        names = self.fs.list_names(f"{self.root}/_manifests")
        return sorted(int(m.group(1)) for m in map(_MANIFEST.match, names) if m)

    def current(self) -> Manifest | None:
        """The committed manifest with the highest version, or None for a new index."""
        if self.fs.exists(self.root) and not self.fs.is_dir(self.root):
            raise IndexError(f"--index: {self.root} is a file; allowed: a directory")
        versions = self.versions()
        return self.load(versions[-1]) if versions else None

    def load(self, version: int) -> Manifest:
        path = self._manifest_path(version)
        try:
            data = json.loads(self.fs.read_text(path))
        except ValueError as exc:
            raise IndexError(
                f"--index: manifest {path} is damaged ({exc}); restore it from a backup"
            ) from None
        if data.get("format_version") != FORMAT_VERSION:
            raise IndexError(
                f"--index: {path} has format_version "
                f"{data.get('format_version')!r}; this lsh-spark reads "
                f"{FORMAT_VERSION}"
            )
        return Manifest(
            version=int(data["version"]),
            params=data["params"],
            segments=data["segments"],
            batches=data["batches"],
        )

    def check_params(self, manifest: Manifest, cfg: DedupConfig) -> None:
        """Raise naming the first parameter where ``cfg`` differs from the index."""
        mine = index_params(cfg)
        for key in INDEX_PARAMS:
            if manifest.params.get(key) != mine[key]:
                raise IndexError(
                    f"--{key.replace('_', '-')}: got {mine[key]!r} but the index at "
                    f"{self.root} was built with {manifest.params.get(key)!r}; allowed: "
                    f"{manifest.params.get(key)!r} (an index holds one set of shingle, "
                    "MinHash and band parameters)"
                )

    def _read(self, manifest: Manifest, table: str) -> DataFrame | None:
        paths = [f"{self.segment_path(s['name'])}/{table}" for s in manifest.segments]
        # Page indexes are not read: a row group here is one page per column, and
        # reading a page index costs a seek and a buffer fill per row group.
        return (
            self.spark.read.option("parquet.filter.columnindex.enabled", "false").parquet(*paths)
            if paths
            else None
        )

    def removed(self, manifest: Manifest) -> DataFrame | None:
        if not any(s.get("removed", 0) for s in manifest.segments):
            return None
        return self._read(manifest, "removed")

    def docs(self, manifest: Manifest) -> DataFrame | None:
        """Live documents (superseded ones removed)."""
        docs = self._read(manifest, "docs")
        removed = self.removed(manifest)
        if docs is None or removed is None:
            return docs
        return docs.join(F.broadcast(removed.select("doc", "id")), ["doc", "id"], "left_anti")

    def bands(self, manifest: Manifest) -> DataFrame | None:
        """Band rows ``(bucket, doc)``; rows of superseded documents may remain (their
        documents are gone from :meth:`docs`, so a join through docs drops them)."""
        return self._read(manifest, "bands")

    def read_fraction(self, manifest: Manifest, table: str, n_keys: int) -> float:
        """Expected share of ``table``'s bytes that a lookup of ``n_keys`` random keys
        reads: ``1 - exp(-K/G)`` of each segment's G row groups (1 for a segment
        written before layout 2, whose files each span every key)."""
        total = read = 0.0
        for seg in manifest.segments:
            t = seg.get("tables", {}).get(table) if seg.get("layout") == LAYOUT else None
            if t is None:
                total += seg["bytes"]
                read += seg["bytes"]
                continue
            total += t["bytes"]
            read += t["bytes"] * -math.expm1(-n_keys / max(1, t["row_groups"]))
        return read / total if total else 0.0

    def lookup(
        self,
        manifest: Manifest,
        table: str,
        column: str,
        keys: DataFrame,
        n_keys: int,
        max_read_fraction: float | None = None,
    ) -> tuple[DataFrame, dict[str, Any]]:
        """Rows of ``table`` ("docs": live documents, or "bands") whose ``column`` is
        one of the ``n_keys`` values of one-column ``keys``, and how they were read.

        Up to ``MAX_PUSHDOWN_KEYS`` keys (collected: a bounded list), when the
        expected share read is at most ``max_read_fraction`` (default
        ``MAX_READ_FRACTION``), are pushed down to
        the Parquet reader (row groups skipped by statistics and bloom filters);
        otherwise the table is scanned and semi-joined with ``keys`` (broadcast
        by the caller when small).
        """
        if max_read_fraction is None:
            max_read_fraction = MAX_READ_FRACTION
        df = self.docs(manifest) if table == "docs" else self.bands(manifest)
        fraction = self.read_fraction(manifest, table, n_keys)
        facts = {"keys": n_keys, "expected_read_fraction": round(fraction, 4)}
        if n_keys <= MAX_PUSHDOWN_KEYS and fraction <= max_read_fraction:
            values = [row[0] for row in keys.collect()]
            conf = "spark.sql.parquet.pushdown.inFilterThreshold"
            if int(self.spark.conf.get(conf, "10")) < PUSHDOWN_CHUNK:
                self.spark.conf.set(conf, str(PUSHDOWN_CHUNK))
            return df.filter(any_of(column, values)), dict(facts, how="row-group skipping")
        return df.join(keys, column, "left_semi"), dict(facts, how="scan")

    # -- writing ------------------------------------------------------------
    def write_segment(
        self,
        name: str,
        docs: DataFrame,
        bands: DataFrame,
        removed: DataFrame,
        est_bytes: int,
        file_bytes: int = SEGMENT_FILE_BYTES,
    ) -> dict[str, Any]:
        """Write a segment under ``_staging/`` and describe it for the manifest.

        Both key tables are range partitioned into about ``est_bytes /
        file_bytes`` files, sorted by key within each, in small row
        groups (module docstring); the entry records each table's bytes, files
        and row groups, which :meth:`lookup` needs to choose how to read.
        """
        base = self.staging_path(name)
        n_files = max(1, -(-int(est_bytes) // file_bytes))
        docs = docs.select(*[F.col(f.name).cast(f.dataType) for f in DOCS_SCHEMA.fields])
        (
            docs.repartitionByRange(n_files, "doc")
            .sortWithinPartitions("doc")
            .write.mode("error")
            .option("parquet.block.size", str(DOCS_ROW_GROUP_BYTES))
            .option("parquet.bloom.filter.enabled#doc", "true")
            .option("parquet.bloom.filter.expected.ndv#doc", str(DOCS_BLOOM_NDV))
            .option("parquet.bloom.filter.fpp#doc", str(DOCS_BLOOM_FPP))
            .parquet(f"{base}/docs")
        )
        (
            bands.repartitionByRange(n_files, "bucket")
            .sortWithinPartitions("bucket")
            .write.mode("error")
            .option("parquet.block.size", str(BANDS_ROW_GROUP_BYTES))
            .option("parquet.writer.version", "v2")  # delta-encoded sorted buckets: -12%
            .parquet(f"{base}/bands")
        )
        removed.write.mode("error").parquet(f"{base}/removed")
        # Counts from the footers, which are read for the row groups anyway.
        tables, rows = {}, {}
        for table in ("docs", "bands", "removed"):
            files, groups, rows[table] = self.fs.parquet_row_groups(f"{base}/{table}")
            if table != "removed":
                tables[table] = {
                    "bytes": self.fs.size_bytes(f"{base}/{table}"),
                    "files": files,
                    "row_groups": groups,
                }
        return {
            "name": name,
            "docs": rows["docs"],
            "removed": rows["removed"],
            "bytes": self.fs.size_bytes(base),
            "layout": LAYOUT,
            "tables": tables,
        }

    def commit(self, parent: Manifest | None, new: Manifest, staged: list[str]) -> None:
        """Publish ``staged`` segments and manifest ``new`` (= parent version + 1).

        Raises :class:`IndexConflict` if the index moved on since ``parent``.
        """
        parent_version = parent.version if parent else 0
        assert new.version == parent_version + 1
        latest = self.versions()
        if (latest[-1] if latest else 0) != parent_version:
            self.discard(staged)
            raise IndexConflict(
                f"--index: {self.root} moved from version {parent_version} to "
                f"{latest[-1]} while this run was working (another batch or a compaction "
                "committed first); nothing was committed: run this batch again"
            )
        tmp = f"{self.root}/_manifests/.v{new.version:08d}.{uuid.uuid4().hex[:12]}.tmp"
        moved: list[str] = []
        committed = False
        try:
            for name in staged:
                self.fs.rename(self.staging_path(name), self.segment_path(name))
                moved.append(name)
            self.fs.write_text(tmp, new.to_json(parent.version if parent else None))
            committed = self.fs.rename_new(tmp, self._manifest_path(new.version))
        finally:
            if not committed:
                self.fs.delete(tmp)
                for name in moved:
                    self.fs.delete(self.segment_path(name))
        if not committed:
            raise IndexConflict(
                f"--index: version {new.version} of {self.root} was committed by another "
                "run at the same moment; nothing was committed: run this batch again"
            )

    def discard(self, staged: list[str]) -> None:
        for name in staged:
            self.fs.delete(self.staging_path(name))

    def garbage(self, manifest: Manifest) -> list[str]:
        """Segment and staging directories no committed version of ``manifest`` names."""
        live = {s["name"] for s in manifest.segments}
        dead = [
            f"{self.root}/segments/{n}"
            for n in self.fs.list_names(f"{self.root}/segments")
            if n not in live
        ]
        dead += [f"{self.root}/_staging/{n}" for n in self.fs.list_names(f"{self.root}/_staging")]
        return dead


def any_of(column: str, values: list) -> Any:
    """``column IN values`` (values sorted) in a form Spark pushes down to Parquet
    whole: a binary search tree of ``(column <= split AND left) OR (column > split
    AND right)`` over IN lists of at most ``PUSHDOWN_CHUNK`` values.  Parquet drops
    a row group as soon as its min/max rule out a subtree, and a row costs about
    two comparisons per level and one hash lookup, where one long IN list would
    overflow the stack (``PUSHDOWN_CHUNK``) and a flat OR of chunks would cost a
    hash lookup per chunk."""
    if not values:
        return F.lit(False)
    values = sorted(values)
    col = F.col(column)

    def tree(lo: int, hi: int):
        if hi - lo <= PUSHDOWN_CHUNK:
            return col.isin(values[lo:hi])
        mid = (lo + hi) // 2
        split = values[mid - 1]
        return ((col <= F.lit(split)) & tree(lo, mid)) | ((col > F.lit(split)) & tree(mid, hi))

    return tree(0, len(values))


def segment_entry(
    stats: dict[str, Any], version: int, batch_id: str | None, kind: str
) -> dict[str, Any]:
    return dict(stats, version_added=version, batch_id=batch_id, kind=kind)


def describe(manifest: Manifest | None) -> dict[str, Any]:
    """The report's figures for an index version."""
    if manifest is None:
        return {
            "version": 0,
            "documents": 0,
            "bytes": 0,
            "bytes_per_document": None,
            "segments": 0,
            "batches": 0,
        }
    docs = manifest.documents
    return {
        "version": manifest.version,
        "documents": docs,
        "bytes": manifest.bytes,
        "bytes_per_document": round(manifest.bytes / docs, 1) if docs else None,
        "segments": len(manifest.segments),
        "batches": len(manifest.batches),
    }


def compact(
    spark: SparkSession, root: str, target_file_bytes: int = SEGMENT_FILE_BYTES
) -> dict[str, Any]:
    """Rewrite the live index into one segment of files of about ``target_file_bytes``.

    The documents and band rows of live documents are unchanged (superseded
    documents and their band rows are dropped, as reads already did); the
    result is committed as the next version, then older manifests and the
    segment and staging directories no longer in use are deleted.
    """
    index = CrawlIndex(spark, root)
    manifest = index.current()
    if manifest is None:
        raise IndexError(f"--index: no index at {index.root} (no committed manifest)")
    before = describe(manifest)
    docs = index.docs(manifest)
    bands = index.bands(manifest).join(index.docs(manifest).select("doc"), "doc", "left_semi")
    removed = spark.createDataFrame([], "doc bigint, id string")
    name = index.new_segment_name(manifest.version + 1)
    try:
        stats = index.write_segment(name, docs, bands, removed, manifest.bytes, target_file_bytes)
        entry = segment_entry(stats, manifest.version + 1, None, "compacted")
        entry["compacted_from"] = [s["name"] for s in manifest.segments]
        new = Manifest(
            version=manifest.version + 1,
            params=manifest.params,
            segments=[entry],
            batches=manifest.batches,
        )
        index.commit(manifest, new, [name])
    except BaseException:
        index.discard([name])
        raise
    # Older manifests name segments that are deleted now; the batches they list
    # are carried in the new manifest.
    deleted = index.garbage(new) + [
        index._manifest_path(v) for v in index.versions() if v < new.version
    ]
    for path in deleted:
        index.fs.delete(path)
    files = len(
        [f for f in index.fs.list_files(index.segment_path(name)) if f.endswith(".parquet")]
    )
    return {
        "index_path": index.root,
        "before": before,
        "after": describe(new),
        "parquet_files_after": files,
        "deleted_directories": len(deleted),
    }
