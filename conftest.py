"""One local SparkSession for the whole test run (created lazily, never at import).

At the repository root so the fixtures also reach the doctests collected from
``lsh_spark/`` (``--doctest-modules``), which get them with ``getfixture("spark")``.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")


def pytest_collection_modifyitems(items):
    """docs/api.md's examples run whole pipelines: ``heavy`` (a doctest file
    cannot carry a marker itself)."""
    for item in items:
        if item.nodeid.startswith("docs/"):
            item.add_marker(pytest.mark.heavy)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("lsh-spark-tests")
        # Two shuffle partitions, one per core (tests of more set their own).
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "64")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        # Catalog tables (--input-table, --output-table) under the run's tmp directory.
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def sample_path():
    return SAMPLE


@pytest.fixture
def s3(spark, monkeypatch):
    """An empty bucket on a moto server on a free port; Spark's S3A endpoint
    points at it for the test."""
    server_mod = pytest.importorskip(
        "moto.server", reason="moto[server] is not installed (pip install -e '.[test]')"
    )
    import boto3

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        # moto keeps its buckets per process: start from an empty store.
        urllib.request.urlopen(urllib.request.Request(endpoint + "/moto-api/reset", method="POST"))
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="lsh-index")
        spark.conf.set("spark.hadoop.fs.s3a.endpoint", endpoint)
        yield client
    finally:
        spark.conf.unset("spark.hadoop.fs.s3a.endpoint")
        server.stop()
