"""Reading corpora and writing results: the I/O edge of the pipeline.

Readers return one DataFrame with the user's columns plus ``id`` (the user's id
column, or a derived deterministic id) and ``reject_reason`` (non-null for
records that could not be parsed or lack an id), so that every input record
can be accounted for in ``clusters/`` or ``rejects/``.

Spark reads and writes the data; :class:`FileSystem` (``pyarrow.fs``, on the
driver) checks paths, lists files and writes markers, manifests and JSON.
:class:`StagedOutput` commits a whole output so that a crash at any point leaves
the old or the new one (:func:`recover_output` finishes what a killed commit
left); :class:`StagewiseOutput` swaps the stage jobs' datasets in one by one.
docs/outputs.md says what each store guarantees.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import re
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.errors import LshSparkError
from lsh_spark.faults import maybe_die

log = logging.getLogger(__name__)

CORRUPT = "_corrupt_record"
_EXTENSIONS = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".csv": "csv",
    ".tsv": "csv",
    ".txt": "text",
    ".text": "text",
    ".warc": "warc",
    ".wet": "warc",
}
_COMPRESSION = (".gz", ".bz2", ".zst", ".lz4", ".snappy", ".deflate", ".xz")
_ID_TYPES = (T.StringType, T.IntegerType, T.LongType, T.ShortType, T.ByteType)


class InputError(LshSparkError, ValueError):
    """The input cannot be processed at all (missing, wrong layout, duplicate ids)."""


# -- file system helpers ----------------------------------------------------
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_S3_SCHEMES = ("s3", "s3a", "s3n")
# Schemes reached through fsspec: (fsspec protocol, the package that implements it).
_FSSPEC_SCHEMES = {
    "gs": ("gcs", "gcsfs"),
    "gcs": ("gcs", "gcsfs"),
    "abfs": ("abfs", "adlfs"),
    "abfss": ("abfs", "adlfs"),
    "dbfs": ("dbfs", "requests"),
}
# Stores without an atomic directory rename: outputs are committed in place there.
OBJECT_STORE_SCHEMES = (*_S3_SCHEMES, *_FSSPEC_SCHEMES)
SUPPORTED_SCHEMES = "local paths, file:, hdfs://, s3://, s3a://, s3n://, gs://, abfss://, dbfs:/"


def _split(path: str) -> tuple[str, str, str]:
    """``(scheme, authority, path)`` of a path or URI, as Hadoop's ``Path`` parses
    them: ``hdfs://nn:8020/a`` gives ``("hdfs", "nn:8020", "/a")``, ``/a`` and
    ``a`` give ``("", "", ...)``, ``//a`` (no scheme) is local ``/a``."""
    m = _SCHEME.match(path)
    scheme, rest = (m.group(1).lower(), path[m.end() :]) if m else ("", path)
    authority = ""
    if scheme and rest.startswith("//"):
        authority, _, rest = rest[2:].partition("/")
        rest = "/" + rest
    return scheme, authority, rest


def _normalized(path: str) -> str:
    """An absolute path without ``.``, ``..``, doubled or trailing slashes;
    a relative one is taken from the working directory."""
    path = posixpath.normpath(posixpath.join(os.getcwd(), path))
    return "/" + path.lstrip("/")


def _fsspec_fs(scheme: str, authority: str, path: str) -> pafs.FileSystem:
    """The fsspec file system of ``scheme`` (GCS, Azure, DBFS) wrapped for pyarrow.

    Credentials come from the environment, as each fsspec package documents;
    ``abfss://container@account.dfs.core.windows.net/`` names the account.
    """
    protocol, package = _FSSPEC_SCHEMES[scheme]
    kwargs = {}
    if protocol == "abfs" and "@" in authority:
        kwargs["account_name"] = authority.split("@", 1)[1].split(".", 1)[0]
    if protocol == "dbfs":
        if not os.environ.get("DATABRICKS_HOST"):
            raise ConfigError(
                f"{path}: dbfs:/ paths need the driver's /dbfs mount (on Databricks) or "
                "DATABRICKS_HOST and DATABRICKS_TOKEN set"
            )
        kwargs = {
            "instance": os.environ["DATABRICKS_HOST"],
            "token": os.environ.get("DATABRICKS_TOKEN"),
        }
    try:
        import fsspec

        fs = fsspec.filesystem(protocol, **kwargs)
    except ImportError:
        raise ConfigError(
            f"{path}: {scheme}: paths need the Python package {package!r} on the driver; "
            "install it with: pip install 'lsh-spark[cloud]'"
        ) from None
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs))


def _arrow_fs(scheme: str, authority: str, path: str, endpoint: str | None) -> pafs.FileSystem:
    """The pyarrow file system of URIs with ``scheme`` and ``authority``; S3 at
    ``endpoint`` (:func:`s3_endpoint`) where one is configured."""
    if scheme in ("", "file"):
        return pafs.LocalFileSystem()
    if scheme == "dbfs" and os.path.isdir("/dbfs"):
        return pafs.LocalFileSystem()  # a Databricks driver mounts DBFS at /dbfs
    if scheme in _FSSPEC_SCHEMES:
        return _fsspec_fs(scheme, authority, path)
    if scheme in _S3_SCHEMES:
        # An S3-compatible store (MinIO, ...) configured for Spark's S3A connector.
        if endpoint:
            http = endpoint.startswith("http://")
            return pafs.S3FileSystem(
                endpoint_override=endpoint.split("://")[-1], scheme="http" if http else "https"
            )
        return pafs.FileSystem.from_uri(f"s3://{authority}/")[0]
    if scheme == "hdfs":
        try:
            return pafs.FileSystem.from_uri(f"hdfs://{authority or 'default'}/")[0]
        except OSError as exc:
            raise OSError(
                f"cannot open HDFS for {path} ({exc}); the driver needs libhdfs "
                "(ARROW_LIBHDFS_DIR) and Hadoop's jars (CLASSPATH=$(hadoop "
                "classpath --glob))"
            ) from None
    raise ConfigError(
        f"{path}: file system {scheme!r} is not supported; supported: {SUPPORTED_SCHEMES}"
    )


