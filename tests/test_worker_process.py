"""What lsh-spark does in the Python workers (lsh_spark.worker_process): shadowed
archives off sys.path, the heap frozen."""

from __future__ import annotations

import os
import sys
import types
import zipfile

from lsh_spark import worker_process


def _module(file=None, path=None):
    m = types.ModuleType("m")
    m.__file__ = file
    if path is not None:
        m.__path__ = path
    return m


def test_top_level_names_are_the_importable_python_names():
    files = ["pyspark/__init__.py", "pyspark/sql/dataframe.py", "six.py", "ext.so",
             "org/apache/spark/SparkContext.class", "META-INF/MANIFEST.MF", "pkg/data.json",
             "cached.pyc"]
    assert worker_process.top_level_names(files) == {"pyspark", "six", "ext", "cached"}
    assert worker_process.top_level_names(["org/apache/x.class", "spark-version-info.properties"]) == set()


def test_shadowed_archives_are_those_whose_modules_all_load_from_elsewhere(tmp_path):
    site = str(tmp_path / "site-packages")
    jar, pyzip, pyfiles, used = (str(tmp_path / n) for n in
                                 ("spark-core.jar", "pyspark.zip", "deps.zip", "spark.zip"))
    contents = {
        jar: ["org/apache/spark/SparkContext.class"],
        pyzip: ["pyspark/__init__.py", "pyspark/worker.py"],
        pyfiles: ["helpers/__init__.py", "pyspark_extra.py"],
        used: ["py4j/__init__.py"],
    }
    modules = {
        "pyspark": _module(site + "/pyspark/__init__.py", [site + "/pyspark"]),
        "py4j": _module(used + "/py4j/__init__.py", [used + "/py4j"]),
        "pyspark_extra": _module(site + "/pyspark_extra.py"),
    }
    path = [site, jar, pyzip, pyfiles, used, str(tmp_path / "not-an-archive")]
    # The jar has no Python; PySpark's zip is behind the installed PySpark; the
    # --py-files zip has a module not imported yet (helpers); py4j comes from its zip.
    assert worker_process.shadowed_archives(path, contents, modules) == [jar, pyzip]
    # Once helpers is imported from elsewhere, its zip is shadowed too.
    modules["helpers"] = _module(site + "/helpers/__init__.py", [site + "/helpers"])
    assert worker_process.shadowed_archives(path, contents, modules) == [jar, pyzip, pyfiles]
    # A namespace package with a portion inside the archive keeps it.
    modules["helpers"] = _module(None, [site + "/helpers", pyfiles + "/helpers"])
    assert worker_process.shadowed_archives(path, contents, modules) == [jar, pyzip]


def test_archive_contents_reads_unopened_archives_and_skips_other_entries(tmp_path):
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("mod.py", "x = 1\n")
    broken = tmp_path / "broken.jar"
    broken.write_bytes(b"not a zip")
    opened = {"/somewhere/opened.zip": ["a.py"]}
    path = [str(tmp_path), str(archive), str(broken), "/somewhere/opened.zip",
            str(tmp_path / "missing.zip")]
    assert worker_process.archive_contents(path, opened) == {
        str(archive): ["mod.py"], "/somewhere/opened.zip": ["a.py"]}


def test_nothing_changes_outside_a_python_worker():
    before = list(sys.path)
    assert not worker_process.on_python_worker()
    assert worker_process.drop_shadowed_archives() == []
    assert sys.path == before


def test_python_workers_keep_no_shadowed_archive(spark):
    # Defined here so that the task carries it (this module is not on the workers' path).
    def _worker_path(_):
        import importlib
        import sys
        import zipimport

        import lsh_spark  # noqa: F401 (what drops the archives, on a worker's first import)
        from lsh_spark import worker_process

        importlib.invalidate_caches()  # as PySpark does before a task
        contents = worker_process.archive_contents(sys.path, zipimport._zip_directory_cache)
        yield (worker_process.on_python_worker(), sorted(p for p in sys.path if p.endswith(".jar")),
               worker_process.shadowed_archives(sys.path, contents, dict(sys.modules)),
               sys.modules["pyspark"].__file__)

    # Two rounds: the second reuses the workers of the first.
    for _ in range(2):
        for on_worker, jars, shadowed, pyspark_file in (
                spark.sparkContext.parallelize(range(2), 2).mapPartitions(_worker_path).collect()):
            assert on_worker
            assert shadowed == []
            # Spark's own jar holds no Python module: it never stays.
            assert not [j for j in jars if os.path.basename(j).startswith("spark-core")]
            # PySpark still imports from where it did.
            assert pyspark_file.endswith(os.path.join("pyspark", "__init__.py"))


def test_freeze_loaded_does_nothing_outside_a_python_worker():
    import gc

    before = gc.get_freeze_count()
    sys.modules["_lsh_spark_test_new_module"] = types.ModuleType("_lsh_spark_test_new_module")
    try:
        worker_process.freeze_loaded()
        assert gc.get_freeze_count() == before
    finally:
        del sys.modules["_lsh_spark_test_new_module"]


def test_freeze_loaded_freezes_a_workers_heap_when_modules_were_imported(spark):
    def probe(_):
        import gc
        import sys
        import types
        import uuid

        from lsh_spark.worker_process import freeze_loaded

        freeze_loaded()  # the modules of this worker so far: frozen now or before
        frozen = gc.get_freeze_count()
        unfrozen = len(gc.get_objects())
        junk = [[i] for i in range(1000)]  # new objects, no new module
        freeze_loaded()
        again = gc.get_freeze_count()
        name = "_lsh_spark_probe_" + uuid.uuid4().hex
        sys.modules[name] = types.ModuleType(name)  # a new module: frozen at the next call
        freeze_loaded()
        yield (frozen, unfrozen, again, gc.get_freeze_count(), len(junk))

    for frozen, unfrozen, again, after, _ in (
            spark.sparkContext.parallelize(range(2), 2).mapPartitions(probe).collect()):
        # pyspark, pyarrow and lsh-spark's modules: frozen, and far more than what is left.
        assert frozen > 10_000 and unfrozen < frozen / 10
        assert again == frozen  # no module imported: no freeze
        assert after > again  # a module imported: the new objects frozen
