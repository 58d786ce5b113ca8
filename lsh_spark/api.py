"""The Python API: near-duplicates of a DataFrame, for notebooks and pipelines.

:func:`find_duplicates` runs the same stages as ``jobs/dedup.py`` on a
DataFrame (a table, a notebook's DataFrame) and returns :class:`Duplicates`:
the verified pairs, the clusters, the report, each removed document beside the
one kept (:attr:`Duplicates.removals`), the inspection page
(:meth:`Duplicates.inspect`) and :meth:`Duplicates.remove` for the
deduplicated DataFrame.  :func:`decontaminate` is ``jobs/decontaminate.py`` on
DataFrames, :func:`advise` is ``jobs/advise.py`` and :class:`CrawlIndex` runs
``jobs/crawl_dedup.py``'s batches.  The building blocks (:func:`shingles`,
:func:`minhash`, :func:`band_keys`, :func:`connected_components`) take a
DataFrame first, for ``df.transform``.

Options are the job's (docs/options.md): a :class:`~lsh_spark.config.DedupConfig`
(``config=DedupConfig.from_yaml("conf/local.yaml")``) and keyword arguments
with underscores (``num_perm=256``), the keywords winning; a wrong value
raises :class:`ValueError` in Python's wording (``threshold must be a number in
(0, 1], got 1.5``), an unknown name :class:`TypeError`.  The caller's session
settings are put back as they were when a call returns.  The same calls work
over Spark Connect.  See docs/api.md.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lsh_spark.config import ConfigError, DecontamConfig, DedupConfig, options

if TYPE_CHECKING:
    from lsh_spark.inspection import Page

__all__ = [
    "Advice",
    "CrawlBatch",
    "CrawlIndex",
    "Decontaminated",
    "DedupConfig",
    "Duplicates",
    "advise",
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
        ``keep`` true for the one document kept of each cluster (anchored on it
        with ``anchored=True``).
    report : dict
        The job's ``report.json``: counts, parameters, seconds per stage.
    workdir : str
        Where the DataFrames above are stored (Parquet); they read it until it
        is deleted.
    id_col : str
        The input's id column.
    config : DedupConfig
        The options of the run.
    source : DataFrame
        The input DataFrame (for the texts of :attr:`removals` and :meth:`inspect`).
    anchored : bool
        Whether ``clusters`` are anchored on their kept documents.
    """

    pairs: DataFrame
    clusters: DataFrame
    report: dict[str, Any]
    workdir: str
    id_col: str = "id"
    config: DedupConfig = field(default_factory=DedupConfig)
    source: DataFrame | None = field(default=None, repr=False)
    anchored: bool = False

    @property
    def rejects(self) -> DataFrame:
        """``(id, reason)``: the input records that could not be processed
        (``empty_text``, ``binary_content``, ``too_large``, ...): ``rejects/``."""
        return self.clusters.sparkSession.read.parquet(f"{self.workdir}/rejects")

    @cached_property
    def removals(self) -> DataFrame:
        """``(id, kept_id, jaccard)``: one row per removed document, with the
        document kept in its cluster and the exact Jaccard of their shingle sets
        (which may be below the threshold, unless the clusters are anchored).

        Computed on first use, for the removed documents and their kept ones
        only (their shingle sets again, from the input), and stored in
        ``workdir/removals``."""
        from lsh_spark.store import FileSystem

        spark = self.clusters.sparkSession
        path = f"{self.workdir}/removals"
        if not FileSystem(spark, path).exists(f"{path}/_SUCCESS"):
            _all_removals(self).write.mode("overwrite").parquet(path)
        found = spark.read.parquet(path)
        return found.filter(F.col("jaccard") >= self.config.threshold) if self.anchored else found

    def inspect(self, path: str | None = None) -> Page:
        """The page of ``lsh-spark inspect`` for this result: the largest clusters,
        a sample of removed documents beside the kept ones with the words that
        differ and their exact Jaccard, counts, histogram and S-curve.  A string
        of HTML that a notebook renders inline; also written to ``path`` (any
        store) when given.  Only a bounded number of documents is read."""
        from lsh_spark.inspection import dedup_page, saved_s_curve
        from lsh_spark.store import FileSystem

        spark = self.clusters.sparkSession
        fs = FileSystem(spark, self.workdir)
        page, _ = dedup_page(
            spark,
            "a DataFrame",
            self.report,
            self.clusters,
            self._input("inspect"),
            saved_s_curve(fs, self.workdir),
        )
        if path is not None:
            FileSystem(spark, path).write_text(path, page)
        return page

    def remove(self, df: DataFrame, drop_rejects: bool = False) -> DataFrame:
        """``df`` without the duplicates: the input's columns and rows, one
        document of each cluster.  Records the run rejected (empty text,
        binary content, ...; :attr:`rejects`) are kept unless ``drop_rejects``
        is true, as ``deduped/`` of the job drops them.  ``df`` is the input
        :func:`find_duplicates` read (or more columns of the same records): a
        record is looked up by its id, and one the run never saw is kept.
        Filtered by a broadcast id list where it is read, as ``deduped/``."""
        from lsh_spark.stages.cluster import kept_documents
        from lsh_spark.stages.verify_plan import small_id_list

        counts = self.report["counts"]
        if drop_rejects:
            in_clusters = counts["documents_in_duplicate_clusters"]
            kept = kept_documents(df, self.clusters, self.rejects, in_clusters, self.id_col)
            return kept.select(*df.columns)
        removed = self.clusters.filter(~F.col("keep")).select(F.col("id").alias(self.id_col))
        return df.join(
            small_id_list(removed, counts["removed_documents"]), self.id_col, "left_anti"
        ).select(*df.columns)

    def _input(self, what: str) -> DataFrame:
        if self.source is None:
            raise ValueError(f"{what}: this Duplicates holds no input DataFrame (source=None)")
        return self.source


