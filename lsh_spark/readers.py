"""Reading corpora: JSON Lines, CSV/TSV, Parquet, plain text, WARC and tables.

Readers return one DataFrame with the user's columns plus ``id`` (the user's id
column, or a derived deterministic id) and ``reject_reason`` (non-null for
records that could not be parsed or lack an id), so that every input record
can be accounted for in ``clusters/`` or ``rejects/``.  Files are found through
:mod:`lsh_spark.store`; Spark reads them.
"""

from __future__ import annotations

import posixpath
import re
from concurrent.futures import ThreadPoolExecutor

import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.errors import LshSparkError
from lsh_spark.store import FileSystem, input_files, open_input, s3_endpoint

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