class FileSystem:
    """The file system of ``path`` (local, HDFS, S3), through ``pyarrow.fs`` on the
    driver: existence checks, listings, markers, manifests, JSON and renames.
    The data itself is read and written by Spark.

    Methods take paths on the same file system as ``path``, as plain paths or
    URIs; they name files by :meth:`qualify`'s strings (``file:/abs/path``,
    ``hdfs://nn:8020/path``, ``s3a://bucket/key``).  Plain paths are local files
    (on a cluster whose default file system is HDFS, pass ``hdfs://`` URIs).
    """

    def __init__(self, spark: SparkSession, path: str):
        self._scheme, self._authority, _ = _split(path)
        if self._scheme == "":
            self._scheme = "file"
        self._local = self._scheme == "file"
        s3 = self._scheme in _S3_SCHEMES
        self._s3_endpoint = s3_endpoint(spark) if s3 else None
        self._fs = _arrow_fs(self._scheme, self._authority, path, self._s3_endpoint)
        # dbfs:/ through the driver's /dbfs mount, or a bucket (container) first.
        self._root = "/dbfs" if self._scheme == "dbfs" and not self._fsspec else ""
        self._bucketed = self._scheme in OBJECT_STORE_SCHEMES and self._scheme != "dbfs"

    @property
    def _fsspec(self) -> bool:
        return isinstance(self._fs, pafs.PyFileSystem)

    @property
    def object_store(self) -> bool:
        """Whether this is an object store, where a directory has no atomic rename."""
        return self._scheme in OBJECT_STORE_SCHEMES

    def _p(self, path: str) -> str:
        """``path`` as pyarrow names it on this file system."""
        scheme, authority, rest = _split(path)
        if (scheme or "file", authority) != (self._scheme, self._authority):
            raise ValueError(
                f"{path} is not on the file system of {self._scheme}://{self._authority}"
            )
        rest = _normalized(rest)
        if self._bucketed:  # abfss://container@account.../key is container/key
            return f"{authority.split('@', 1)[0]}{rest}".rstrip("/")
        return self._root + rest

    def qualify(self, path: str) -> str:
        """``path`` in full: ``file:/abs/path`` for a local one (Hadoop's form, which
        Spark's ``_metadata.file_path`` uses), ``scheme://authority/path`` otherwise."""
        rest = _normalized(_split(path)[2])
        if self._local:
            return "file:" + rest
        return f"{self._scheme}://{self._authority}{rest}"

    def _info(self, path: str) -> pafs.FileInfo:
        return self._fs.get_file_info(self._p(path))

    def _checksum(self, name: str) -> bool:
        """Whether ``name`` is a checksum file Hadoop's local file system writes beside
        each file (``.part-0.parquet.crc``): Hadoop leaves them out of listings and sizes."""
        return self._local and name.startswith(".") and name.endswith(".crc")

    def _files(self, path: str) -> list[tuple[str, pafs.FileInfo]]:
        """``(qualified name, info)`` of every file below ``path`` (or of the file)."""
        info = self._info(path)
        if info.type != pafs.FileType.Directory:
            return [(self.qualify(path), info)] if info.type == pafs.FileType.File else []
        root, base = self.qualify(path), self._p(path)
        found = self._fs.get_file_info(pafs.FileSelector(base, recursive=True))
        return [
            (root + "/" + f.path[len(base) :].lstrip("/"), f)
            for f in found
            if f.type == pafs.FileType.File and not self._checksum(f.base_name)
        ]

    def exists(self, path: str) -> bool:
        return self._info(path).type != pafs.FileType.NotFound

    def is_dir(self, path: str) -> bool:
        return self._info(path).type == pafs.FileType.Directory

    def fingerprint(self, path: str) -> tuple:
        """``(name, length, modification time in ms)`` of every data file below
        ``path`` (recursively), skipping hidden and ``_`` files, sorted by name."""
        return tuple(
            sorted(
                (name, f.size, (f.mtime_ns or 0) // 1_000_000)
                for name, f in self._files(path)
                if not posixpath.basename(name).startswith((".", "_"))
            )
        )

    def list_names(self, path: str) -> list[str]:
        """Names of the direct children of directory ``path`` (empty if it is absent)."""
        info = self._info(path)
        if info.type != pafs.FileType.Directory:
            return [info.base_name] if info.type == pafs.FileType.File else []
        found = self._fs.get_file_info(pafs.FileSelector(self._p(path)))
        return sorted(f.base_name for f in found if not self._checksum(f.base_name))

    def list_files(self, path: str) -> list[str]:
        """Data files below ``path`` (recursively), skipping hidden and ``_`` files."""
        return [name for name, _, _ in self.fingerprint(path)]

    def parquet_row_groups(self, path: str) -> tuple[int, int, int]:
        """``(files, row groups, rows)`` of the Parquet files below ``path``, from
        their footers."""
        files = groups = rows = 0
        for name in self.list_files(path):
            if name.endswith(".parquet"):
                with self._fs.open_input_file(self._p(name)) as fh:
                    meta = pq.read_metadata(fh)
                files, groups, rows = files + 1, groups + meta.num_row_groups, rows + meta.num_rows
        return files, groups, rows

    def size_bytes(self, path: str) -> int:
        """Total length of the files below ``path`` (or of the file itself)."""
        return sum(f.size for _, f in self._files(path))

    def delete(self, path: str) -> None:
        """Delete the file or directory ``path`` (nothing if it is absent)."""
        info = self._info(path)
        if info.type == pafs.FileType.Directory:
            self._fs.delete_dir(self._p(path))
        elif info.type == pafs.FileType.File:
            self._fs.delete_file(self._p(path))
            self._drop_checksum(path)

    def _drop_checksum(self, path: str) -> None:
        """Remove the checksum file Hadoop wrote beside local file ``path`` (a file
        an older lsh-spark wrote), which would not match a new content."""
        if self._local:
            parent, name = posixpath.split(self._p(path))
            crc = f"{parent}/.{name}.crc"
            if self._fs.get_file_info(crc).type == pafs.FileType.File:
                self._fs.delete_file(crc)

    def rename(self, src: str, dst: str) -> None:
        """Move file or directory ``src`` to ``dst``, creating ``dst``'s parent.

        A rename on local disks and HDFS (atomic).  S3 has no rename: a
        directory is copied file by file, its ``_SUCCESS`` marker last, then
        deleted.
        """
        self._fs.create_dir(posixpath.dirname(self._p(dst)), recursive=True)
        try:
            if self._scheme in _S3_SCHEMES and self.is_dir(src):
                self._copy_tree(src, dst)
            else:
                self._fs.move(self._p(src), self._p(dst))
        except OSError as exc:
            raise OSError(f"could not rename {src} to {dst}: {exc}") from None

    def _copy_tree(self, src: str, dst: str) -> None:
        base, target = self._p(src), self._p(dst)
        found = self._fs.get_file_info(pafs.FileSelector(base, recursive=True))
        files = sorted(
            (f.path for f in found if f.type == pafs.FileType.File),
            key=lambda p: posixpath.basename(p) == "_SUCCESS",
        )
        for name in files:
            self._fs.copy_file(name, target + name[len(base) :])
        self._fs.delete_dir(base)

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def write_bytes(self, path: str, data: bytes) -> None:
        """Write ``data`` to file ``path`` (replacing it), creating its parent."""
        self._fs.create_dir(posixpath.dirname(self._p(path)), recursive=True)
        self._drop_checksum(path)
        with self._fs.open_output_stream(self._p(path)) as out:
            out.write(data)

    def replace_text(self, path: str, text: str) -> None:
        """Replace file ``path`` whole, so a reader sees the old or the new text: a
        temporary file renamed over it (local disks, HDFS), one PUT on object stores."""
        if self.object_store:
            self.write_text(path, text)
            return
        parent, name = posixpath.split(path)
        tmp = f"{parent}/.{name}.{uuid.uuid4().hex[:12]}.tmp"
        self.write_text(tmp, text)
        self._drop_checksum(path)
        self._fs.move(self._p(tmp), self._p(path))

    def read_text(self, path: str) -> str:
        return self.read_bytes(path).decode("utf-8")

    def read_bytes(self, path: str) -> bytes:
        with self._fs.open_input_file(self._p(path)) as fh:
            return fh.read()

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create file ``path`` holding ``data`` in one step that fails if it exists.

        Returns False, changing nothing, if ``path`` exists.  This is the
        compare-and-swap of the crawl index's manifests (docs/crawl.md):

        - local disk: ``data`` is written to a hidden temporary file and
          fsynced, then hard-linked to ``path`` (``link`` fails if ``path``
          exists) and the directory is fsynced, so the file is complete and
          durable before it is visible;
        - S3: a PUT with ``If-None-Match: *`` (boto3, extra ``lsh-spark[s3]``);
        - GCS and Azure (fsspec): ``pipe_file(mode="create")``, which gcsfs sends
          with ``ifGenerationMatch=0`` and adlfs as an upload without overwrite;
        - HDFS and the /dbfs mount: no exclusive create, so the check runs just
          before the write and two writers at the same moment can both succeed;
          a warning says so.
        """
        target = self._p(path)
        self._fs.create_dir(posixpath.dirname(target), recursive=True)
        if self._local:
            return _link_new(target, data)
        if self._scheme in _S3_SCHEMES:
            return _put_if_absent(self._s3_endpoint, target, data)
        if self._fsspec:
            try:
                self._fs.handler.fs.pipe_file(target, data, mode="create")
            except FileExistsError:
                return False
            return True
        log.warning(
            "%s: %s has no exclusive create here (libhdfs, the /dbfs mount); the check "
            "before the write is not atomic, so run one writer at a time",
            path,
            self._scheme,
        )
        if self.exists(path):
            return False
        self.write_bytes(path, data)
        return True


def _link_new(path: str, data: bytes) -> bool:
    """Local :meth:`FileSystem.create_exclusive`: fsynced temporary file, ``link``."""
    parent, name = os.path.split(path)
    tmp = f"{parent}/.{name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        fd = os.open(parent, os.O_RDONLY)
        try:
            os.fsync(fd)  # the new directory entry survives a power loss
        finally:
            os.close(fd)
        return True
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _put_if_absent(endpoint: str | None, path: str, data: bytes) -> bool:
    """S3 :meth:`FileSystem.create_exclusive`: PUT with ``If-None-Match: *``."""
    try:
        import boto3
        from botocore.exceptions import ClientError
    except ImportError:
        raise ConfigError(
            f"{path}: the index's conditional PUT on S3 needs boto3; install lsh-spark[s3]"
        ) from None
    if endpoint and "://" not in endpoint:
        endpoint = "https://" + endpoint
    # A session per call: boto3's default session is not safe across threads.
    client = boto3.session.Session().client("s3", endpoint_url=endpoint or None)
    bucket, _, key = path.partition("/")
    for attempt in range(5):
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status == 412:  # the object exists: another writer won
                return False
            # 409: a conditional write of the same key is in flight; S3 asks to retry.
            if status != 409 or attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    return False


# -- reading ------------------------------------------------------------------
def detect_format(files: list[str]) -> str:
    """Format from the file extensions (``.gz`` and other codecs are looked through)."""
    found = set()
    for name in files:
        base = posixpath.basename(name).lower()
        for codec in _COMPRESSION:
            if base.endswith(codec):
                base = base[: -len(codec)]
                break
        ext = posixpath.splitext(base)[1]
        if ext not in _EXTENSIONS:
            raise ConfigError(
                f"--format: cannot tell the format of {name!r} from its extension; "
                "allowed: jsonl | parquet | csv | text | warc (pass --format)"
            )
        found.add(_EXTENSIONS[ext])
    if len(found) != 1:
        raise ConfigError(
            f"--format: input mixes formats {sorted(found)}; pass --format or split the input"
        )
    return found.pop()


def s3_endpoint(spark: SparkSession) -> str | None:
    """The S3-compatible endpoint Spark's S3A connector is configured with, if any."""
    return spark.conf.get("spark.hadoop.fs.s3a.endpoint", None)


def open_input(name: str, endpoint: str | None = None) -> pa.NativeFile:
    """Open file ``name`` (as :meth:`FileSystem.qualify` names it) for reading,
    seekable, through ``pyarrow.fs``; on the driver or in a Python worker, which
    has no session: S3 takes the ``endpoint`` of :func:`s3_endpoint`."""
    scheme, authority, rest = _split(name)
    if scheme not in ("", "file", "hdfs", *_S3_SCHEMES):
        raise ConfigError(
            f"{name}: file system {scheme!r} is not supported; supported: {SUPPORTED_SCHEMES}"
        )
    fs = _arrow_fs(scheme, authority, name, endpoint)
    return fs.open_input_file(authority + rest if scheme in _S3_SCHEMES else rest)


def _check_parquet_footers(spark: SparkSession, files: list[str]) -> None:
    """Raise :class:`InputError` naming the first Parquet file whose footer
    cannot be read, before any job: Spark would fail halfway through the run.
    Reads one footer per file (a few KB each), several at a time."""
    endpoint = s3_endpoint(spark)

    def problem(name: str) -> str | None:
        try:
            with open_input(name, endpoint) as fh:
                pq.read_metadata(fh)
        except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
            return f"{name}: {' '.join(str(exc).split())[:200]}"
        return None

    with ThreadPoolExecutor(max_workers=16) as pool:
        bad = next(filter(None, pool.map(problem, files)), None)
    if bad:
        raise InputError(f"--input: cannot read the Parquet footer of {bad}")


def input_files(spark: SparkSession, path: str, flag: str = "--input") -> list[str]:
    """The data files of ``path``; a :class:`ConfigError` naming ``flag`` if it is
    missing or holds none (an empty batch folder), before any job."""
    fs = FileSystem(spark, path)
    if not fs.exists(path):
        raise ConfigError(f"{flag}: path does not exist: {path}")
    files = fs.list_files(path) if fs.is_dir(path) else [fs.qualify(path)]
    if not files:
        raise ConfigError(f"{flag}: no data files under {path}")
    return files


# Inferred JSON schemas by input path and file listing (names, sizes, times):
# inference is a full pass over the input, and one run reads it in several stages.
_JSON_SCHEMAS: dict[tuple, T.StructType] = {}


def _json_key(spark: SparkSession, path: str) -> tuple:
    return (path, FileSystem(spark, path).fingerprint(path))


# Longest JSON string Spark's parser accepts.  Jackson's own default (20M
# characters) would make a long but valid document an unparseable record that
# loses its id; the line reader holds the whole line anyway, so the string is
# parsed and the document rejected by ``max_text_chars`` under its own id.
JSON_MAX_STRING_CHARS = 2**31 - 1


def _json_reader(spark: SparkSession, schema: T.StructType | None = None):
    reader = spark.read if schema is None else spark.read.schema(schema)
    return (
        reader.option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .option("recursiveFileLookup", "true")
        .option("maxStringLen", str(JSON_MAX_STRING_CHARS))
    )


def _infer_json(spark: SparkSession, path: str) -> T.StructType:
    # Spark refuses queries on raw JSON that touch only the corrupt column;
    # reading with the inferred schema (corrupt column included) lifts that.
    return _with_corrupt(_json_reader(spark).json(path).schema)


def _with_corrupt(struct: T.StructType) -> T.StructType:
    """``struct`` with the string column that holds unparseable records."""
    if CORRUPT in struct.names:
        return struct
    return T.StructType([*struct.fields, T.StructField(CORRUPT, T.StringType(), True)])


def given_schema(ddl: str) -> T.StructType:
    """The input's columns from ``--schema`` (a Spark DDL string), with the
    column that holds unparseable records.  Spark parses the string (no job)."""
    allowed = "allowed: a Spark DDL string of columns, such as 'id STRING, text STRING'"
    try:
        struct = T.StructType.fromDDL(ddl)
    except Exception as exc:  # Spark's parser: ParseException, or an RPC error over Connect
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"--schema: cannot parse {ddl!r} ({reason}); {allowed}") from None
    if not isinstance(struct, T.StructType) or not struct.fields:
        raise ConfigError(f"--schema: got {ddl!r}, which names no columns; {allowed}")
    return _with_corrupt(struct)


