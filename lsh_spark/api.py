"""The Python API: near-duplicates of a DataFrame, for notebooks and pipelines.

:func:`find_duplicates` runs the same stages as ``jobs/dedup.py`` on a
DataFrame (a table, a notebook's DataFrame) and returns :class:`Duplicates`:
the verified pairs, the clusters and the report, and
:meth:`Duplicates.remove` for the deduplicated DataFrame.
:func:`decontaminate` is ``jobs/decontaminate.py`` on DataFrames.  The
building blocks (:func:`shingles`, :func:`minhash`, :func:`band_keys`,
:func:`connected_components`) take a DataFrame first, for ``df.transform``.

Options are the job's (docs/options.md) as keyword arguments with
underscores (``num_perm=256``); a wrong value raises :class:`ValueError`
in Python's wording (``threshold must be a number in (0, 1], got 1.5``), an
unknown name :class:`TypeError`.  The caller's session settings are put back
as they were when a call returns.  The same calls work over Spark Connect.
See docs/api.md.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lsh_spark.config import ConfigError, DecontamConfig, DedupConfig, options

__all__ = [
    "Decontaminated",
    "Duplicates",
    "band_keys",
    "connected_components",
    "decontaminate",
    "find_duplicates",
    "minhash",
    "shingles",
]

T = TypeVar("T")
# Options that say how files are read: a DataFrame's columns are known.
FILE_OPTIONS = ("format", "schema", "text_unit")


@dataclass(frozen=True)
class Duplicates:
    """What :func:`find_duplicates` found.

    Attributes
    ----------
    pairs : DataFrame
        Verified edges ``(id_a, id_b, jaccard)`` enough to connect each cluster
        (every verified pair with ``pairs="all"``): ``pairs/`` of the job.
    clusters : DataFrame
        ``(id, cluster_id, cluster_size, keep)``: every accepted document once,
        ``keep`` true for the one document kept of each cluster.
    report : dict
        The job's ``report.json``: counts, parameters, seconds per stage.
    workdir : str
        Where the DataFrames above are stored (Parquet); they read it until it
        is deleted.
    """

    pairs: DataFrame
    clusters: DataFrame
    report: dict[str, Any]
    workdir: str
    id_col: str = "id"

    def remove(self, df: DataFrame) -> DataFrame:
        """``df`` with one document of each cluster: the input's columns and
        rows, without the copies and without the rejected records (empty
        text, null id, ...), as ``deduped/`` of the job.  ``df`` is the input
        :func:`find_duplicates` read (or more columns of the same records):
        a record is looked up by its id, and one the run never saw is kept.
        Filtered by a broadcast id list where it is read, as ``deduped/``."""
        from lsh_spark.stages.cluster import kept_documents

        rejects = df.sparkSession.read.parquet(f"{self.workdir}/rejects")
        in_clusters = self.report["counts"]["documents_in_duplicate_clusters"]
        kept = kept_documents(df, self.clusters, rejects, in_clusters, self.id_col)
        return kept.select(*df.columns)


@dataclass(frozen=True)
class Decontaminated:
    """What :func:`decontaminate` found: DataFrames ``clean``, ``removed``,
    ``matches`` (which reference item matched each removed document),
    ``rejects``, and the ``report`` dict; stored in ``workdir``."""

    clean: DataFrame
    removed: DataFrame
    matches: DataFrame
    rejects: DataFrame
    report: dict[str, Any]
    workdir: str


def find_duplicates(
    df: DataFrame,
    *,
    id_col: str = "id",
    text_col: str = "text",
    threshold: float = 0.8,
    workdir: str | None = None,
    overwrite: bool = False,
    **options: Any,
) -> Duplicates:
    """Near-duplicate clusters of the documents of ``df``.

    Parameters
    ----------
    df : DataFrame
        One row per document, with a unique ``id_col`` (string or integer)
        and a ``text_col``.  It is read twice (signatures, then the text of
        nothing else: only ids come back), so cache an expensive one.
    id_col, text_col, threshold, **options
        The options of ``jobs/dedup.py`` (docs/options.md), with underscores.
    workdir : str, optional
        Where the stages write (Parquet): a directory every executor reaches
        (``hdfs://``, ``s3a://``, ...).  Default, in local mode only: a new
        temporary directory.
    overwrite : bool
        Replace ``workdir`` if it holds an earlier result.

    Examples: docs/api.md.
    """
    cfg = _config(
        "find_duplicates",
        DedupConfig,
        id_col=id_col,
        text_col=text_col,
        threshold=threshold,
        **options,
    )
    from lsh_spark.pipeline import run_dedup

    spark = df.sparkSession
    where = _workdir(spark, workdir)
    report = _run(spark, lambda: run_dedup(spark, df, where, cfg, overwrite, deduped=False))
    return Duplicates(
        pairs=spark.read.parquet(f"{where}/pairs"),
        clusters=spark.read.parquet(f"{where}/clusters"),
        report=report,
        workdir=where,
        id_col=id_col,
    )


def decontaminate(
    df: DataFrame,
    references: DataFrame | Mapping[str, DataFrame],
    *,
    id_col: str = "id",
    text_col: str = "text",
    workdir: str | None = None,
    overwrite: bool = False,
    **options: Any,
) -> Decontaminated:
    """Split ``df`` into what overlaps ``references`` and the rest.

    ``references``: one DataFrame, or several by name (the name is
    ``reference_source`` in ``matches``), each with columns
    ``reference_id_col`` and ``reference_text_col`` (``id`` and ``text`` by
    default).  ``**options``: those of ``jobs/decontaminate.py``
    (``mode="containment"``, ``ngram=13``, ...).  Other parameters as in
    :func:`find_duplicates`.
    """
    own = {k: options.pop(k) for k in list(options) if k in options_of(DecontamConfig)}
    dc = _config("decontaminate", DecontamConfig, **own)
    cfg = _config("decontaminate", DedupConfig, id_col=id_col, text_col=text_col, **options)
    if isinstance(references, DataFrame):
        references = {"reference": references}
    from lsh_spark.decontam import run_decontaminate

    spark = df.sparkSession
    where = _workdir(spark, workdir)
    report = _run(
        spark, lambda: run_decontaminate(spark, df, references, where, cfg, dc, overwrite)
    )
    read = {
        n: spark.read.parquet(f"{where}/{n}") for n in ("clean", "removed", "matches", "rejects")
    }
    return Decontaminated(**read, report=report, workdir=where)


# -- building blocks -----------------------------------------------------------
def shingles(
    df: DataFrame,
    text_col: str = "text",
    kind: str = "word",
    k: int | None = None,
    seed: int = 1,
    out: str = "shingles",
    tokens: str | None = None,
) -> DataFrame:
    """``df`` with ``out``: the sorted distinct 64-bit hashes of the ``k``-word
    (or ``k``-character) shingles of the normalized ``text_col``; null where
    the text has no letter or digit.  ``tokens``: ``script`` (the default) or
    ``space`` (lsh-spark 0.2.0's words), as ``--tokens``.

    >>> spark = getfixture("spark")
    >>> df = spark.createDataFrame([("a", "One two, THREE four")], "id string, text string")
    >>> row = df.transform(shingles, k=2).first()
    >>> len(row.shingles), row.text
    (3, 'One two, THREE four')
    """
    from lsh_spark.normalize import TEXT_CHAR, normalize_col
    from lsh_spark.shingle import add_shingles

    cfg = _config("shingles", DedupConfig, shingle=kind, k=k, seed=seed, tokens=tokens)
    norm = normalize_col(F.make_valid_utf8(F.col(text_col).cast("string")), cfg.token_mode)
    with_norm = df.withColumn("_norm", norm)
    with_norm = with_norm.withColumn(
        "_norm", F.when(F.col("_norm").rlike(TEXT_CHAR), F.col("_norm"))
    )
    return add_shingles(with_norm, cfg.shingle, cfg.shingle_k, cfg.seed, "_norm", out).drop("_norm")


def minhash(
    df: DataFrame, num_perm: int = 128, seed: int = 1, shingles_col: str = "shingles"
) -> DataFrame:
    """``df`` with ``shingles_col`` replaced by ``signature`` (``array<int>`` of
    ``num_perm`` values) and ``num_shingles``.

    >>> spark = getfixture("spark")
    >>> df = spark.createDataFrame([("a", "one two three four")], "id string, text string")
    >>> sig = df.transform(shingles, k=2).transform(minhash, num_perm=16).first()
    >>> len(sig.signature), sig.num_shingles
    (16, 3)
    """
    from lsh_spark.signature import minhash as signatures

    cfg = _config("minhash", DedupConfig, num_perm=num_perm, seed=seed)
    if shingles_col != "shingles":
        df = df.withColumnRenamed(shingles_col, "shingles")
    return signatures(df, cfg.num_perm, cfg.seed)


def band_keys(
    df: DataFrame,
    threshold: float = 0.8,
    num_perm: int = 128,
    bands: int | None = None,
    rows: int | None = None,
    target_recall: float = 0.99,
) -> DataFrame:
    """``(id, signature, ...)`` -> ``(id, band, bucket)``: one row per LSH band;
    documents sharing a ``(band, bucket)`` are candidates.  ``num_perm`` is the
    signatures' length; ``bands`` x ``rows`` are chosen from ``threshold`` as
    the job chooses them unless given.

    >>> spark = getfixture("spark")
    >>> df = spark.createDataFrame([("a", "one two three four")], "id string, text string")
    >>> sigs = df.transform(shingles, k=2).transform(minhash, num_perm=16)
    >>> sigs.transform(band_keys, num_perm=16, bands=4, rows=4).count()
    4
    """
    from lsh_spark.banding import explode_bands

    cfg = _config(
        "band_keys",
        DedupConfig,
        threshold=threshold,
        num_perm=num_perm,
        bands=bands,
        rows=rows,
        target_recall=target_recall,
    )
    return explode_bands(df, *cfg.band_params())


def connected_components(
    edges: DataFrame,
    vertices: DataFrame | None = None,
    checkpoint_dir: str | None = None,
    max_iterations: int = 64,
) -> DataFrame:
    """``(id_a, id_b)`` edges -> ``(id, cluster_id, cluster_size)``, every vertex
    once, ``cluster_id`` the smallest id of its component.  ``vertices``
    (``(id)``) adds isolated vertices; ``checkpoint_dir`` makes the rounds
    reliable and resumable (see :func:`lsh_spark.components.connected_components`).

    >>> spark = getfixture("spark")
    >>> edges = spark.createDataFrame([(1, 2), (2, 3), (7, 8)], "id_a long, id_b long")
    >>> cc = edges.transform(connected_components)
    >>> sorted(tuple(r) for r in cc.orderBy("id").collect())
    [(1, 1, 3), (2, 1, 3), (3, 1, 3), (7, 7, 2), (8, 7, 2)]
    """
    from lsh_spark.components import connected_components as components
    from lsh_spark.stages.rounds import saved_rounds

    if vertices is None:
        vertices = (
            edges.select(F.col("id_a").alias("id"))
            .union(edges.select(F.col("id_b").alias("id")))
            .distinct()
        )
    return components(edges, vertices, max_iterations, saved_rounds(checkpoint_dir))


# -- shared ----------------------------------------------------------------------
def options_of(cls: type) -> set[str]:
    """The keyword names a config class takes (sections flattened)."""
    return set(options(cls))


def _config(fn: str, cls: type, **values: Any) -> Any:
    """``cls(**values)``, its errors in Python's wording."""
    unknown = sorted(set(values) - options_of(cls) - {"simhash", "vectors"})
    if cls is DedupConfig and fn in ("find_duplicates", "decontaminate"):
        unknown += [k for k in FILE_OPTIONS if k in values]
    if unknown:
        allowed = ", ".join(sorted(options_of(cls) - set(FILE_OPTIONS)))
        raise TypeError(
            f"{fn}() got an unexpected keyword argument {unknown[0]!r}; the options are: {allowed}"
        )
    with python_wording():
        nullable = _nullable(cls)
        return cls(**{k: v for k, v in values.items() if v is not None or k in nullable})


def _nullable(cls: type) -> set[str]:
    return {k for k, o in options(cls).items() if o.default is None}


@contextmanager
def python_wording() -> Iterator[None]:
    """Re-raise a :class:`ConfigError` (worded for the command line: ``--num-perm:
    got 0; allowed: ...``) in Python's wording: ``num_perm must be ..., got 0``."""
    try:
        yield
    except ConfigError as exc:
        raise ConfigError(to_python_wording(str(exc))) from None


def to_python_wording(message: str) -> str:
    """``--threshold: got 1.5; allowed: a number in (0, 1]`` ->
    ``threshold must be a number in (0, 1], got 1.5``; other messages get
    their flags as keyword names.

    >>> to_python_wording("--threshold: got 1.5; allowed: a number in (0, 1]")
    'threshold must be a number in (0, 1], got 1.5'
    >>> to_python_wording("--keep: got 'x'; allowed: min-id | longest")
    "keep must be one of min-id | longest, got 'x'"
    """
    m = re.fullmatch(r"--([a-z][a-z0-9-]*): got (.*?); allowed: (.*)", message, re.S)
    if m:
        allowed = m.group(3)
        if " | " in allowed:
            allowed = "one of " + allowed
        return f"{_keyword(m)} must be {allowed}, got {m.group(2)}"
    return re.sub(r"--([a-z][a-z0-9-]*)", _keyword, message)


def _keyword(flag: re.Match) -> str:
    return flag.group(1).replace("-", "_")


def _workdir(spark: SparkSession, workdir: str | None) -> str:
    if workdir is not None:
        return workdir
    try:
        master = spark.conf.get("spark.master", "") or ""
    except PySparkException:  # a server that does not expose it: not known to be local
        master = ""
    if not master.startswith("local"):
        raise ValueError(
            f"workdir is required with master {master!r}: a directory every executor "
            "reaches (hdfs://, s3a://, ...), where the results are stored"
        )
    return tempfile.mkdtemp(prefix="lsh-spark-") + "/run"


def _run(spark: SparkSession, work: Callable[[], T]) -> T:
    """``work()`` with the job's session defaults, the caller's settings put back after."""
    from lsh_spark.session import fill_defaults, settings_restored

    with settings_restored(spark), python_wording():
        fill_defaults(spark)
        return work()
