"""Airflow DAGs for lsh-spark's scheduled crawl dedup (Airflow 2.7+ / 3.x).

* ``lsh_spark_crawl_dedup``: every day at 02:15 UTC, the previous day's crawl
  batch (``{crawl_root}/{ds}``) is deduplicated against the index with
  ``jobs/crawl_dedup.py``; batch id ``crawl-{ds}``, so a retry or a manual
  re-run of a committed day changes nothing.  ``max_active_runs=1`` and
  ``depends_on_past=True`` keep the days in order; ``catchup=True`` back-fills
  missed days one at a time.
* ``lsh_spark_index_compact``: Sundays at 05:00 UTC, ``jobs/index_compact.py``.

Both tasks run in the Airflow pool ``lsh_spark_index`` (create it with one
slot: ``airflow pools set lsh_spark_index 1 "lsh-spark index writers"``), so a
compaction never overlaps a batch.  Needs ``apache-airflow-providers-apache-spark``
and a Spark connection ``spark_default`` pointing at the cluster; set the
Airflow Variables ``lsh_spark_home``, ``lsh_spark_crawl_root``,
``lsh_spark_index`` and ``lsh_spark_results`` (defaults below).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow import DAG
from airflow.models import Variable
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

HOME = Variable.get("lsh_spark_home", default_var="/opt/lsh-spark")
CRAWL_ROOT = Variable.get("lsh_spark_crawl_root", default_var="hdfs:///crawl/batches")
INDEX = Variable.get("lsh_spark_index", default_var="hdfs:///dedup/index")
RESULTS = Variable.get("lsh_spark_results", default_var="hdfs:///dedup/results")

COMMON = dict(
    conn_id="spark_default",
    properties_file=f"{HOME}/conf/spark-cluster.properties",
    py_files=f"{HOME}/dist/lsh_spark.zip",
    archives=f"{HOME}/dist/lsh-spark-env.tar.gz#environment",
    env_vars={"PYSPARK_PYTHON": "./environment/bin/python"},
    pool="lsh_spark_index",
)

with DAG(
    dag_id="lsh_spark_crawl_dedup",
    schedule="15 2 * * *",
    start_date=datetime(2026, 11, 1),
    catchup=True,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10), "depends_on_past": True},
    tags=["lsh-spark"],
) as crawl_dag:
    SparkSubmitOperator(
        task_id="crawl_dedup",
        application=f"{HOME}/jobs/crawl_dedup.py",
        name="lsh-spark crawl_dedup {{ ds }}",
        application_args=[
            "--batch",
            CRAWL_ROOT + "/{{ ds }}",
            "--index",
            INDEX,
            "--output",
            RESULTS + "/{{ ds }}",
            "--batch-id",
            "crawl-{{ ds }}",
        ],
        **COMMON,
    )

with DAG(
    dag_id="lsh_spark_index_compact",
    schedule="0 5 * * 0",
    start_date=datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=1,
    tags=["lsh-spark"],
) as compact_dag:
    SparkSubmitOperator(
        task_id="index_compact",
        application=f"{HOME}/jobs/index_compact.py",
        name="lsh-spark index_compact",
        application_args=["--index", INDEX],
        **COMMON,
    )