def _read_jsonl(spark: SparkSession, path: str, schema: str | None = None) -> DataFrame:
    """JSON Lines with the columns of ``schema`` (``--schema``), or else the
    schema Spark infers from the whole input (once per input listing in this
    process): a pass over all of it that ``--schema`` saves."""
    if schema is not None:
        return _json_reader(spark, given_schema(schema)).json(path)
    key = _json_key(spark, path)
    if key not in _JSON_SCHEMAS:
        _JSON_SCHEMAS[key] = _infer_json(spark, path)
    return _json_reader(spark, _JSON_SCHEMAS[key]).json(path)


def _read_csv(spark: SparkSession, path: str, sep: str, given: str | None = None) -> DataFrame:
    """CSV with a header: every column a string, or the columns of ``given``
    (``--schema``, matched to the header's by position)."""
    reader = (
        spark.read.option("header", "true")
        .option("multiLine", "true")
        .option("escape", '"')
        .option("sep", sep)
        .option("recursiveFileLookup", "true")
    )
    if given is not None:
        schema = given_schema(given)
    else:
        header = reader.csv(path).schema
        schema = _with_corrupt(
            T.StructType([T.StructField(f.name, T.StringType(), True) for f in header])
        )
    return (
        reader.schema(schema)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .csv(path)
    )


