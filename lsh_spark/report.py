"""The run's ``report.json``: its header, the merge of the stages' sections, histograms.

Each stage returns a section (a dict of counts, timings and figures);
:func:`merge_reports` merges them into one report.
"""

from __future__ import annotations

import json
import math
import urllib.request
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lsh_spark import __version__
from lsh_spark.config import DedupConfig
from lsh_spark.readers import input_name
from lsh_spark.session import classic_context, stage_of_job

# Similarity histograms (Jaccard, cosine) have this many bins of equal width
# over [0, 1] (width 0.05), 1.0 falling in the last.
SIMILARITY_BINS = 20
# Rows of the cluster-size histogram in the report (the smallest sizes first).
CLUSTER_SIZE_ROWS = 50
# The report's byte figures per pipeline stage and the stage fields of Spark's
# monitoring REST API they sum.
STAGE_BYTES = {
    "read": "inputBytes",
    "shuffle_write": "shuffleWriteBytes",
    "shuffle_read": "shuffleReadBytes",
    "written": "outputBytes",
}
# Seconds to wait for an answer of the driver's web UI.
REST_TIMEOUT_SECONDS = 30


def similarity_bin(value: Column) -> Column:
    """The bin of a value in [0, 1] among ``SIMILARITY_BINS`` of equal width."""
    return F.least(F.floor(value * SIMILARITY_BINS), F.lit(SIMILARITY_BINS - 1))


def similarity_bin_of(threshold: float) -> int:
    """The bin :func:`similarity_bin` gives ``threshold`` (the same double
    arithmetic): no value at or above the threshold falls in a lower bin.

    >>> similarity_bin_of(0.8), similarity_bin_of(1.0), similarity_bin_of(0.0)
    (16, 19, 0)
    """
    return max(0, min(math.floor(float(threshold) * SIMILARITY_BINS), SIMILARITY_BINS - 1))


def histogram_metrics(key: Column, bins: int, first: int = 0) -> dict[str, Column]:
    """Observation metrics ``bin<first> .. bin<bins-1>``: rows whose integer ``key``
    is each bin (the caller's key stays within ``first .. bins - 1``).

    Each metric is an aggregate evaluated on every written row, so bins that no
    row can reach (below the threshold's) are left out, which matters when
    ``pairs/`` has tens of millions of rows.
    """
    return {f"bin{b}": F.count(F.when(key == b, 1)) for b in range(first, bins)}


def histogram(metrics: dict[str, Any]) -> list[tuple[int, int]]:
    """``(bin, count)`` of the non-empty bins of :func:`histogram_metrics`, in order.

    >>> histogram({"bin17": 2, "bin16": 0, "bin19": 5, "exact": 5})
    [(17, 2), (19, 5)]
    """
    counts = sorted((int(k[3:]), int(v)) for k, v in metrics.items() if k.startswith("bin"))
    return [(b, n) for b, n in counts if n]


def merge_reports(*sections: dict[str, Any]) -> dict[str, Any]:
    """Merge stage sections: dict values are merged key by key, others replaced.

    >>> merge_reports({"counts": {"a": 1}, "x": 1}, {"counts": {"b": 2}, "x": 2})
    {'counts': {'a': 1, 'b': 2}, 'x': 2}
    """
    merged: dict[str, Any] = {}
    for section in sections:
        for key, value in section.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return merged


def report_header(input_path: str | DataFrame, cfg: DedupConfig) -> dict[str, Any]:
    """The report's first keys: the version, the input and every parameter."""
    return {
        "lsh_spark_version": __version__,
        "input_path": input_name(input_path),
        "parameters": cfg.to_dict(),
    }


class StageBytes:
    """Bytes each pipeline stage's Spark jobs read, wrote and shuffled, from the
    completed stages that Spark's monitoring REST API lists
    (https://spark.apache.org/docs/latest/monitoring.html#rest-api), summed by
    their jobs' tag (:func:`lsh_spark.session.job_tag`).

    Built before the run's first job; :meth:`result` after its last.  The API is
    the driver's web UI, so without it (``spark.ui.enabled=false``, Spark
    Connect, a UI that refuses the request) the result says why there are no
    figures.  The UI keeps the last ``spark.ui.retainedJobs`` and
    ``spark.ui.retainedStages`` (1,000 each by default): where the run had more,
    ``complete`` is false and the figures are those of the kept ones.
    """

    def __init__(self, spark: SparkSession) -> None:
        context = classic_context(spark)
        self.api: str | None = None
        if context is None:
            self.unavailable = "Spark Connect: the driver's web UI is the server's"
        elif not context.uiWebUrl:
            self.unavailable = "the Spark UI is off (spark.ui.enabled=false)"
        else:
            self.api = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}"
        self.first_job = self._next_job()

    def _get(self, what: str) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.api}/{what}", timeout=REST_TIMEOUT_SECONDS) as r:
            return json.load(r)

    def _next_job(self) -> int:
        if self.api is None:
            return 0
        try:
            return 1 + max((job["jobId"] for job in self._get("jobs")), default=-1)
        except (OSError, ValueError) as exc:
            self.api, self.unavailable = None, f"the Spark UI did not answer: {exc}"
            return 0

    def result(self) -> dict[str, Any]:
        """``{"by_stage": {stage: {"read": bytes, ...}}, "complete": bool}``, or
        ``{"unavailable": why}``."""
        if self.api is None:
            return {"unavailable": self.unavailable}
        try:
            jobs = [job for job in self._get("jobs") if job["jobId"] >= self.first_job]
            stages = self._get("stages")
        except (OSError, ValueError) as exc:
            return {"unavailable": f"the Spark UI did not answer: {exc}"}
        stage_of: dict[int, str] = {}
        for job in sorted(jobs, key=lambda job: job["jobId"]):  # a stage counts for its first job
            name = stage_of_job(job.get("jobTags", []), job.get("description"))
            for sid in job["stageIds"]:
                stage_of.setdefault(sid, name or "other")
        by_stage: dict[str, dict[str, int]] = {}
        for attempt in stages:
            name = stage_of.get(attempt["stageId"])
            if name is not None and attempt["status"] == "COMPLETE":
                sums = by_stage.setdefault(name, dict.fromkeys(STAGE_BYTES, 0))
                for key, field in STAGE_BYTES.items():
                    sums[key] += int(attempt.get(field, 0))
        ids = {job["jobId"] for job in jobs}
        listed = {attempt["stageId"] for attempt in stages}
        complete = ids == set(range(self.first_job, max(ids, default=self.first_job - 1) + 1))
        complete = complete and set(stage_of) <= listed
        return {"by_stage": by_stage, "complete": complete}
