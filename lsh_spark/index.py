"""The incremental crawl index: every document kept so far, as versioned Parquet.

Layout under ``--index DIR``::

    _manifests/v00000003.json     one file per committed version (the highest wins)
    segments/<name>/docs/         one row per kept document (Parquet, sorted by doc)
    segments/<name>/bands/        (bucket, doc): one row per LSH band (sorted by bucket)
    segments/<name>/removed/      (doc, id): earlier documents this segment supersedes
    segments/<name>/batches.jsonl a compacted segment: the batch ledger (below)

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

Commits are one compare-and-swap.  A segment is written by Spark straight to
its final, unique path ``segments/<name>/``, which no reader opens until a
manifest names it.  The next version is then published by one exclusive
create of ``_manifests/v<N+1>.json`` (:meth:`FileSystem.create_exclusive`: a
fsynced file hard-linked into place on local disk, a PUT with ``If-None-Match:
*`` on S3), which fails if another batch or a compaction created that version
first: the loser gets :class:`IndexConflict` and has changed nothing (a batch
then runs again from the new version, ``--max-retries``).  There is no rename
and no check-then-act anywhere in a commit.

**The batch ledger keeps manifests small.**  A manifest lists the batches
committed since the last compaction (``batches``, each with its counts: what
makes a re-run of a batch ``already_applied``).  Compaction folds every batch
known so far into ``batches.jsonl`` of the segment it writes (one JSON object a
line) and commits a manifest whose ``batches`` is empty and whose
``folded_batches`` says where they are (``{"segment", "count"}``); later
batches carry ``folded_batches`` forward and append to ``batches``.  A manifest
therefore holds at most the batches of one compaction period, and
:meth:`CrawlIndex.find_batch` looks in both.  The ledger's segment is always one
the manifest names (compaction writes both; batches keep both), so garbage
collection never takes it from a manifest.  A manifest with ``folded_batches``
has ``format_version`` 2: lsh-spark 0.2.0 reads only 1 and refuses it, where it
would otherwise miss the folded batches and apply a retried batch twice.

If the newest manifest cannot be read (empty or truncated after a power loss
on a store without fsync), :meth:`CrawlIndex.current` falls back to the newest
readable one and says so; the next commit takes the version after the damaged
one.  Nothing is deleted by a commit: :meth:`CrawlIndex.collect_garbage`, run
at the start of every batch and after every compaction, retires a manifest
only once the next readable version is older than the retention period (a run
still reading it has then run longer than that), and deletes a segment only
when no remaining manifest names it and its newest file is older than the
retention period, so a segment another writer is about to commit survives.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.config import RETENTION_HOURS, ConfigError, DedupConfig, recorded_tokens
from lsh_spark.errors import LshSparkError
from lsh_spark.faults import maybe_die
from lsh_spark.session import IN_FILTER_KEY, local_frame
from lsh_spark.store import FileSystem

log = logging.getLogger(__name__)

# format_version of a manifest without a batch ledger (what lsh-spark 0.2.0 reads
# and writes), and of one with ``folded_batches`` (0.2.0 refuses it: it would not
# see the folded batches).  This release reads both.
FORMAT_VERSION = 1
FOLDED_FORMAT_VERSION = 2
READ_FORMAT_VERSIONS = (FORMAT_VERSION, FOLDED_FORMAT_VERSION)
# The batch ledger of a compacted segment: segments/<name>/LEDGER.
LEDGER = "batches.jsonl"
# Parameters that must match between an index and every batch added to it:
# they decide the shingle sets, the signatures and the band keys.
# An index of lsh-spark 0.2.0 records no "tokens": its words were cut as "space".
INDEX_PARAMS = (
    "threshold",
    "num_perm",
    "bands",
    "rows",
    "shingle",
    "tokens",
    "k",
    "seed",
    "max_text_chars",
)
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
# A manifest's temporary file left by a writer killed mid-create.
_MANIFEST_TMP = re.compile(r"^\.v(\d{8})\.json\..*\.tmp$")

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


class DamagedManifest(IndexError):
    """A manifest file that is empty, truncated or not a manifest."""


class IndexConflict(LshSparkError, RuntimeError):
    """Another run committed a new index version while this one was running."""


def doc_key(id_col) -> Any:
    """The 64-bit join key of a document id (XXH64, Spark's ``xxhash64``)."""
    return F.xxhash64(id_col)


def index_params(cfg: DedupConfig) -> dict[str, Any]:
    d = cfg.to_dict()
    return {k: d[k] for k in INDEX_PARAMS}


def continued_config(manifest: Manifest, cfg: DedupConfig) -> DedupConfig:
    """``cfg`` for a batch added to the index of ``manifest``: unless ``--tokens``
    is given, the index's own tokens (an index of lsh-spark 0.2.0 goes on with
    its ``space`` words, so its documents and the batch's are shingled alike);
    a ``--tokens`` that differs is refused by :meth:`CrawlIndex.check_params`."""
    theirs = recorded_tokens(manifest.params)
    if cfg.tokens is not None or cfg.shingle != "word" or theirs == cfg.token_mode:
        return cfg
    log.info("the index records --tokens %s; this batch is shingled the same way", theirs)
    return DedupConfig(**{**cfg.flat(), "tokens": theirs})


@dataclass
class Manifest:
    """One index version: its live segments, and the batches it holds.

    ``batches`` lists the batches committed since the last compaction;
    ``folded_batches`` (``{"segment": name, "count": n}``, None before the first
    compaction) says how many earlier ones the ledger of segment ``name`` holds
    (module docstring; look a batch up with :meth:`CrawlIndex.find_batch`).
    """

    version: int
    params: dict[str, Any]
    segments: list[dict[str, Any]] = field(default_factory=list)
    batches: list[dict[str, Any]] = field(default_factory=list)
    folded_batches: dict[str, Any] | None = None

    @property
    def documents(self) -> int:
        return sum(s["docs"] - s.get("removed", 0) for s in self.segments)

    @property
    def bytes(self) -> int:
        return sum(s["bytes"] for s in self.segments)

    @property
    def batch_count(self) -> int:
        """Every batch the index holds: folded into the ledger, then listed."""
        folded = self.folded_batches["count"] if self.folded_batches else 0
        return folded + len(self.batches)

    @property
    def format_version(self) -> int:
        return FOLDED_FORMAT_VERSION if self.folded_batches else FORMAT_VERSION

    def segment_names(self) -> set[str]:
        """The segments this version needs: its live ones and its ledger's (one of
        them, see :meth:`to_json`; named here too, so that no garbage collection
        could take a ledger from a manifest)."""
        names = {s["name"] for s in self.segments}
        if self.folded_batches:
            names.add(self.folded_batches["segment"])
        return names

    def to_json(self, parent: int | None) -> str:
        if self.folded_batches and self.folded_batches["segment"] not in {
            s["name"] for s in self.segments
        }:
            # Compaction writes the ledger into the segment it commits and batches
            # keep both: a manifest whose ledger lies elsewhere is a bug, refused
            # before it is published.
            raise IndexError(
                f"--index: manifest version {self.version} points to the batch ledger "
                f"of segment {self.folded_batches['segment']}, which it does not name; "
                "nothing was committed"
            )
        data = {
            "format_version": self.format_version,
            "version": self.version,
            "parent": parent,
            "committed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "params": self.params,
            "segments": self.segments,
            "batches": self.batches,
            "documents": self.documents,
            "bytes": self.bytes,
        }
        if self.folded_batches:
            data["folded_batches"] = self.folded_batches
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


class CrawlIndex:
    """Reading and committing one index directory (any Hadoop file system)."""

    def __init__(self, spark: SparkSession, root: str):
        self.spark = spark
        self.fs = FileSystem(spark, root)
        self.root = self.fs.qualify(root).rstrip("/")
        # Set by current(): the highest version number present (readable or
        # not; the next commit creates head + 1) and the damaged ones skipped.
        self.head = 0
        self.skipped: list[dict[str, Any]] = []

    # -- paths ------------------------------------------------------------
    def _manifest_path(self, version: int) -> str:
        return f"{self.root}/_manifests/v{version:08d}.json"

    def segment_path(self, name: str) -> str:
        return f"{self.root}/segments/{name}"

    def new_segment_name(self, version: int) -> str:
        return f"v{version:08d}-{uuid.uuid4().hex[:12]}"

    # -- reading ------------------------------------------------------------
    def versions(self) -> list[int]:
        names = self.fs.list_names(f"{self.root}/_manifests")
        return sorted(int(m.group(1)) for m in map(_MANIFEST.match, names) if m)

    def current(self) -> Manifest | None:
        """The newest readable manifest, or None for a new index.

        A newer manifest that cannot be read (a power loss on a store that
        does not sync it) is skipped with a warning and listed in
        ``self.skipped``; the batches it recorded must be run again.
        """
        if self.fs.exists(self.root) and not self.fs.is_dir(self.root):
            raise IndexError(f"--index: {self.root} is a file; allowed: a directory")
        versions = self.versions()
        self.head = versions[-1] if versions else 0
        self.skipped = []
        for version in reversed(versions):
            try:
                return self.load(version)
            except DamagedManifest as exc:
                log.warning("%s; falling back to the previous version", exc)
                self.skipped.append({"version": version, "reason": str(exc)})
        if versions:
            raise IndexError(f"--index: no readable manifest in {self.root}/_manifests")
        return None

    def load(self, version: int) -> Manifest:
        path = self._manifest_path(version)
        try:
            data = json.loads(self.fs.read_text(path))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            raise DamagedManifest(f"--index: manifest {path} is damaged ({exc})") from None
        if data.get("format_version") not in READ_FORMAT_VERSIONS:
            raise IndexError(
                f"--index: {path} has format_version "
                f"{data.get('format_version')!r}; this lsh-spark reads "
                f"{' and '.join(map(str, READ_FORMAT_VERSIONS))}"
            )
        return Manifest(
            version=int(data["version"]),
            params=data["params"],
            segments=data["segments"],
            batches=data["batches"],
            folded_batches=data.get("folded_batches"),
        )

    def find_batch(self, manifest: Manifest, batch_id: str) -> dict[str, Any] | None:
        """The record of batch ``batch_id`` in ``manifest`` (its version, input,
        commit time and counts), or None if the index does not hold it.

        Looks in the manifest's ``batches``, then in the ledger of its
        ``folded_batches``; a ledger that cannot be read raises
        :class:`IndexError`, never "not applied" (that would apply the batch twice).
        """
        listed = next((b for b in manifest.batches if b["batch_id"] == batch_id), None)
        if listed is not None or not manifest.folded_batches:
            return listed
        return next((b for b in self.read_ledger(manifest) if b["batch_id"] == batch_id), None)

    def ledger_path(self, segment: str) -> str:
        return f"{self.segment_path(segment)}/{LEDGER}"

    def read_ledger(self, manifest: Manifest) -> list[dict[str, Any]]:
        """The batches folded into the ledger ``manifest`` points to (none without one).

        Raises :class:`IndexError` naming the file when it is missing, is not
        JSON lines, or holds another number of batches than the manifest says.
        """
        folded = manifest.folded_batches
        if not folded:
            return []
        path = self.ledger_path(folded["segment"])
        what = f"the batch ledger {path} of index version {manifest.version}"
        try:
            entries = [json.loads(line) for line in self.fs.read_text(path).splitlines()]
        except (OSError, ValueError) as exc:
            raise IndexError(f"--index: cannot read {what} ({exc})") from None
        if len(entries) != folded["count"] or not all(
            isinstance(e, dict) and "batch_id" in e for e in entries
        ):
            raise IndexError(
                f"--index: {what} holds {len(entries)} lines where the manifest says "
                f"{folded['count']} batches: it is damaged"
            )
        return entries

    def write_ledger(self, segment: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
        """Write ``entries`` as the batch ledger of ``segment`` (a new segment of this
        run); return the manifest's ``folded_batches`` for it."""
        text = "".join(json.dumps(e, sort_keys=True) + "\n" for e in entries)
        self.fs.write_bytes(self.ledger_path(segment), text.encode())
        return {"segment": segment, "count": len(entries)}

    def check_params(self, manifest: Manifest, cfg: DedupConfig) -> None:
        """Raise naming the first parameter where ``cfg`` differs from the index."""
        mine = index_params(cfg)
        theirs = {**manifest.params, "tokens": recorded_tokens(manifest.params)}
        for key in INDEX_PARAMS:
            if theirs.get(key) != mine[key]:
                hint = (
                    "leave --tokens out to continue it with its own, or start a new index"
                    if key == "tokens"
                    else "an index holds one set of shingle, MinHash and band parameters"
                )
                raise IndexError(
                    f"--{key.replace('_', '-')}: got {mine[key]!r} but the index at "
                    f"{self.root} was built with {theirs.get(key)!r}; allowed: "
                    f"{theirs.get(key)!r} ({hint})"
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
            if int(self.spark.conf.get(IN_FILTER_KEY, "10")) < PUSHDOWN_CHUNK:
                self.spark.conf.set(IN_FILTER_KEY, str(PUSHDOWN_CHUNK))
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
        """Write segment ``name`` (a new, unique name) and describe it for the manifest.

        Both key tables are range partitioned into about ``est_bytes /
        file_bytes`` files, sorted by key within each, in small row
        groups (module docstring); the entry records each table's bytes, files
        and row groups, which :meth:`lookup` needs to choose how to read.
        """
        base = self.segment_path(name)
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

    def commit(self, parent: Manifest | None, new: Manifest) -> None:
        """Publish manifest ``new`` (version ``head + 1``, built on ``parent``).

        One exclusive create of the manifest file: raises :class:`IndexConflict`,
        having changed nothing, if another run created that version first.  The
        segments it adds must exist and are synced first (:meth:`FileSystem.sync`):
        a manifest never names files that are missing or that a power cut can take
        back.
        """
        before = {s["name"] for s in parent.segments} if parent else set()
        added = [self.segment_path(s["name"]) for s in new.segments if s["name"] not in before]
        missing = [path for path in added if not self.fs.exists(path)]
        if missing:
            raise IndexError(
                f"--index: version {new.version} would name {missing[0]}, which does not "
                "exist; nothing was committed"
            )
        self.fs.sync(*added)
        maybe_die("index:before_manifest")
        text = new.to_json(parent.version if parent else None)
        path = self._manifest_path(new.version)
        if self.fs.create_exclusive(path, text.encode()):
            return
        # Refused.  An object-store client retries a PUT whose answer was lost, and
        # the retry is refused by the object the first attempt created: this run's
        # own.  What won is read, never guessed from the refusal.
        if self._holds(path, text):
            log.warning(
                "%s: the create was refused, but the manifest there is this run's own "
                "(an earlier attempt of the same request succeeded): committed",
                path,
            )
            return
        raise IndexConflict(
            f"--index: version {new.version} of {self.root} was committed by another "
            f"run (a batch or a compaction) after this one read version "
            f"{parent.version if parent else 0}; nothing was committed"
        )

    def _holds(self, path: str, text: str) -> bool:
        """Whether the manifest at ``path`` is ``text`` (unreadable: it is not)."""
        try:
            return json.loads(self.fs.read_text(path)) == json.loads(text)
        except (OSError, ValueError):
            return False

    def named_segments(self) -> set[str]:
        """The segments that any readable manifest of the index names (with their
        ledgers': :meth:`Manifest.segment_names`)."""
        named: set[str] = set()
        for version in self.versions():
            try:
                named.update(self.load(version).segment_names())
            except (IndexError, OSError):  # damaged or gone: it names nothing readable
                continue
        return named

    def discard(self, names: list[str]) -> None:
        """Delete segments of this run that no manifest names.

        Every delete of a segment by a writer goes through here and is checked
        against the manifests first: a commit whose outcome was ambiguous may have
        published the segment, and then it is the index's, never deleted.
        """
        named = self.named_segments()
        for name in names:
            if name in named:
                log.warning("segment %s is named by a manifest of %s: kept", name, self.root)
                continue
            self.fs.delete(self.segment_path(name))

    def collect_garbage(self, retention_seconds: float, retire_manifests: bool) -> list[str]:
        """Delete what no reader needs any more; return the deleted paths.

        Always: manifest temporary files of versions already decided (at most
        ``head``) and, from older layouts, ``_staging/`` entries older than
        ``retention_seconds``.  With ``retire_manifests`` (every batch, at its
        start, and compaction): the manifests :meth:`_retired_manifests` names,
        then every segment no remaining manifest names (as a live segment or as
        its ledger's) whose newest file is older than ``retention_seconds``.
        Never the newest readable manifest, nor a segment it or any other
        remaining manifest names; ``head`` is left as it was (a batch commits
        ``head + 1`` of the version it read).
        """
        cutoff_ms = (time.time() - retention_seconds) * 1000
        manifests = f"{self.root}/_manifests"
        dead = [
            f"{manifests}/{n}"
            for n in self.fs.list_names(manifests)
            if (m := _MANIFEST_TMP.match(n)) and int(m.group(1)) <= self.head
        ]
        if retire_manifests:
            dead += self._retired_manifests(cutoff_ms)
        for path in dead:
            self.fs.delete(path)
        staging = f"{self.root}/_staging"
        candidates = [f"{staging}/{n}" for n in self.fs.list_names(staging)]
        if retire_manifests:
            # Listed again after the retirement: a manifest committed meanwhile
            # names its parent's segments (kept: its parent is the newest readable
            # or younger than that) and a new, young segment (kept by age).
            live: set[str] = set()
            for version in self.versions():
                try:
                    live.update(self.load(version).segment_names())
                except (DamagedManifest, FileNotFoundError):
                    continue  # damaged, or retired by another run meanwhile: names nothing
            candidates += [
                self.segment_path(n)
                for n in self.fs.list_names(f"{self.root}/segments")
                if n not in live
            ]
        for path in candidates:
            mtimes = [t for _, _, t in self.fs.fingerprint(path)]
            # A directory with no file yet may be a writer's that just started.
            if mtimes and max(mtimes) <= cutoff_ms:
                self.fs.delete(path)
                dead.append(path)
        return dead

    def _retired_manifests(self, cutoff_ms: float) -> list[str]:
        """Manifests below the newest readable version whose successor, the next
        readable version, was written before ``cutoff_ms``.

        A run reads the newest readable manifest, so a manifest is read only
        until its readable successor appears; a run still reading it started
        before that, and has run longer than the retention period once the
        successor is older than that.  The manifest a running batch read is
        therefore never retired by construction (its successor is younger than
        the retention period, or it has none) unless the batch outruns the
        retention period; then its Spark job fails and it commits nothing.  A
        damaged manifest is no successor: no run ever read it instead.  Nothing
        here moves ``head`` (:meth:`current` is not called).
        """
        found = sorted(
            (int(m.group(1)), t)
            for name, _, t in self.fs.fingerprint(f"{self.root}/_manifests")
            if (m := _MANIFEST.match(name.rsplit("/", 1)[-1]))
        )
        readable = set()
        for version, _ in found:
            try:
                self.load(version)
            except (DamagedManifest, FileNotFoundError):
                continue
            readable.add(version)
        if not readable:
            return []
        newest, retired, successor = max(readable), [], None
        for version, mtime in reversed(found):
            if version < newest and successor is not None and successor <= cutoff_ms:
                retired.append(self._manifest_path(version))
            if version in readable:
                successor = mtime
        return sorted(retired)


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
        "batches": manifest.batch_count,
    }


def compact(
    spark: SparkSession,
    root: str,
    target_file_bytes: int = SEGMENT_FILE_BYTES,
    retention_seconds: float = RETENTION_HOURS * 3600,
) -> dict[str, Any]:
    """Rewrite the live index into one segment of files of about ``target_file_bytes``.

    The documents and band rows of live documents are unchanged (superseded
    documents and their band rows are dropped, as reads already did), and every
    batch the index holds is folded into the new segment's ledger (module
    docstring), leaving the new manifest's ``batches`` empty; the result is
    committed as the next version through the same compare-and-swap as a batch
    (a batch that committed first makes this raise :class:`IndexConflict`),
    then :meth:`CrawlIndex.collect_garbage` deletes manifests and segments older
    than ``retention_seconds`` that no reader needs.
    """
    index = CrawlIndex(spark, root)
    manifest = index.current()
    if manifest is None:
        raise IndexError(f"--index: no index at {index.root} (no committed manifest)")
    before = describe(manifest)
    docs = index.docs(manifest)
    bands = index.bands(manifest).join(index.docs(manifest).select("doc"), "doc", "left_semi")
    removed = local_frame(spark, [], "doc bigint, id string")
    version = index.head + 1
    name = index.new_segment_name(version)
    try:
        stats = index.write_segment(name, docs, bands, removed, manifest.bytes, target_file_bytes)
        entry = segment_entry(stats, version, None, "compacted")
        entry["compacted_from"] = [s["name"] for s in manifest.segments]
        # Every batch known so far (the previous ledger's, then the listed ones)
        # goes into the new segment's ledger: the previous ledger's segment is
        # not named once this commits.  An unreadable ledger stops the compaction.
        known = index.read_ledger(manifest) + manifest.batches
        folded = index.write_ledger(name, known) if known else None
        new = Manifest(
            version=version,
            params=manifest.params,
            segments=[entry],
            batches=[],
            folded_batches=folded,
        )
        index.commit(manifest, new)
    except BaseException:
        index.discard([name])
        raise
    deleted = index.collect_garbage(retention_seconds, retire_manifests=True)
    files = len(
        [f for f in index.fs.list_files(index.segment_path(name)) if f.endswith(".parquet")]
    )
    return {
        "index_path": index.root,
        "before": before,
        "after": describe(new),
        "parquet_files_after": files,
        "deleted_directories": len(deleted),
        "damaged_manifests_skipped": index.skipped,
    }