def _derived_id(spark_df: DataFrame, key: Column) -> DataFrame:
    """Add a deterministic string ``id`` from ``key`` (content + file), unique per row.

    Rows whose key collides are byte-identical records of the same file; they are
    numbered ``#1, #2, ...`` in key order, which is the same on every run.
    """
    base = F.concat(F.lit("d"), F.lpad(F.hex(F.xxhash64(key)), 16, "0"))
    df = spark_df.withColumn("_base", base)
    counts = df.groupBy("_base").agg(F.count(F.lit(1)).alias("_n"))
    df = df.join(counts, "_base")
    single = df.filter(F.col("_n") == 1).withColumn("id", F.col("_base"))
    w = Window.partitionBy("_base").orderBy(F.col("_base"))
    multi = df.filter(F.col("_n") > 1).withColumn(
        "id", F.concat(F.col("_base"), F.lit("#"), F.row_number().over(w).cast("string"))
    )
    return single.unionByName(multi).drop("_base", "_n")


def read_table(spark: SparkSession, name: str) -> DataFrame:
    """The catalog table ``name`` (``--input-table``); a :class:`ConfigError` if the
    session's catalog has none."""
    if not spark.catalog.tableExists(name):
        raise ConfigError(f"--input-table: table {name!r} not found in the session's catalog")
    return spark.table(name)


def check_table_target(spark: SparkSession, name: str, fmt: str, overwrite: bool) -> None:
    """Before a run writes anything: ``fmt`` can be written by the session, and an
    existing table ``name`` is replaced only with ``overwrite``."""
    if fmt != "parquet" and not _has_data_source(spark, fmt):
        raise ConfigError(
            f"--output-format: got {fmt!r}, but the session has no {fmt} data source "
            "(Delta Lake: the delta-spark package and its session extensions, as on "
            "Databricks); allowed here: parquet"
        )
    if spark.catalog.tableExists(name) and not overwrite:
        raise ConfigError(f"--output-table: table {name!r} exists; pass --overwrite to replace it")


def write_table(df: DataFrame, name: str, fmt: str, overwrite: bool) -> None:
    """``df`` as the catalog table ``name`` in format ``fmt`` (``saveAsTable``)."""
    df.write.format(fmt).mode("overwrite" if overwrite else "errorifexists").saveAsTable(name)


