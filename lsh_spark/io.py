"""Reading corpora and writing results: the I/O edge of the pipeline.

Readers return one DataFrame with the user's columns plus ``id`` (the user's id
column, or a derived deterministic id) and ``reject_reason`` (non-null for
records that could not be parsed or lack an id), so that every input record
can be accounted for in ``clusters/`` or ``rejects/``.

Writers stage every output under a hidden sibling directory and rename it into
place at the end (Hadoop ``FileSystem.rename``: atomic on HDFS and local disks;
on object stores, the ``_SUCCESS`` marker written last is the signal a run
finished).
"""

from __future__ import annotations

import json
import posixpath
import re
import uuid
from typing import Any

from py4j.java_gateway import JavaClass
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.config import ConfigError, DedupConfig

CORRUPT = "_corrupt_record"
_EXTENSIONS = {
    ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
    ".parquet": "parquet", ".csv": "csv", ".tsv": "csv", ".txt": "text", ".text": "text",
    ".warc": "warc", ".wet": "warc",
}
_COMPRESSION = (".gz", ".bz2", ".zst", ".lz4", ".snappy", ".deflate", ".xz")
_ID_TYPES = (T.StringType, T.IntegerType, T.LongType, T.ShortType, T.ByteType)


class InputError(ValueError):
    """The input cannot be processed at all (missing, wrong layout, duplicate ids)."""


