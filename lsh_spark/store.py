"""The store: every file system an output or an index lives on, and nothing of
what the files hold.

:class:`FileSystem` (``pyarrow.fs`` on the driver, or fsspec for GCS, Azure and
DBFS) checks paths, lists files, writes small files and renames; it offers the
three primitives the commit protocols are built on, each documented with what
every store guarantees:

- :meth:`FileSystem.create_exclusive`: create a file that does not exist, in
  one step (the crawl index's compare-and-swap, the stage commit record);
- :meth:`FileSystem.replace_text`: replace a small file so a reader sees the old
  or the new text, never an empty name;
- :meth:`FileSystem.sync`: make files and directory entries durable before
  anything names them (fsync on local disks; see docs/outputs.md for the others).

Data itself is read and written by Spark.  The commit protocols that use the
store are in :mod:`lsh_spark.outputs` (outputs) and :mod:`lsh_spark.index`
(the crawl index); the corpus readers are in :mod:`lsh_spark.readers`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
import time
import uuid

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from lsh_spark.config import ConfigError

log = logging.getLogger(__name__)

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
        """Delete the file or directory ``path`` (nothing if it is absent); on local
        disks its directory is fsynced, so the name does not come back after a
        power cut."""
        info = self._info(path)
        if info.type == pafs.FileType.Directory:
            self._fs.delete_dir(self._p(path))
        elif info.type == pafs.FileType.File:
            self._fs.delete_file(self._p(path))
            self._drop_checksum(path)
        else:
            return
        if self._local:
            _fsync_dirs(posixpath.dirname(self._p(path)))

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

        A rename on local disks and HDFS (atomic; on local disks both
        directories are then fsynced, so the rename survives a power cut).  S3
        has no rename: a
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
        if self._local:  # a rename is durable once both directories are synced
            _fsync_dirs(posixpath.dirname(self._p(dst)), posixpath.dirname(self._p(src)))

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
        """Write ``data`` to file ``path`` (replacing it), creating its parent.

        On local disks the file and its directory are fsynced before this
        returns: every small file the commits write (markers, reports, owner
        records) is durable once written."""
        self._fs.create_dir(posixpath.dirname(self._p(path)), recursive=True)
        self._drop_checksum(path)
        if self._local:
            with open(self._p(path), "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            _fsync_dirs(posixpath.dirname(self._p(path)))
            return
        with self._fs.open_output_stream(self._p(path)) as out:
            out.write(data)

    def sync(self, *paths: str) -> None:
        """Make the files and directories below each of ``paths``, and the names
        that lead to them, durable: what a manifest or a ``_SUCCESS`` marker is
        about to name must survive a power cut first.

        - local disks: every file (checksum files too) is fsynced, then every
          directory bottom-up, then each ancestor directory (a new name is
          durable only once its directory is);
        - HDFS: nothing to do from here: a closed file is on all its DataNodes
          (in their memory, on disk only with ``dfs.datanode.synconclose=true``),
          and libhdfs through pyarrow offers no ``hsync`` (docs/outputs.md);
        - object stores: an object is durable when its PUT is answered.
        """
        if not self._local:
            return
        for path in paths:
            _fsync_tree(self._p(path))

    def replace_text(self, path: str, text: str) -> None:
        """Replace file ``path`` whole, never leaving the name without a text that
        :meth:`read_replaced` finds.

        - local disks: a temporary file (fsynced) renamed over it, then the
          directory fsynced: POSIX ``rename`` replaces in one step;
        - object stores: one PUT;
        - HDFS, whose move through libhdfs deletes an existing target and renames
          again (the name is empty between the two): the old file is first
          renamed to a backup ``.NAME.replaced-ID`` (one atomic rename), the new
          one then renamed into the free name, and the backup deleted last.  A
          kill between the renames leaves the backup, which
          :meth:`read_replaced` reads (and puts back) in place of the name.
        """
        if self.object_store:
            self.write_text(path, text)
            return
        parent, name = posixpath.split(path)
        tmp = f"{parent}/.{name}.{uuid.uuid4().hex[:12]}.tmp"
        self.write_text(tmp, text)
        self._drop_checksum(path)
        if self._atomic_replace():
            self._fs.move(self._p(tmp), self._p(path))
            if self._local:
                _fsync_dirs(posixpath.dirname(self._p(path)))
            return
        backup = f"{parent}/.{name}.replaced-{uuid.uuid4().hex[:12]}"
        if self.exists(path):
            self._fs.move(self._p(path), self._p(backup))
        self._fs.move(self._p(tmp), self._p(path))
        self.delete(backup)

    def _atomic_replace(self) -> bool:
        """Whether a rename onto an existing file replaces it in one step."""
        return self._local

    def read_replaced(self, path: str) -> str | None:
        """The text of a file written by :meth:`replace_text`, or None if there
        is none: where a replace was cut short between its renames, the backup it
        left is put back under the name and read."""
        if self.exists(path):
            return self.read_text(path)
        parent, name = posixpath.split(path)
        backups = [n for n in self.list_names(parent) if n.startswith(f".{name}.replaced-")]
        if not backups:
            return None
        newest = max(backups, key=lambda n: self._info(f"{parent}/{n}").mtime_ns or 0)
        self._fs.move(self._p(f"{parent}/{newest}"), self._p(path))
        log.warning("%s was missing after a cut-short replace: its previous text is back", path)
        return self.read_text(path)

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


def _fsync_path(path: str) -> None:
    """fsync file or directory ``path`` (a read-only descriptor is enough on Linux)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dirs(*dirs: str) -> None:
    """fsync each of ``dirs`` and every ancestor of it: a directory created on
    the way (``create_dir(recursive=True)``) is durable only once its parent is.
    An ancestor this process may not open is skipped: it existed before the run."""
    done: set[str] = set()
    for start in dirs:
        path = start
        while path not in done:
            done.add(path)
            with contextlib.suppress(PermissionError):
                _fsync_path(path)
            parent = posixpath.dirname(path)
            if parent == path:
                break
            path = parent


def _fsync_tree(root: str) -> None:
    """fsync every file below ``root`` (or the file), its directories bottom-up,
    then the ancestors of ``root``."""
    if not os.path.isdir(root):
        _fsync_path(root)
        _fsync_dirs(posixpath.dirname(root))
        return
    for parent, _, files in os.walk(root, topdown=False):
        for name in files:
            _fsync_path(os.path.join(parent, name))
        _fsync_path(parent)
    _fsync_dirs(posixpath.dirname(root))


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
        _fsync_dirs(parent)  # the new directory entry survives a power loss
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
