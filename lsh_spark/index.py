"""The incremental crawl index: every document kept so far, as versioned Parquet.

Layout under ``--index DIR``::

    _manifests/v00000003.json     one file per committed version (the highest wins)
    segments/<name>/docs/         one row per kept document (Parquet, sorted by doc)
    segments/<name>/bands/        (bucket, doc): one row per LSH band (sorted by bucket)
    segments/<name>/removed/      (doc, id): earlier documents this segment supersedes
    _staging/                     segments being written (never read)

A batch adds one segment; ``jobs/index_compact.py`` rewrites all live segments
into one.  ``doc`` is XXH64 of the document id, an 8-byte join key: the band
table is two 64-bit columns per band (about 16 bytes x bands per document),
which is all a batch's lookup reads of the history besides the documents its
buckets touch.  A 64-bit collision can only add a candidate, never lose one:
candidates are verified on their real ids and exact shingle sets.

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
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.io import FileSystem

FORMAT_VERSION = 1
# Parameters that must match between an index and every batch added to it:
# they decide the shingle sets, the signatures and the band keys.
INDEX_PARAMS = ("threshold", "num_perm", "bands", "rows", "shingle", "k", "seed",
                "max_text_chars")
# Row groups of docs/ tables: about 800 documents' shingle sets each (see
# CrawlIndex.write_segment on what this does and does not save).
DOCS_ROW_GROUP_BYTES = 1 << 20
_MANIFEST = re.compile(r"^v(\d{8})\.json$")

DOCS_SCHEMA = T.StructType([
    T.StructField("doc", T.LongType(), False),
    T.StructField("id", T.StringType(), False),
    T.StructField("url", T.StringType(), True),
    T.StructField("fetch_time", T.TimestampType(), True),
    T.StructField("content_digest", T.StringType(), True),
    T.StructField("batch_id", T.StringType(), False),
    T.StructField("added_version", T.IntegerType(), False),
    T.StructField("text_hash", T.BinaryType(), True),
    T.StructField("text_len", T.IntegerType(), True),
    T.StructField("num_shingles", T.IntegerType(), True),
    T.StructField("shingles", T.ArrayType(T.LongType(), True), True),
])


class IndexError(ConfigError):  # noqa: A001 - a user-facing error of this module
    """The index cannot be used as asked (wrong parameters, damaged manifest)."""


class IndexConflict(RuntimeError):
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
        return json.dumps({
            "format_version": FORMAT_VERSION, "version": self.version, "parent": parent,
            "committed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "params": self.params, "segments": self.segments, "batches": self.batches,
            "documents": self.documents, "bytes": self.bytes,
        }, indent=2, sort_keys=True) + "\n"


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
            raise IndexError(f"--index: manifest {path} is damaged ({exc}); "
                             "restore it from a backup") from None
        if data.get("format_version") != FORMAT_VERSION:
            raise IndexError(f"--index: {path} has format_version "
                             f"{data.get('format_version')!r}; this lsh-spark reads "
                             f"{FORMAT_VERSION}")
        return Manifest(version=int(data["version"]), params=data["params"],
                        segments=data["segments"], batches=data["batches"])

    def check_params(self, manifest: Manifest, cfg: DedupConfig) -> None:
        """Raise naming the first parameter where ``cfg`` differs from the index."""
        mine = index_params(cfg)
        for key in INDEX_PARAMS:
            if manifest.params.get(key) != mine[key]:
                raise IndexError(
                    f"--{key.replace('_', '-')}: got {mine[key]!r} but the index at "
                    f"{self.root} was built with {manifest.params.get(key)!r}; allowed: "
                    f"{manifest.params.get(key)!r} (an index holds one set of shingle, "
                    "MinHash and band parameters)")

    def _read(self, manifest: Manifest, table: str) -> DataFrame | None:
        paths = [f"{self.segment_path(s['name'])}/{table}" for s in manifest.segments]
        return self.spark.read.parquet(*paths) if paths else None

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

    # -- writing ------------------------------------------------------------
    def write_segment(self, name: str, docs: DataFrame, bands: DataFrame,
                      removed: DataFrame, row_group_bytes: int) -> dict[str, Any]:
        """Write a segment under ``_staging/`` and describe it for the manifest.

        ``docs`` is sorted by ``doc`` within each file and written in small row
        groups (``row_group_bytes``) so that a lookup by a pushed-down
        ``doc IN (...)`` filter *could* skip the row groups whose ``doc`` range
        holds no key.  Measured with Spark 4.0.1 it does not (the README's
        results): every row group is read.
        """
        base = self.staging_path(name)
        docs = docs.select(*[F.col(f.name).cast(f.dataType) for f in DOCS_SCHEMA.fields])
        (docs.sortWithinPartitions("doc").write.mode("error")
         .option("parquet.block.size", str(row_group_bytes)).parquet(f"{base}/docs"))
        bands.sortWithinPartitions("bucket").write.mode("error").parquet(f"{base}/bands")
        removed.write.mode("error").parquet(f"{base}/removed")
        r = self.spark.read
        return {"name": name, "docs": r.parquet(f"{base}/docs").count(),
                "removed": r.parquet(f"{base}/removed").count(),
                "bytes": self.fs.size_bytes(base)}

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
                "committed first); nothing was committed: run this batch again")
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
                "run at the same moment; nothing was committed: run this batch again")

    def discard(self, staged: list[str]) -> None:
        for name in staged:
            self.fs.delete(self.staging_path(name))

    def garbage(self, manifest: Manifest) -> list[str]:
        """Segment and staging directories no committed version of ``manifest`` names."""
        live = {s["name"] for s in manifest.segments}
        dead = [f"{self.root}/segments/{n}" for n in self.fs.list_names(f"{self.root}/segments")
                if n not in live]
        dead += [f"{self.root}/_staging/{n}" for n in self.fs.list_names(f"{self.root}/_staging")]
        return dead


def segment_entry(stats: dict[str, Any], version: int, batch_id: str | None,
                  kind: str) -> dict[str, Any]:
    return dict(stats, version_added=version, batch_id=batch_id, kind=kind)


def describe(manifest: Manifest | None) -> dict[str, Any]:
    """The report's figures for an index version."""
    if manifest is None:
        return {"version": 0, "documents": 0, "bytes": 0, "bytes_per_document": None,
                "segments": 0, "batches": 0}
    docs = manifest.documents
    return {"version": manifest.version, "documents": docs, "bytes": manifest.bytes,
            "bytes_per_document": round(manifest.bytes / docs, 1) if docs else None,
            "segments": len(manifest.segments), "batches": len(manifest.batches)}