def _has_data_source(spark: SparkSession, fmt: str) -> bool:
    """Whether the session can read and write format ``fmt``: resolving a read of
    a missing path fails for a missing path, not for a missing source."""
    try:
        columns = spark.read.format(fmt).load("/lsh-spark-probe-of-a-missing-path").columns
    except Exception as exc:  # noqa: BLE001 (classic raises Py4J errors, Connect its own)
        return "DATA_SOURCE_NOT_FOUND" not in str(exc)
    return columns is not None


def input_bytes(spark: SparkSession, source: str | DataFrame) -> int:
    """Bytes of the input: of the files below the path, or of the directories
    holding the files a DataFrame scans (0 for one built in memory)."""
    if isinstance(source, DataFrame):
        dirs = {posixpath.dirname(f) for f in source.inputFiles()}
        return sum(FileSystem(spark, d).size_bytes(d) for d in dirs)
    return FileSystem(spark, source).size_bytes(source)


def input_name(source: str | DataFrame) -> str:
    """The input as the report names it: its path, or ``"DataFrame"``."""
    return "DataFrame" if isinstance(source, DataFrame) else source


def read_corpus(
    spark: SparkSession, path: str | DataFrame, cfg: DedupConfig
) -> tuple[DataFrame, dict]:
    """Read the input into ``(id, <user columns>, reject_reason)``.

    ``path`` is a file or directory, or the input as a DataFrame (a table,
    a notebook's DataFrame: :mod:`lsh_spark.api`), which must have the id
    column.  Returns the DataFrame and facts for the report (format, files,
    whether ids were derived).  Raises :class:`ConfigError` for a missing
    input, an unknown format, or a missing text column.

    JSON Lines is read with the columns of ``cfg.schema`` (``--schema``), or
    else with the schema Spark infers from the whole input.
    """
    if isinstance(path, DataFrame):
        if cfg.id_col not in path.columns:
            raise ConfigError(
                f"--id-col: column {cfg.id_col!r} not in input; columns: {', '.join(path.columns)}"
            )
        df, reason, _ = _record_ids(_text_column(path, cfg), cfg, F.lit(None).cast("string"))
        facts = {"format": "dataframe", "files": len(path.inputFiles()), "derived_ids": False}
        return df.withColumn("reject_reason", reason), facts
    files = input_files(spark, path)
    fmt = cfg.format or detect_format(files)
    if cfg.schema is not None and fmt not in ("jsonl", "csv"):
        raise ConfigError(
            f"--schema: given for --format {fmt}, whose columns are known; "
            "allowed: only with jsonl or csv input"
        )
    if fmt == "warc":
        if cfg.id_col != "id":
            raise ConfigError(
                f"--id-col: got {cfg.id_col!r}; with --format warc the id is "
                "the WARC-Record-ID (leave --id-col unset)"
            )
        from lsh_spark.warc import read_warc

        return read_warc(spark, path, cfg.text_col, cfg.max_record_bytes), {
            "format": fmt,
            "files": len(files),
            "derived_ids": False,
        }
    df = _text_column(_read_format(spark, path, files, fmt, cfg), cfg)
    reason = F.lit(None).cast("string")
    if CORRUPT in df.columns:
        reason = F.when(
            F.col(CORRUPT).isNotNull(),
            F.concat(
                F.lit("invalid_record: not parseable as " + fmt + ": "),
                F.substring(F.regexp_replace(F.col(CORRUPT), r"[\x00-\x1F]", "?"), 1, 80),
            ),
        )
    if fmt == "text":
        df, derived = _text_ids(spark, path, df, cfg), True
    else:
        df, reason, derived = _record_ids(df, cfg, reason)
    df = df.withColumn("reject_reason", reason)
    if CORRUPT in df.columns:
        df = df.drop(CORRUPT)
    return df, {"format": fmt, "files": len(files), "derived_ids": derived}


def _read_format(
    spark: SparkSession, path: str, files: list[str], fmt: str, cfg: DedupConfig
) -> DataFrame:
    """The input as Spark reads ``fmt`` (not WARC), with ``CORRUPT`` where the
    format can have unparseable records and ``file_path`` for text."""
    if fmt == "jsonl":
        return _read_jsonl(spark, path, cfg.schema)
    if fmt == "csv":
        tsv = all(".tsv" in posixpath.basename(f).lower() for f in files)
        return _read_csv(spark, path, "\t" if tsv else ",", cfg.schema)
    if fmt == "parquet":
        _check_parquet_footers(spark, files)
        return spark.read.option("recursiveFileLookup", "true").parquet(path)
    if fmt == "text":
        return (
            spark.read.option("recursiveFileLookup", "true")
            .text(path, wholetext=cfg.text_unit == "file")
            .select(F.col("value").alias(cfg.text_col), "_metadata.file_path")
        )
    # validated by DedupConfig; kept for a clear message if called directly
    raise ConfigError(f"--format: got {fmt!r}; allowed: jsonl | parquet | csv | text | warc")


def _text_column(df: DataFrame, cfg: DedupConfig) -> DataFrame:
    """Check the text (or vector) column; a scalar text column of another type
    is cast to string."""
    from lsh_spark.config import VECTOR_METHODS

    if cfg.method in VECTOR_METHODS:
        _check_vector_col(df, cfg.vectors.vector_col)
        return df
    if cfg.text_col not in df.columns:
        cols = ", ".join(c for c in df.columns if c not in (CORRUPT, "file_path"))
        raise ConfigError(f"--text-col: column {cfg.text_col!r} not in input; columns: {cols}")
    text_type = df.schema[cfg.text_col].dataType
    if isinstance(text_type, T.StringType):
        return df
    if isinstance(text_type, (T.StructType, T.ArrayType, T.MapType, T.BinaryType)):
        raise ConfigError(
            f"--text-col: column {cfg.text_col!r} has type {text_type.simpleString()}; "
            "allowed: a string column"
        )
    return df.withColumn(cfg.text_col, F.col(cfg.text_col).cast("string"))


def _text_ids(spark: SparkSession, path: str, df: DataFrame, cfg: DedupConfig) -> DataFrame:
    """Ids of text documents: a file's path below the input (one document per
    file), or a hash of file name and line (one per line)."""
    if cfg.text_unit == "file":
        root = FileSystem(spark, path).qualify(path).rstrip("/") + "/"
        rel = F.regexp_replace(F.col("file_path"), "^" + re.escape(root), "")
        return df.withColumn("id", F.regexp_replace(rel, "^file:", "")).drop("file_path")
    key = F.concat_ws("\u0000", F.element_at(F.split("file_path", "/"), -1), F.col(cfg.text_col))
    return _derived_id(df, key).drop("file_path")


