"""A process that commits an output, for the fault-injection tests.

``python tests/commit_child.py staged OUT LABEL`` writes a small output (two
Parquet datasets whose rows all carry LABEL, a report.json) through
:class:`lsh_spark.outputs.StagedOutput` with overwrite and commits it;
``stagewise OUT LABEL`` writes a dataset and a report.json as one stage through
:class:`lsh_spark.outputs.StagewiseOutput` and commits it.  The tests set
``LSH_SPARK_FAULT=commit:<step>`` to have it SIGKILL itself at that step, or
``kill-before-commit`` as the last argument to die after writing.  Only file
operations run (local paths need no Spark session), so a run takes a moment.
"""

from __future__ import annotations

import os
import signal
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from lsh_spark.outputs import StagedOutput, StagewiseOutput

DATASETS = {"clusters": 3, "deduped": 2}  # files per dataset
ROWS_PER_FILE = 4


def write_dataset(fs, path: str, label: str, files: int) -> None:
    """``files`` Parquet files of ``ROWS_PER_FILE`` rows, then ``_SUCCESS``, as Spark writes."""
    for i in range(files):
        ids = [f"{label}-{i}-{j}" for j in range(ROWS_PER_FILE)]
        table = pa.table({"id": ids, "label": [label] * len(ids)})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        fs.write_bytes(f"{path}/part-{i:05d}.parquet", sink.getvalue().to_pybytes())
    fs.write_bytes(f"{path}/_SUCCESS", b"")


def main(kind: str, output: str, label: str, *flags: str) -> None:
    if kind == "staged":
        out = StagedOutput(None, output, overwrite=True)
        for name, files in DATASETS.items():
            write_dataset(out.fs, out.path(name), label, files)
        out.write_json("report.json", {"label": label})
    else:
        out = StagewiseOutput(None, output)
        write_dataset(out.fs, out.staged("clusters"), label, DATASETS["clusters"])
        out.write_json("report.json", {"label": label})
    if "kill-before-commit" in flags:
        os.kill(os.getpid(), signal.SIGKILL)
    out.commit()


if __name__ == "__main__":
    main(*sys.argv[1:])