def compact(spark: SparkSession, root: str, target_file_bytes: int = 256 << 20,
            row_group_bytes: int = DOCS_ROW_GROUP_BYTES) -> dict[str, Any]:
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
    n_files = max(1, -(-manifest.bytes // target_file_bytes))
    docs = index.docs(manifest).repartitionByRange(n_files, "doc")
    bands = (index.bands(manifest).join(index.docs(manifest).select("doc"), "doc", "left_semi")
             .repartitionByRange(n_files, "bucket"))
    removed = spark.createDataFrame([], "doc bigint, id string")
    name = index.new_segment_name(manifest.version + 1)
    try:
        stats = index.write_segment(name, docs, bands, removed, row_group_bytes)
        entry = segment_entry(stats, manifest.version + 1, None, "compacted")
        entry["compacted_from"] = [s["name"] for s in manifest.segments]
        new = Manifest(version=manifest.version + 1, params=manifest.params, segments=[entry],
                       batches=manifest.batches)
        index.commit(manifest, new, [name])
    except BaseException:
        index.discard([name])
        raise
    # Older manifests name segments that are deleted now; the batches they list
    # are carried in the new manifest.
    deleted = index.garbage(new) + [index._manifest_path(v) for v in index.versions()
                                    if v < new.version]
    for path in deleted:
        index.fs.delete(path)
    files = len([f for f in index.fs.list_files(index.segment_path(name))
                 if f.endswith(".parquet")])
    return {"index_path": index.root, "before": before, "after": describe(new),
            "parquet_files_after": files, "deleted_directories": len(deleted)}