def _all_removals(dups: Duplicates) -> DataFrame:
    """:attr:`Duplicates.removals` of the clusters before anchoring."""
    from lsh_spark.removals import removals

    spark = dups.clusters.sparkSession
    n = dups.report.get("anchored", {}).get("unanchored_removed", None)
    n = dups.report["counts"]["removed_documents"] if n is None else n
    clusters = spark.read.parquet(f"{dups.workdir}/clusters")
    return removals(spark, dups._input("removals"), dups.config, clusters, n)


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
    config: DedupConfig | None = None,
    id_col: str | None = None,
    text_col: str | None = None,
    threshold: float | None = None,
    workdir: str | None = None,
    overwrite: bool = False,
    anchored: bool = False,
    **options: Any,
) -> Duplicates:
    """Near-duplicate clusters of the documents of ``df``.

    Parameters
    ----------
    df : DataFrame
        One row per document, with a unique ``id_col`` (string or integer)
        and a ``text_col``.  It is read twice (signatures, then the text of
        nothing else: only ids come back), so cache an expensive one.
    config : DedupConfig, optional
        The options (e.g. ``DedupConfig.from_yaml("conf/local.yaml")``); the
        keyword arguments win over it.
    id_col, text_col, threshold, **options
        The options of ``jobs/dedup.py`` (docs/options.md), with underscores
        (dashes, as in a YAML file, are taken too); unset: the ``config``'s,
        else the defaults (``id``, ``text``, 0.8).
    workdir : str, optional
        Where the stages write (Parquet): a directory every executor reaches
        (``hdfs://``, ``s3a://``, ...).  Default, in local mode only: a new
        temporary directory.
    overwrite : bool
        Replace ``workdir`` if it holds an earlier result.
    anchored : bool
        Clusters anchored on their kept documents: a member whose own exact
        Jaccard with the kept document is below the threshold is not removed
        (it becomes a cluster of its own).  Computes :attr:`Duplicates.removals`.

    Examples: docs/api.md.
    """
    given = dict(id_col=id_col, text_col=text_col, threshold=threshold, **options)
    cfg = _config("find_duplicates", DedupConfig, config, **given)
    if cfg.keep_order:
        from lsh_spark.stages.cluster import keep_columns

        with python_wording():
            keep_columns(df.sparkSession, df, cfg)
    from lsh_spark.pipeline import run_dedup

    spark = df.sparkSession
    where = _workdir(spark, workdir)
    report = _run(spark, lambda: run_dedup(spark, df, where, cfg, overwrite, deduped=False))
    dups = Duplicates(
        pairs=spark.read.parquet(f"{where}/pairs"),
        clusters=spark.read.parquet(f"{where}/clusters"),
        report=report,
        workdir=where,
        id_col=cfg.id_col,
        config=cfg,
        source=df,
    )
    return _anchored(dups) if anchored else dups