# -- Hadoop file system helpers ---------------------------------------------
class FileSystem:
    """Thin wrapper over the JVM Hadoop FileSystem of a path (local, HDFS, S3A, ...)."""

    def __init__(self, spark: SparkSession, path: str):
        jvm = spark.sparkContext._jvm
        self._jvm = jvm
        # Hadoop's Path class, named in full: ``jvm.org.apache.hadoop.fs.Path``
        # asks the JVM about each package on the way (five Py4J calls per
        # path; 180 calls, 0.28 s of the driver's time in a 40k run).
        self._path_class = JavaClass("org.apache.hadoop.fs.Path", jvm._gateway_client)
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()
        self._fs = self._p(path).getFileSystem(self._conf)

    def _p(self, path: str):
        return self._path_class(path)

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._p(path)))

    def is_dir(self, path: str) -> bool:
        return bool(self._fs.getFileStatus(self._p(path)).isDirectory())

    def qualify(self, path: str) -> str:
        return str(self._fs.makeQualified(self._p(path)).toString())

    def fingerprint(self, path: str) -> tuple:
        """``(name, length, modification time)`` of every data file below ``path``
        (recursively), skipping hidden and ``_`` files, sorted by name."""
        it = self._fs.listFiles(self._p(path), True)
        out = []
        while it.hasNext():
            st = it.next()
            name = str(st.getPath().toString())
            if not posixpath.basename(name).startswith((".", "_")):
                out.append((name, int(st.getLen()), int(st.getModificationTime())))
        return tuple(sorted(out))

    def list_names(self, path: str) -> list[str]:
        """Names of the direct children of directory ``path`` (empty if it is absent)."""
        if not self.exists(path):
            return []
        return sorted(str(st.getPath().getName()) for st in self._fs.listStatus(self._p(path)))

    def rename_new(self, src: str, dst: str) -> bool:
        """Rename ``src`` to ``dst`` unless ``dst`` exists; False if it does.

        On HDFS the rename itself refuses an existing destination (atomic); on
        other file systems the check runs just before the rename.
        """
        if self.exists(dst):
            return False
        return bool(self._fs.rename(self._p(src), self._p(dst)))

    def list_files(self, path: str) -> list[str]:
        """Data files below ``path`` (recursively), skipping hidden and ``_`` files."""
        return [name for name, _, _ in self.fingerprint(path)]

    def parquet_row_groups(self, path: str) -> tuple[int, int, int]:
        """``(files, row groups, rows)`` of the Parquet files below ``path``, from
        their footers (read by the JVM's Parquet reader: any Hadoop file system)."""
        jvm = self._jvm
        files = groups = rows = 0
        for name in self.list_files(path):
            if not name.endswith(".parquet"):
                continue
            reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
                jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
                    self._p(name), self._conf))
            try:
                groups += int(reader.getRowGroups().size())
                rows += int(reader.getRecordCount())
            finally:
                reader.close()
            files += 1
        return files, groups, rows

    def size_bytes(self, path: str) -> int:
        """Total length of the files below ``path`` (or of the file itself)."""
        return int(self._fs.getContentSummary(self._p(path)).getLength())

    def delete(self, path: str) -> None:
        if self.exists(path):
            self._fs.delete(self._p(path), True)

    def rename(self, src: str, dst: str) -> None:
        parent = self._p(dst).getParent()
        if parent is not None and not self._fs.exists(parent):
            self._fs.mkdirs(parent)
        if not self._fs.rename(self._p(src), self._p(dst)):
            raise OSError(f"could not rename {src} to {dst}")

    def write_text(self, path: str, text: str) -> None:
        out = self._fs.create(self._p(path), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()

    def write_bytes(self, path: str, data: bytes) -> None:
        out = self._fs.create(self._p(path), True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()

    def read_text(self, path: str) -> str:
        stream = self._fs.open(self._p(path))
        try:
            reader = self._jvm.java.io.BufferedReader(
                self._jvm.java.io.InputStreamReader(stream, "UTF-8"))
            lines = []
            line = reader.readLine()
            while line is not None:
                lines.append(line)
                line = reader.readLine()
            return "\n".join(lines)
        finally:
            stream.close()


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


def input_files(spark: SparkSession, path: str) -> list[str]:
    fs = FileSystem(spark, path)
    if not fs.exists(path):
        raise ConfigError(f"--input: path does not exist: {path}")
    files = fs.list_files(path) if fs.is_dir(path) else [fs.qualify(path)]
    if not files:
        raise ConfigError(f"--input: no data files under {path}")
    return files


# Inferred JSON schemas by input path and file listing (names, sizes, times):
# inference is a full pass over the input, and one run reads it in several stages.
_JSON_SCHEMAS: dict[tuple, T.StructType] = {}


def _json_key(spark: SparkSession, path: str) -> tuple:
    return (path, FileSystem(spark, path).fingerprint(path))


def _json_reader(spark: SparkSession, schema: T.StructType | None = None):
    reader = spark.read if schema is None else spark.read.schema(schema)
    return (reader.option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT)
            .option("recursiveFileLookup", "true"))


def _infer_json(spark: SparkSession, path: str) -> T.StructType:
    schema = _json_reader(spark).json(path).schema
    # Spark refuses queries on raw JSON that touch only the corrupt column;
    # reading with the inferred schema (corrupt column included) lifts that.
    if CORRUPT not in schema.names:
        schema = schema.add(T.StructField(CORRUPT, T.StringType(), True))
    return schema


def _read_jsonl(spark: SparkSession, path: str) -> DataFrame:
    """JSON Lines with the schema Spark infers from the whole input (once per
    input listing in this process)."""
    key = _json_key(spark, path)
    if key not in _JSON_SCHEMAS:
        _JSON_SCHEMAS[key] = _infer_json(spark, path)
    return _json_reader(spark, _JSON_SCHEMAS[key]).json(path)


def _read_csv(spark: SparkSession, path: str, sep: str) -> DataFrame:
    reader = (
        spark.read.option("header", "true").option("multiLine", "true")
        .option("escape", '"').option("sep", sep).option("recursiveFileLookup", "true")
    )
    header = reader.csv(path).schema
    schema = T.StructType(
        [T.StructField(f.name, T.StringType(), True) for f in header]
        + [T.StructField(CORRUPT, T.StringType(), True)]
    )
    return (
        reader.schema(schema).option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT).csv(path)
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


def read_corpus(spark: SparkSession, path: str, cfg: DedupConfig) -> tuple[DataFrame, dict]:
    """Read the input into ``(id, <user columns>, reject_reason)``.

    Returns the DataFrame and facts for the report (format, files, whether ids
    were derived).  Raises :class:`ConfigError` for a missing input, an unknown
    format, or a missing text column.

    JSON Lines is read with the schema Spark infers from the whole input.
    """
    files = input_files(spark, path)
    fmt = cfg.format or detect_format(files)
    derived = False
    if fmt == "jsonl":
        df = _read_jsonl(spark, path)
    elif fmt == "csv":
        tsv = all(".tsv" in posixpath.basename(f).lower() for f in files)
        sep = "\t" if tsv else ","
        df = _read_csv(spark, path, sep)
    elif fmt == "parquet":
        df = spark.read.option("recursiveFileLookup", "true").parquet(path)
    elif fmt == "warc":
        if cfg.id_col != "id":
            raise ConfigError(f"--id-col: got {cfg.id_col!r}; with --format warc the id is "
                              "the WARC-Record-ID (leave --id-col unset)")
        from lsh_spark.warc import read_warc
        return read_warc(spark, path, cfg.text_col), {
            "format": fmt, "files": len(files), "derived_ids": False}
    elif fmt == "text":
        wholetext = cfg.text_unit == "file"
        df = (
            spark.read.option("recursiveFileLookup", "true")
            .text(path, wholetext=wholetext)
            .select(F.col("value").alias(cfg.text_col), "_metadata.file_path")
        )
    else:  # validated by DedupConfig; kept for a clear message if called directly
        raise ConfigError(f"--format: got {fmt!r}; allowed: jsonl | parquet | csv | text | warc")

    from lsh_spark.config import VECTOR_METHODS

    if cfg.method in VECTOR_METHODS:
        _check_vector_col(df, cfg.vectors.vector_col)
    elif cfg.text_col not in df.columns:
        cols = ", ".join(c for c in df.columns if c not in (CORRUPT, "file_path"))
        raise ConfigError(f"--text-col: column {cfg.text_col!r} not in input; columns: {cols}")
    text_type = df.schema[cfg.text_col].dataType if cfg.text_col in df.columns else None
    if cfg.method in VECTOR_METHODS:
        pass
    elif not isinstance(text_type, T.StringType):
        if isinstance(text_type, (T.StructType, T.ArrayType, T.MapType, T.BinaryType)):
            raise ConfigError(
                f"--text-col: column {cfg.text_col!r} has type {text_type.simpleString()}; "
                "allowed: a string column")
        df = df.withColumn(cfg.text_col, F.col(cfg.text_col).cast("string"))

    reason = F.lit(None).cast("string")
    if CORRUPT in df.columns:
        reason = F.when(
            F.col(CORRUPT).isNotNull(),
            F.concat(F.lit("invalid_record: not parseable as " + fmt + ": "),
                     F.substring(F.regexp_replace(F.col(CORRUPT), r"[\x00-\x1F]", "?"), 1, 80)),
        )

    if fmt == "text":
        derived = True
        if cfg.text_unit == "file":
            root = FileSystem(spark, path).qualify(path).rstrip("/") + "/"
            rel = F.regexp_replace(F.col("file_path"), "^" + re.escape(root), "")
            df = df.withColumn("id", F.regexp_replace(rel, "^file:", "")).drop("file_path")
        else:
            key = F.concat_ws("\u0000", F.element_at(F.split("file_path", "/"), -1),
                              F.col(cfg.text_col))
            df = _derived_id(df, key).drop("file_path")
    elif cfg.id_col in df.columns:
        id_type = df.schema[cfg.id_col].dataType
        if not isinstance(id_type, _ID_TYPES):
            raise ConfigError(
                f"--id-col: column {cfg.id_col!r} has type {id_type.simpleString()}; "
                "allowed: string or integer")
        if cfg.id_col != "id":
            if "id" in df.columns:
                df = df.withColumnRenamed("id", "_input_id")
            df = df.withColumnRenamed(cfg.id_col, "id")
        reason = F.coalesce(reason, F.when(F.col("id").isNull(), F.lit(
            f"null_id: the id column {cfg.id_col!r} is null or absent")))
    elif cfg.id_col != DedupConfig.id_col:
        cols = ", ".join(c for c in df.columns if c != CORRUPT)
        raise ConfigError(f"--id-col: column {cfg.id_col!r} not in input; columns: {cols}")
    else:
        derived = True
        user_cols = [c for c in df.columns if c != CORRUPT]
        key = F.concat_ws("\u0000", F.element_at(F.split(F.col("_metadata.file_path"), "/"), -1),
                          F.to_json(F.struct(*user_cols)), F.coalesce(F.col(CORRUPT), F.lit("")))
        df = _derived_id(df.withColumn("_key", key), F.col("_key")).drop("_key")

    df = df.withColumn("reject_reason", reason)
    if CORRUPT in df.columns:
        df = df.drop(CORRUPT)
    return df, {"format": fmt, "files": len(files), "derived_ids": derived}


def _check_vector_col(df: DataFrame, name: str) -> None:
    if name not in df.columns:
        cols = ", ".join(c for c in df.columns if c not in (CORRUPT, "file_path"))
        raise ConfigError(f"--vector-col: column {name!r} not in input; columns: {cols}")
    dtype = df.schema[name].dataType
    numeric = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType,
               T.DecimalType)
    if isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, numeric):
        return
    if type(dtype).__name__ == "VectorUDT":
        return
    raise ConfigError(f"--vector-col: column {name!r} has type {dtype.simpleString()}; "
                      "allowed: an array of numbers or an MLlib vector")


