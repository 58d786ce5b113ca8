"""Writes the compatibility fixtures of one release into tests/data/v<VERSION>/.

    git worktree add /tmp/lsh-spark-0.2.0 <commit of the release>
    PYTHONPATH=/tmp/lsh-spark-0.2.0 python scripts/write_compat_fixtures.py tests/data/v0.2.0

Run with the release's own code on the path (the commit that ``lsh_spark.__version__``
names), it deduplicates ``corpus.jsonl``, builds a crawl index from ``batch-1.jsonl``
and ``batch-2.jsonl`` and decontaminates ``corpus.jsonl`` against
``reference.jsonl``, all from the folder given, with the release's default options,
and stores what a later release reads: ``dedup/`` (signatures/, pairs/, clusters/,
report.json), ``crawl-index/`` (manifests and segments) and ``decontam/``
(matches/, report.json).  Paths of the machine that wrote them are replaced by
``<fixture>`` in the JSON files.  tests/test_compat.py reads them.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path


def _scrub(folder: Path, tmp: str) -> None:
    """Replace the machine's paths in every JSON file under ``folder``."""
    for path in folder.rglob("*.json"):
        text = path.read_text(encoding="utf-8")
        for prefix in (f"file://{tmp}", f"file:{tmp}", tmp):
            text = text.replace(prefix, "<fixture>")
        path.write_text(text, encoding="utf-8")


def _scrub_parquet(folder: Path, tmp: str) -> None:
    """Replace the machine's paths in the string columns of the Parquet files under
    ``folder`` (decontamination's ``reference_source``), keeping the schema."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    for path in folder.rglob("*.parquet"):
        table = pq.read_table(path)
        columns = [
            pc.replace_substring(col, tmp, "<fixture>") if pa.types.is_string(col.type) else col
            for col in table.columns
        ]
        scrubbed = pa.table(columns, schema=table.schema)
        if not scrubbed.equals(table):
            pq.write_table(scrubbed, path, compression="zstd")


def _drop_checksums(folder: Path) -> None:
    for path in folder.rglob(".*.crc"):
        path.unlink()


def main(target: str) -> None:
    from pyspark.sql import SparkSession

    import lsh_spark
    from lsh_spark import commands

    fixtures = Path(target).resolve()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("write_compat_fixtures")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in ("corpus.jsonl", "batch-1.jsonl", "batch-2.jsonl", "reference.jsonl"):
            shutil.copy(fixtures / name, work / name)
        at = str(work.resolve()) + os.sep
        commands.dedup(["--input", at + "corpus.jsonl", "--output", at + "dedup"], spark)
        for n in (1, 2):
            commands.crawl(
                [
                    "--batch", f"{at}batch-{n}.jsonl", "--index", at + "crawl-index",
                    "--output", f"{at}crawl-{n}", "--batch-id", f"batch-{n}",
                ],
                spark,
            )  # fmt: skip
        commands.decontaminate(
            [
                "--input", at + "corpus.jsonl", "--reference", at + "reference.jsonl",
                "--output", at + "decontam",
            ],
            spark,
        )  # fmt: skip
        keep = {
            "dedup": ("signatures", "pairs", "clusters", "report.json"),
            "crawl-index": None,
            "decontam": ("matches", "report.json"),
        }
        for folder, parts in keep.items():
            dest = fixtures / folder
            shutil.rmtree(dest, ignore_errors=True)
            if parts is None:
                shutil.copytree(work / folder, dest)
            else:
                dest.mkdir()
                for part in parts:
                    src = work / folder / part
                    (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / part)
            _scrub(dest, str(work.resolve()))
            _scrub_parquet(dest, str(work.resolve()))
            _drop_checksums(dest)
    (fixtures / "VERSION").write_text(lsh_spark.__version__ + "\n", encoding="utf-8")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/v0.2.0")