def _record_ids(df: DataFrame, cfg: DedupConfig, reason: Column) -> tuple[DataFrame, Column, bool]:
    """``id`` from the user's id column (a null one is a reject reason), or
    derived from each record's file name and content when the default ``id``
    column is absent.  Returns the DataFrame, the reject reason and whether the
    ids were derived."""
    if cfg.id_col in df.columns:
        id_type = df.schema[cfg.id_col].dataType
        if not isinstance(id_type, _ID_TYPES):
            raise ConfigError(
                f"--id-col: column {cfg.id_col!r} has type {id_type.simpleString()}; "
                "allowed: string or integer"
            )
        if cfg.id_col != "id":
            if "id" in df.columns:
                df = df.withColumnRenamed("id", "_input_id")
            df = df.withColumnRenamed(cfg.id_col, "id")
        reason = F.coalesce(
            reason,
            F.when(
                F.col("id").isNull(),
                F.lit(f"null_id: the id column {cfg.id_col!r} is null or absent"),
            ),
        )
        return df, reason, False
    if cfg.id_col != DedupConfig.id_col:
        cols = ", ".join(c for c in df.columns if c != CORRUPT)
        raise ConfigError(f"--id-col: column {cfg.id_col!r} not in input; columns: {cols}")
    user_cols = [c for c in df.columns if c != CORRUPT]
    key = F.concat_ws(
        "\u0000",
        F.element_at(F.split(F.col("_metadata.file_path"), "/"), -1),
        F.to_json(F.struct(*user_cols)),
        F.coalesce(F.col(CORRUPT), F.lit("")),
    )
    return _derived_id(df.withColumn("_key", key), F.col("_key")).drop("_key"), reason, True


def _check_vector_col(df: DataFrame, name: str) -> None:
    if name not in df.columns:
        cols = ", ".join(c for c in df.columns if c not in (CORRUPT, "file_path"))
        raise ConfigError(f"--vector-col: column {name!r} not in input; columns: {cols}")
    dtype = df.schema[name].dataType
    numeric = (
        T.ByteType,
        T.ShortType,
        T.IntegerType,
        T.LongType,
        T.FloatType,
        T.DoubleType,
        T.DecimalType,
    )
    if isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, numeric):
        return
    if type(dtype).__name__ == "VectorUDT":
        return
    raise ConfigError(
        f"--vector-col: column {name!r} has type {dtype.simpleString()}; "
        "allowed: an array of numbers or an MLlib vector"
    )


def check_unique_ids(df: DataFrame, show: int = 5) -> None:
    """Raise :class:`InputError` naming up to ``show`` ids that occur more than once."""
    dups = (
        df.filter(F.col("id").isNotNull())
        .groupBy("id")
        .count()
        .filter(F.col("count") > 1)
        .orderBy("id")
        .limit(show)
        .collect()
    )
    if dups:
        names = ", ".join(f"{r['id']!r} (x{r['count']})" for r in dups)
        raise InputError(f"duplicate ids in input: {names}; ids must be unique")


# -- writing ------------------------------------------------------------------
def as_written(schema: T.DataType) -> T.DataType:
    """The schema Spark reads back from Parquet it wrote from a DataFrame of
    ``schema``: the same fields, every one nullable (arrays and maps too), as
    Spark makes them when it writes files."""
    if isinstance(schema, T.StructType):
        return T.StructType(
            [T.StructField(f.name, as_written(f.dataType), True, f.metadata) for f in schema.fields]
        )
    if isinstance(schema, T.ArrayType):
        return T.ArrayType(as_written(schema.elementType), True)
    if isinstance(schema, T.MapType):
        return T.MapType(as_written(schema.keyType), as_written(schema.valueType), True)
    return schema


class _KnownSchemas:
    """The schemas of the datasets an output wrote in this process, so reading
    one back skips Parquet's schema inference: a Spark job that reads a footer,
    about 50 ms each, nine times in a dedup run."""

    schemas: dict[str, T.StructType]

    def _record(self, df: DataFrame, name: str) -> None:
        self.schemas[name] = as_written(df.schema)

    def read(self, name: str) -> DataFrame:
        """A dataset of this output; ``name`` as given to ``write``."""
        schema = self.schemas.get(name)
        reader = self.spark.read if schema is None else self.spark.read.schema(schema)
        return reader.parquet(self.path(name))


# -- committing ------------------------------------------------------------------
_OWNER = "_lsh_spark_run"  # JSON {run, host, pid} of the process writing a directory
_SUCCESS = "_SUCCESS"


def _owner_record(run: str) -> bytes:
    return json.dumps({"run": run, "host": socket.gethostname(), "pid": os.getpid()}).encode()


def _abandoned(fs: FileSystem, path: str, all_hosts: bool) -> bool:
    """Whether the run that wrote directory ``path`` is gone: its owner record is
    missing or unreadable, names a process of this host that no longer runs, or
    (``all_hosts``) names another host."""
    try:
        owner = json.loads(fs.read_text(f"{path}/{_OWNER}"))
    except (OSError, ValueError):
        return True
    if owner.get("host") != socket.gethostname():
        return all_hosts
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, KeyError, ValueError):
        return False
    return False


def _sibling(output: str, kind: str, run: str) -> str:
    """A hidden sibling of ``output``: its staging (``inprogress``) or old (``aside``) copy."""
    parent, name = posixpath.split(output)
    return f"{parent}/.{name}.{kind}-{run}"


