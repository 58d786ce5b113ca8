"""What every pipeline stage uses: its output, its timer and job tags, observed counts."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from lsh_spark import processes
from lsh_spark.config import DedupConfig
from lsh_spark.session import classic_context, tagged
from lsh_spark.store import FileSystem

log = logging.getLogger(__name__)

# Writer options of ``shingles/``: 64-bit hashes do not compress and never
# repeat within a page, so a codec and Parquet's dictionary attempt only cost
# time.
SCRATCH_PARQUET = {"compression": "none", "parquet.enable.dictionary": "false"}
# Writer options of ``signatures/``: every column but the shingle count is a
# unique id or a hash, so Parquet's dictionary attempt (a hash map of the first
# megabyte of values per column, then a fallback to plain encoding) only costs
# time and saves no bytes.
SIGNATURE_PARQUET = {"parquet.enable.dictionary": "false"}


class Output(Protocol):
    """Where a stage reads and writes its datasets (:class:`lsh_spark.outputs.StagedOutput`
    for a whole run, :class:`lsh_spark.outputs.StagewiseOutput` for one stage job)."""

    fs: FileSystem

    def path(self, name: str) -> str: ...
    def write(self, df: DataFrame, name: str, **options: str) -> None: ...
    def replace(self, df: DataFrame, name: str) -> None: ...
    def read(self, name: str) -> DataFrame: ...


def checkpoint_dir(out: Output, cfg: DedupConfig) -> str:
    """Where clustering saves its rounds: ``--checkpoint-dir``, else ``_checkpoints``
    in the output (deleted before the output is committed)."""
    return cfg.checkpoint_dir or out.path("_checkpoints")


class Timer:
    """Wall-clock seconds per named section, for the report, and in local mode
    the CPU seconds the driver, the JVM and the Python workers spent in it
    (:mod:`lsh_spark.processes`; ``cpu``, empty where they cannot be read).

    With a session, the Spark jobs a section starts are tagged with the
    section's name (:func:`tagged`).
    """

    def __init__(self, spark: SparkSession | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, dict[str, float]] = {}
        self.spark = spark
        self._local = spark is not None and local_processes(spark)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        before = processes.snapshot() if self._local else None
        log.info("%s: started", name)
        try:
            with tagged(self.spark, name):
                yield
        finally:
            self.seconds[name] = round(time.perf_counter() - start, 3)
            if before is not None and (cpu := processes.spent(before, processes.snapshot())):
                self.cpu[name] = cpu
            log.info("%s: done in %.1f s", name, self.seconds[name])


def local_processes(spark: SparkSession) -> bool:
    """Whether the session's processes all run here (classic local mode)."""
    context = classic_context(spark)
    return context is not None and context.master.startswith("local")


def log_counts(stage: str, section: dict) -> None:
    """One INFO line of a finished stage's counts (documents, pairs, ...)."""
    counts = section.get("counts", {})
    shown = ", ".join(
        f"{value:,} {key.replace('_', ' ')}"
        for key, value in counts.items()
        if isinstance(value, int) and not isinstance(value, bool)
    )
    if shown:
        log.info("%s: %s", stage, shown)


class Observed:
    """Aggregate metrics of a DataFrame, computed while it is written."""

    def __init__(self, df: DataFrame, metrics: dict[str, Column]) -> None:
        self._metrics = [value.alias(name) for name, value in metrics.items()]
        self._obs = Observation()
        self.df = df.observe(self._obs, *self._metrics)

    def result(self, out: Output, name: str) -> dict:
        """The metrics, once ``self.df`` has been written to ``out`` as ``name``.

        A Spark Connect server of Spark 4.0 drops an observation whose metrics
        arrive more than 100 ms after the query ends (SPARK-54279, fixed in
        4.1), and the client then holds an empty result: the metrics are then
        computed again by one aggregation of what was written.
        """
        got = self._obs.get
        if got:
            return got
        log.warning("observed metrics of %s/ did not arrive (SPARK-54279); aggregating it", name)
        return out.read(name).agg(*self._metrics).first().asDict()


def observed(df: DataFrame, **metrics: Column) -> tuple[DataFrame, Observed]:
    """``df`` plus aggregate ``metrics`` (named by keyword) computed while it is
    written, so a count for the report needs no job of its own.

    The caller must run exactly one action on the returned DataFrame (one
    write) before reading :meth:`Observed.result`; place it on the last step of
    a plan (the writing stage), where Spark applies each task's metrics once
    even if the task is retried.  Every metric must be an aggregate of the
    written columns.
    """
    seen = Observed(df, metrics)
    return seen.df, seen


def restore_id_col(df: DataFrame, cfg: DedupConfig, derived: bool) -> DataFrame:
    """Give the user's id column its own name back in ``deduped/``."""
    if derived or cfg.id_col == "id":
        return df
    df = df.withColumnRenamed("id", cfg.id_col)
    return df.withColumnRenamed("_input_id", "id") if "_input_id" in df.columns else df


def longest_id() -> Column:
    """The aggregate of the longest ``id`` in UTF-8 bytes (ids of any type, as strings)."""
    return F.max(F.octet_length(F.col("id").cast("string")))


def accepted_shingles(out: Output) -> DataFrame:
    """``(id, shingles)`` of every accepted document, from ``shingles/``."""
    return out.read("shingles").filter(F.col("shingles").isNotNull()).select("id", "shingles")
