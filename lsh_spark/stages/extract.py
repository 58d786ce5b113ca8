"""WARC input: extract the pages once into ``extracted/`` before the signature stage."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from lsh_spark.config import DedupConfig
from lsh_spark.readers import detect_format
from lsh_spark.stages.common import Output, Timer
from lsh_spark.store import input_files
from lsh_spark.warc import extract_warc, register_extracted, skipped_counts


def extract_crawl_input(
    spark: SparkSession, input_path: str | DataFrame, out: Output, cfg: DedupConfig
) -> dict[str, Any]:
    """For WARC input, extract the pages once into ``extracted/`` of the output.

    Later reads of ``input_path`` in this process read that Parquet instead of
    parsing the crawl files again.  Returns the report's ``warc`` section
    (empty for other formats and for a DataFrame).
    """
    if not isinstance(input_path, str):
        return {}
    fmt = cfg.format or detect_format(input_files(spark, input_path))
    if fmt != "warc":
        return {}
    timer = Timer(spark)
    with timer("extract"):
        out.write(extract_warc(spark, input_path, cfg.text_col, cfg.max_record_bytes), "extracted")
        extracted = out.read("extracted")
        register_extracted(input_path, out.path("extracted"))
        skipped = skipped_counts(extracted)
        records = extracted.count()
    return {
        "warc": {
            "records": records,
            "skipped": sum(skipped.values()),
            "skipped_by_reason": skipped,
        },
        "seconds": timer.seconds,
        "cpu_seconds": timer.cpu,
    }


def release_crawl_input(input_path: str | DataFrame, out: Output) -> None:
    """Forget the extracted pages of ``input_path`` and delete ``extracted/``."""
    register_extracted(input_path, None)
    out.fs.delete(out.path("extracted"))