def recover_output(spark: SparkSession, output: str, all_hosts: bool = True) -> list[str]:
    """Finish an interrupted commit of ``output`` and delete what killed runs left.

    An old output moved aside is put back unless the new one was complete
    (``_SUCCESS``), which then takes its place; staging directories of runs that
    are gone are deleted; so are asides once ``output`` stands.  A run still
    writing on this host is left alone; runs of other hosts are treated as gone
    when ``all_hosts`` (``jobs/recover.py``), kept otherwise (the start of a run).

    Returns
    -------
    list of str
        One line per action, e.g. ``"deleted .out.inprogress-1a2b"``.
    """
    fs = FileSystem(spark, output)
    output = fs.qualify(output).rstrip("/")
    if fs.object_store:
        return _recover_in_place(fs, output, all_hosts)
    parent, name = posixpath.split(output)
    done: list[str] = []
    asides = [n for n in fs.list_names(parent) if n.startswith(f".{name}.aside-")]
    for aside in asides:
        run = aside.rsplit("-", 1)[1]
        staging = _sibling(output, "inprogress", run)
        if not _abandoned(fs, staging, all_hosts):  # its run is still committing
            continue
        if not fs.exists(output):
            new = fs.exists(f"{staging}/{_SUCCESS}")
            fs.rename(staging if new else f"{parent}/{aside}", output)
            done.append(f"{'committed' if new else 'restored'} {name} from run {run}")
        fs.delete(f"{parent}/{aside}")
        done.append(f"deleted {aside}")
    for staging in fs.list_names(parent):
        path = f"{parent}/{staging}"
        if staging.startswith(f".{name}.inprogress-") and _abandoned(fs, path, all_hosts):
            fs.delete(path)
            done.append(f"deleted {staging}")
    return done


def _recover_in_place(fs: FileSystem, output: str, all_hosts: bool) -> list[str]:
    """On an object store: delete an output a killed run left without ``_SUCCESS``."""
    killed = fs.exists(f"{output}/{_OWNER}") and not fs.exists(f"{output}/{_SUCCESS}")
    if killed and _abandoned(fs, output, all_hosts):
        fs.delete(output)
        return [f"deleted {output} (a run killed before its commit)"]
    return []


class StagedOutput(_KnownSchemas):
    """An output directory written under a staging path and committed whole.

    On local disks and HDFS the run writes a hidden sibling
    ``.NAME.inprogress-RUN``; :meth:`commit` renames an older output aside, the
    new one into place, then deletes the old one: every step a rename, and a
    crash between any two leaves a state :func:`recover_output` completes (the
    next run calls it).  On object stores, where a rename copies every file, a
    new output is written in place and committed by its ``_SUCCESS`` marker
    (one request); an existing one is not replaced (see docs/outputs.md).
    """

    def __init__(self, spark: SparkSession, output: str, overwrite: bool = False):
        self.spark = spark
        self.fs = FileSystem(spark, output)
        self.output = self.fs.qualify(output).rstrip("/")
        recover_output(spark, self.output, all_hosts=False)
        if self.fs.exists(self.output) and not overwrite:
            raise ConfigError(f"--output: {output} already exists; pass --overwrite to replace it")
        if self.fs.exists(self.output) and self.fs.object_store:
            if not self.fs.exists(f"{self.output}/{_SUCCESS}"):
                raise ConfigError(
                    f"--output: {output} holds a run that did not commit (still running, or "
                    f"killed on another host); if none runs, clear it: jobs/recover.py {output}"
                )
            raise ConfigError(
                f"--output: {output} already exists; on an object store an output is not "
                "replaced (that would copy every file): delete it first or choose another --output"
            )
        self.run = uuid.uuid4().hex[:12]
        in_place = self.fs.object_store
        self.staging = self.output if in_place else _sibling(self.output, "inprogress", self.run)
        self.aside = _sibling(self.output, "aside", self.run)
        self.overwrite = overwrite
        self.committed = False
        self.schemas = {}
        owner, record = f"{self.staging}/{_OWNER}", _owner_record(self.run)
        if not in_place:  # a directory of this run's own
            self.fs.write_bytes(owner, record)
        elif not self.fs.create_exclusive(owner, record):  # two runs on one new path
            raise ConfigError(
                f"--output: another run started writing {output} at the same moment; "
                "this one stopped without writing"
            )

    def path(self, name: str) -> str:
        return f"{self.staging}/{name}"

    def write(self, df: DataFrame, name: str, **options: str) -> None:
        df.write.mode("error").options(**options).parquet(self.path(name))
        self._record(df, name)

    def replace(self, df: DataFrame, name: str) -> None:
        """Write ``df`` as dataset ``name`` in place of the one there (``df`` may read it)."""
        self.write(df, name + ".new")
        self.fs.delete(self.path(name))
        self.fs.rename(self.path(name + ".new"), self.path(name))
        self.schemas[name] = self.schemas.pop(name + ".new")

    def write_json(self, name: str, data: Any) -> None:
        self.fs.write_text(self.path(name), json.dumps(data, indent=2, sort_keys=True) + "\n")

    def write_bytes(self, name: str, data: bytes) -> None:
        self.fs.write_bytes(self.path(name), data)

    def commit(self) -> None:
        """Make the staged output the output, never deleting the old one before
        the new one is in place.

        Raises :class:`ConfigError`, leaving the other output untouched, when
        an output appeared at the path since the start of a run without
        ``overwrite``; an ``OSError`` of a rename leaves the old output in place.
        """
        if self.fs.object_store:
            self._check_owner()
            maybe_die("commit:staged")
            self.fs.write_text(self.path(_SUCCESS), "")
            self.committed = True
            return
        self.fs.write_text(self.path(_SUCCESS), "")
        maybe_die("commit:staged")
        if self.fs.exists(self.output):
            self._check_overwrite()
            self.fs.rename(self.output, self.aside)
            maybe_die("commit:aside")
        self._publish()
        self.committed = True
        maybe_die("commit:published")
        try:
            if self.fs.exists(self.aside):
                # Unmarked first: a half-deleted old output never looks complete.
                self.fs.delete(f"{self.aside}/{_SUCCESS}")
                maybe_die("commit:deleting-old")
                self.fs.delete(self.aside)
        except OSError as exc:  # committed all the same; the next run deletes it
            log.warning("could not delete the old output %s (%s)", self.aside, exc)

    def _check_overwrite(self) -> None:
        if not self.overwrite:
            raise ConfigError(
                f"--output: {self.output} appeared while this run was writing; it was "
                "left as it is (pass --overwrite to replace it)"
            )

    def _check_owner(self) -> None:
        """On an object store: refuse to commit an output another run took over."""
        if not self._owns_staging():
            raise ConfigError(
                f"--output: {self.output} was taken over by another run while this one "
                "was writing; not committed"
            )

    def _owns_staging(self) -> bool:
        try:
            return self.fs.read_text(f"{self.staging}/{_OWNER}").encode() == _owner_record(self.run)
        except OSError:
            return False

    def _publish(self) -> None:
        """Rename the staging directory to the output; on failure put the old one back."""
        try:
            if self.fs.exists(self.output):  # HDFS would move staging inside it
                self._check_overwrite()
                raise OSError(f"{self.output} appeared while committing")
            self.fs.rename(self.staging, self.output)
        except BaseException:
            if self.fs.exists(self.aside) and not self.fs.exists(self.output):
                self.fs.rename(self.aside, self.output)
            raise

    def abort(self) -> None:
        """Delete the staged output, unless the old one is not back in place yet
        (then both stay for :func:`recover_output`)."""
        if self.committed:
            return
        if self.fs.object_store:  # the output itself: only if this run still owns it
            if self._owns_staging() and not self.fs.exists(self.path(_SUCCESS)):
                self.fs.delete(self.staging)
        elif self.fs.exists(self.output) or not self.fs.exists(self.aside):
            self.fs.delete(self.staging)
        else:  # given up: recover_output may now finish the commit
            self.fs.delete(f"{self.staging}/{_OWNER}")
            log.error("%s is not in place: run jobs/recover.py %s", self.output, self.output)