def _anchored(dups: Duplicates) -> Duplicates:
    """``dups`` with clusters anchored on their kept documents (written to
    ``workdir/anchored_clusters``) and the report's cluster counts for them."""
    from lsh_spark.removals import anchor

    spark = dups.clusters.sparkSession
    path = f"{dups.workdir}/anchored_clusters"
    anchor(dups.clusters, dups.removals, dups.config.threshold).write.mode("overwrite").parquet(
        path
    )
    clusters = spark.read.parquet(path)
    dup = F.col("cluster_size") > 1
    row = clusters.agg(
        F.count(F.when(dup, 1)).alias("in_dup"),
        F.count(F.when(F.col("keep"), 1)).alias("kept"),
        F.count(F.when(dup & F.col("keep"), 1)).alias("dup_clusters"),
        F.coalesce(F.max("cluster_size"), F.lit(0)).alias("largest"),
        F.count(F.lit(1)).alias("docs"),
    ).first()
    counts = dict(dups.report["counts"])
    before = counts["removed_documents"]
    counts.update(
        clusters=row["kept"],
        duplicate_clusters=row["dup_clusters"],
        documents_in_duplicate_clusters=row["in_dup"],
        largest_cluster=row["largest"],
        deduped_documents=row["kept"],
        removed_documents=row["docs"] - row["kept"],
    )
    anchored = {
        "threshold": dups.config.threshold,
        "unanchored_removed": before,
        "released": before - counts["removed_documents"],
    }
    report = dict(dups.report, counts=counts, anchored=anchored)
    return Duplicates(
        pairs=dups.pairs,
        clusters=clusters,
        report=report,
        workdir=dups.workdir,
        id_col=dups.id_col,
        config=dups.config,
        source=dups.source,
        anchored=True,
    )