def check_unique_ids(df: DataFrame, show: int = 5) -> None:
    """Raise :class:`InputError` naming up to ``show`` ids that occur more than once."""
    dups = (
        df.filter(F.col("id").isNotNull()).groupBy("id").count()
        .filter(F.col("count") > 1).orderBy("id").limit(show).collect()
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
        return T.StructType([T.StructField(f.name, as_written(f.dataType), True, f.metadata)
                             for f in schema.fields])
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


class StagedOutput(_KnownSchemas):
    """An output directory written under a hidden staging path, then renamed into place."""

    def __init__(self, spark: SparkSession, output: str, overwrite: bool = False):
        self.spark = spark
        self.fs = FileSystem(spark, output)
        self.output = self.fs.qualify(output).rstrip("/")
        if self.fs.exists(self.output) and not overwrite:
            raise ConfigError(f"--output: {output} already exists; pass --overwrite to replace it")
        parent, name = posixpath.split(self.output)
        self.staging = f"{parent}/.{name}.inprogress-{uuid.uuid4().hex[:12]}"
        self.overwrite = overwrite
        self.schemas = {}

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
        self.fs.write_text(self.path("_SUCCESS"), "")
        if self.fs.exists(self.output):
            self.fs.delete(self.output)
        self.fs.rename(self.staging, self.output)

    def abort(self) -> None:
        self.fs.delete(self.staging)


class StagewiseOutput(_KnownSchemas):
    """An output directory filled one stage at a time by the stage jobs.

    Each dataset is written under a hidden staging name and renamed into place,
    replacing an older copy, so a failed stage re-runs alone and a half-written
    dataset is never visible under its real name.
    """

    def __init__(self, spark: SparkSession, output: str):
        self.spark = spark
        self.fs = FileSystem(spark, output)
        self.output = self.fs.qualify(output).rstrip("/")
        self.staging = f"{self.output}/.inprogress-{uuid.uuid4().hex[:12]}"
        self.schemas = {}

    def path(self, name: str) -> str:
        return f"{self.output}/{name}"

    def require(self, name: str, stage_job: str) -> str:
        path = self.path(name)
        if not self.fs.exists(path + "/_SUCCESS"):
            raise ConfigError(f"--output: {path} is missing or incomplete; run {stage_job} first")
        return path

    def write(self, df: DataFrame, name: str, **options: str) -> None:
        tmp = f"{self.staging}/{name}"
        df.write.mode("error").options(**options).parquet(tmp)
        self.fs.delete(self.path(name))
        self.fs.rename(tmp, self.path(name))
        self._record(df, name)

    def write_json(self, name: str, data: Any) -> None:
        tmp = f"{self.staging}/{name}"
        self.fs.write_text(tmp, json.dumps(data, indent=2, sort_keys=True) + "\n")
        self.fs.delete(self.path(name))
        self.fs.rename(tmp, self.path(name))

    def read_json(self, name: str) -> dict:
        path = self.path(name)
        return json.loads(self.fs.read_text(path)) if self.fs.exists(path) else {}

    def commit(self) -> None:
        self.fs.delete(self.staging)

    abort = commit