class StagewiseOutput(_KnownSchemas):
    """An output directory filled one stage at a time by the stage jobs.

    A stage is committed as one unit.  Each dataset (and ``report.json``) it
    writes goes under this run's hidden staging directory, where the stage also
    reads it back; :meth:`commit` then records the names in ``_COMMIT`` (an
    exclusive create: the point after which the stage is the new one) and swaps
    each in: the older copy renamed into the staging directory's ``_old/``, the
    new one into place, the old one deleted.  A stage job killed before
    ``_COMMIT`` leaves the output as it was (its staging directory is deleted by
    the next stage job or ``jobs/recover.py``); killed after it, recovery
    finishes the swaps.  Either way every name holds the old stage or every name
    the new one, never a mix.
    """

    def __init__(self, spark: SparkSession, output: str):
        self.spark = spark
        self.fs = FileSystem(spark, output)
        self.output = self.fs.qualify(output).rstrip("/")
        recover_stages(spark, self.output, all_hosts=False)
        self.run = uuid.uuid4().hex[:12]
        self.staging = f"{self.output}/.inprogress-{self.run}"
        self.schemas = {}
        self.pending: list[str] = []  # written by this stage, swapped in by commit()
        self.fs.write_bytes(f"{self.staging}/{_OWNER}", _owner_record(self.run))

    def path(self, name: str) -> str:
        """Where ``name`` is read: this stage's own copy once it wrote one."""
        if name in self.pending:
            return f"{self.staging}/{name}"
        return f"{self.output}/{name}"

    def staged(self, name: str) -> str:
        """The path this stage writes ``name`` to (swapped in by :meth:`commit`)."""
        if name not in self.pending:
            self.pending.append(name)
        return f"{self.staging}/{name}"

    def require(self, name: str, stage_job: str) -> str:
        path = self.path(name)
        if not self.fs.exists(path + "/_SUCCESS"):
            raise ConfigError(f"--output: {path} is missing or incomplete; run {stage_job} first")
        return path

    def write(self, df: DataFrame, name: str, **options: str) -> None:
        df.write.mode("error").options(**options).parquet(self.staged(name))
        self._record(df, name)

    def write_json(self, name: str, data: Any) -> None:
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        self.fs.write_text(self.staged(name), text)

    def read_json(self, name: str) -> dict:
        """The JSON file ``name`` of the output; ``{}`` before any stage wrote one.

        Raises :class:`ConfigError` when it is missing but stage datasets exist:
        the report of earlier stages would be lost silently.
        """
        path = self.path(name)
        if self.fs.exists(path):
            return json.loads(self.fs.read_text(path))
        stages = [
            n
            for n in self.fs.list_names(self.output)
            if self.fs.exists(f"{self.output}/{n}/_SUCCESS")
        ]
        if stages:
            raise ConfigError(
                f"--output: {path} is missing though stages wrote {', '.join(stages)}; "
                "re-run the stage jobs from jobs/signatures.py into a new --output"
            )
        return {}

    def commit(self) -> None:
        """Swap every dataset of this stage in, as one unit (class docstring)."""
        marker = json.dumps({"names": self.pending}).encode()
        if not self.fs.create_exclusive(f"{self.staging}/{_STAGE_COMMIT}", marker):
            raise ConfigError(f"--output: {self.staging} was committed twice")
        _finish_stage(self.fs, self.output, self.staging, self.pending)
        self.pending = []  # read from their places from now on

    def abort(self) -> None:
        """Leave the output as it was: nothing of this stage was swapped in."""
        self.fs.delete(self.staging)


# The commit record of a stage job's staging directory (StagewiseOutput.commit).
_STAGE_COMMIT = "_COMMIT"


def _finish_stage(fs: FileSystem, output: str, staging: str, names: list[str]) -> None:
    """Swap each staged ``name`` in place of the older copy, which is deleted last;
    then delete the staging directory.  Safe to run again after a kill: a name
    already swapped has no staged copy left."""
    for name in names:
        new, old = f"{staging}/{name}", f"{staging}/_old/{name}"
        if not fs.exists(new):
            continue  # swapped in before a kill
        if fs.exists(f"{output}/{name}") and not fs.exists(old):
            fs.rename(f"{output}/{name}", old)
            maybe_die("commit:aside")
        fs.rename(new, f"{output}/{name}")
        maybe_die("commit:published")
    fs.delete(staging)


def recover_stages(spark: SparkSession, output: str, all_hosts: bool = True) -> list[str]:
    """Finish or roll back what killed stage jobs left in ``output``: a staging
    directory with its ``_COMMIT`` record has its swaps finished (the stage is
    the new one); without it, each older copy in its ``_old/`` (left by
    releases that swapped dataset by dataset) returns to its name if that is
    empty, and the staging directory is deleted.  Returns one line per action."""
    fs = FileSystem(spark, output)
    output = fs.qualify(output).rstrip("/")
    done: list[str] = []
    for staging in fs.list_names(output):
        path = f"{output}/{staging}"
        if not staging.startswith(".inprogress-") or not _abandoned(fs, path, all_hosts):
            continue
        if fs.exists(f"{path}/{_STAGE_COMMIT}"):
            names = json.loads(fs.read_text(f"{path}/{_STAGE_COMMIT}"))["names"]
            _finish_stage(fs, output, path, names)
            done.append(f"finished the commit of {staging} ({', '.join(names)})")
            continue
        for name in fs.list_names(f"{path}/_old"):
            if not fs.exists(f"{output}/{name}"):
                fs.rename(f"{path}/_old/{name}", f"{output}/{name}")
                done.append(f"restored {name}")
        fs.delete(path)
        done.append(f"deleted {staging}")
    return done