def decontaminate(
    df: DataFrame,
    references: DataFrame | Mapping[str, DataFrame],
    *,
    config: DedupConfig | None = None,
    id_col: str | None = None,
    text_col: str | None = None,
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
    options = _flat_keys(options)
    own = {k: options.pop(k) for k in list(options) if k in options_of(DecontamConfig)}
    dc = _config("decontaminate", DecontamConfig, None, **own)
    given = dict(id_col=id_col, text_col=text_col, **options)
    cfg = _config("decontaminate", DedupConfig, config, **given)
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


@dataclass(frozen=True)
class Advice:
    """What :func:`advise` recommends.

    Attributes
    ----------
    recommended : dict
        ``num_perm``, ``bands``, ``rows`` (SimHash: ``max_hamming``, ``blocks``,
        ``tables``), the predicted recall at the threshold, candidate pairs per
        document and the flags to pass.
    config : DedupConfig
        The options with the recommendation applied, for ``find_duplicates(df,
        config=advice.config)``.
    s_curve : list of dict
        ``[{"s": similarity, "p": candidate probability}, ...]`` of the
        recommended banding (empty for SimHash).
    report : dict
        Everything ``advice.json`` of ``jobs/advise.py`` holds.
    png : bytes
        The plot (``s_curve.png``): the S-curve over the sample's histogram;
        a notebook shows it.
    """

    recommended: dict[str, Any]
    config: DedupConfig
    s_curve: list[dict[str, float]]
    report: dict[str, Any]
    png: bytes = field(repr=False)

    def _repr_png_(self) -> bytes:
        return self.png


def advise(
    df: DataFrame,
    *,
    config: DedupConfig | None = None,
    id_col: str | None = None,
    text_col: str | None = None,
    threshold: float | None = None,
    sample: int = 2000,
    **options: Any,
) -> Advice:
    """Recommend LSH parameters for the documents of ``df`` from a sample of
    ``sample`` of them, as ``jobs/advise.py``: the exact similarity of every
    pair of the sample, the predicted recall at ``threshold`` and cost of each
    ``num_perm``, checked by hashing the sample.  Options as in
    :func:`find_duplicates`.  Only the sample comes back to the driver."""
    from lsh_spark.advisor import advise as advise_on
    from lsh_spark.advisor import s_curve_png, simhash_png
    from lsh_spark.config import s_curve

    given = dict(id_col=id_col, text_col=text_col, threshold=threshold, **options)
    cfg = _config("advise", DedupConfig, config, **given)
    if not (isinstance(sample, int) and 2 <= sample <= 20000):
        raise ValueError(f"sample must be an integer from 2 to 20000, got {sample!r}")
    spark = df.sparkSession
    found = _run(spark, lambda: advise_on(spark, df, cfg, sample))
    plotted = found.pop("_curve")
    rec = found["recommended"]
    if cfg.method == "simhash":
        png, curve = simhash_png(found), []
        found.pop("_by_k")
        k, blocks = rec["max_hamming"], rec["blocks"]
        chosen = _config("advise", DedupConfig, cfg, max_hamming=k, simhash_blocks=blocks)
    else:
        chosen, measures = plotted
        png = s_curve_png(chosen, measures, "advice for a DataFrame")
        curve = s_curve(*chosen.band_params())
    return Advice(recommended=rec, config=chosen, s_curve=curve, report=found, png=png)


@dataclass(frozen=True)
class CrawlBatch:
    """What :meth:`CrawlIndex.dedup_batch` did: DataFrames ``deduped`` (the
    batch's new documents, now in the index), ``duplicates`` (``id``,
    ``duplicate_of``, ``jaccard``, ``duplicate_of_source``), ``superseded``
    and ``rejects``, the ``report`` dict (``status``: ``committed`` or
    ``already_applied``) and the ``output`` directory holding them.  A batch
    already applied changes nothing and its DataFrames are None (the first
    run's output holds them)."""

    deduped: DataFrame | None
    duplicates: DataFrame | None
    superseded: DataFrame | None
    rejects: DataFrame | None
    report: dict[str, Any]
    output: str


@dataclass(frozen=True)
class CrawlIndex:
    """The incremental crawl index of ``jobs/crawl_dedup.py`` (docs/crawl.md), for
    pipelines that hold each batch as a DataFrame.

    >>> index = CrawlIndex.open(str(getfixture("tmp_path") / "index"))
    >>> index.describe()["documents"]
    0
    """

    spark: SparkSession
    path: str

    @classmethod
    def open(cls, path: str, spark: SparkSession | None = None) -> CrawlIndex:
        """The index at ``path`` (created by its first batch), in ``spark`` (default:
        the active session)."""
        return cls(spark or SparkSession.active(), path)

    def describe(self) -> dict[str, Any]:
        """The current version's figures: ``version``, ``documents``, ``bytes``,
        ``segments``, ``batches`` (all 0 for a new index)."""
        from lsh_spark.index import CrawlIndex as Store
        from lsh_spark.index import describe

        return describe(Store(self.spark, self.path).current())

    def dedup_batch(
        self,
        df: DataFrame,
        *,
        batch_id: str,
        output: str | None = None,
        config: DedupConfig | None = None,
        keep: str = "oldest",
        max_retries: int = 3,
        **options: Any,
    ) -> CrawlBatch:
        """Deduplicate the batch ``df`` within itself and against the index, then
        add its new documents to the index: ``crawl_dedup.py``'s code path, with
        the same commit (one compare-and-swap of the manifest; a batch that loses
        it runs again, ``max_retries`` times) and the same re-run rule (the same
        ``batch_id`` again changes nothing).

        ``df``: one row per page, ``id`` and ``text`` columns (or ``id_col``,
        ``text_col``), optionally ``fetch_time`` (timestamp, for ``keep``),
        ``url``, ``content_digest``.  ``output``: where the batch's datasets are
        written (default, in local mode: a temporary directory); ``keep``:
        ``oldest`` or ``newest``; options as in :func:`find_duplicates`.
        """
        from lsh_spark.crawl import run_crawl_batch

        cfg = _config("dedup_batch", DedupConfig, config, **options)
        spark = df.sparkSession
        where = _workdir(spark, output)
        report = _run(
            spark,
            lambda: run_crawl_batch(spark, df, self.path, where, cfg, batch_id, keep, max_retries),
        )
        ran = report["status"] != "already_applied"
        read = {
            n: spark.read.parquet(f"{where}/{n}") if ran else None
            for n in ("deduped", "duplicates", "superseded", "rejects")
        }
        return CrawlBatch(**read, report=report, output=where)


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
    from lsh_spark.shingle import text_shingles

    cfg = _config("shingles", DedupConfig, shingle=kind, k=k, seed=seed, tokens=tokens)
    return text_shingles(df, text_col, cfg.shingle, cfg.shingle_k, cfg.seed, cfg.token_mode, out)


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
    num_perm: int | None = None,
    bands: int | None = None,
    rows: int | None = None,
    target_recall: float = 0.99,
    id_col: str = "id",
    signature_col: str = "signature",
) -> DataFrame:
    """``(id_col, signature_col, ...)`` -> ``(id_col, band, bucket)``: one row per
    LSH band; documents sharing a ``(band, bucket)`` are candidates.
    ``bands`` x ``rows`` are chosen from ``threshold`` and the signatures'
    length as the job chooses them unless given.

    ``num_perm``: the signatures' length, read from the first one when not
    given.  Every signature must have that length and none may be null: a
    query on the result fails naming the first id that does not
    (``band_keys: signature of id 'x' has 64 values, expected 128``).

    >>> spark = getfixture("spark")
    >>> df = spark.createDataFrame([("a", "one two three four")], "id string, text string")
    >>> sigs = df.transform(shingles, k=2).transform(minhash, num_perm=16)
    >>> sigs.transform(band_keys, bands=4, rows=4).count()
    4
    """
    from lsh_spark.banding import explode_bands

    for name in (id_col, signature_col):
        if name not in df.columns:
            raise ConfigError(
                f"band_keys: column {name!r} not in input; columns: {', '.join(df.columns)}"
            )
    sig = F.col(signature_col)
    if num_perm is None:
        first = df.filter(sig.isNotNull()).select(F.size(sig)).first()
        num_perm = first[0] if first is not None else DedupConfig.num_perm
    cfg = _config(
        "band_keys",
        DedupConfig,
        threshold=threshold,
        num_perm=num_perm,
        bands=bands,
        rows=rows,
        target_recall=target_recall,
    )
    # A filter (never pruned, unlike a column a count() does not read) that
    # fails the query on the first bad signature.
    who = F.coalesce(F.col(id_col).cast("string"), F.lit("null"))
    length = F.size(sig).cast("string")
    wrong = F.lit(f" values, expected {cfg.num_perm} (num_perm)")
    valid = (
        F.when(
            sig.isNull(), F.raise_error(F.concat(F.lit("band_keys: null signature of id "), who))
        )
        .when(
            F.size(sig) != cfg.num_perm,
            F.raise_error(
                F.concat(F.lit("band_keys: signature of id "), who, F.lit(" has "), length, wrong)
            ),
        )
        .otherwise(F.lit(True))
    )
    checked = df.filter(valid).select(F.col(id_col).alias("id"), sig.alias("signature"))
    keys = explode_bands(checked, *cfg.band_params())
    return keys.withColumnRenamed("id", id_col) if id_col != "id" else keys


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


def _flat_keys(values: Mapping[str, Any]) -> dict[str, Any]:
    """Keys as a YAML file may write them (``num-perm``) -> keyword names."""
    return {str(k).replace("-", "_"): v for k, v in values.items()}


def _config(fn: str, cls: type, config: Any = None, **values: Any) -> Any:
    """``cls`` from ``config``'s values (a config object of ``cls``, or None) and
    ``values`` (None: not given) over them; errors in Python's wording."""
    if config is not None and not isinstance(config, cls):
        raise TypeError(f"{fn}() config must be a {cls.__name__}, got {type(config).__name__}")
    values = _flat_keys(values)
    unknown = sorted(set(values) - options_of(cls) - {"simhash", "vectors"})
    on_frames = cls is DedupConfig and fn not in ("shingles", "minhash", "band_keys")
    if on_frames:
        unknown += [k for k in FILE_OPTIONS if k in values]
    if unknown:
        allowed = ", ".join(sorted(options_of(cls) - set(FILE_OPTIONS)))
        raise TypeError(
            f"{fn}() got an unexpected keyword argument {unknown[0]!r}; the options are: {allowed}"
        )
    with python_wording():
        nullable = _nullable(cls)
        base = {}
        if config is not None:  # a DataFrame's columns are known: no file options
            base = {k: v for k, v in config.flat().items() if not (on_frames and k in FILE_OPTIONS)}
        given = {
            k: v for k, v in values.items() if v is not None or (config is None and k in nullable)
        }
        return cls(**{**base, **given})


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
