import gzip
import json
import os

import pytest

from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.readers import InputError, check_unique_ids, detect_format, read_corpus


@pytest.mark.parametrize(
    "names, fmt",
    [
        (["a.jsonl"], "jsonl"),
        (["a.json.gz", "b.jsonl.gz"], "jsonl"),
        (["p/x.parquet"], "parquet"),
        (["a.csv"], "csv"),
        (["a.tsv.gz"], "csv"),
        (["a.txt", "b.txt.bz2"], "text"),
    ],
)
def test_detect_format(names, fmt):
    assert detect_format(names) == fmt


def test_detect_format_refuses_unknown_and_mixed():
    with pytest.raises(ConfigError, match="--format"):
        detect_format(["a.xml"])
    with pytest.raises(ConfigError, match="mixes formats"):
        detect_format(["a.csv", "b.jsonl"])


def test_gzip_jsonl_with_custom_columns(spark, tmp_path):
    path = tmp_path / "docs.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for i in range(3):
            fh.write(json.dumps({"doc": f"k{i}", "body": f"text {i}", "id": i}) + "\n")
    df, facts = read_corpus(spark, str(path), DedupConfig(id_col="doc", text_col="body"))
    assert facts["format"] == "jsonl" and not facts["derived_ids"]
    rows = sorted(df.collect(), key=lambda r: r.id)
    assert [r.id for r in rows] == ["k0", "k1", "k2"]
    assert [r._input_id for r in rows] == [0, 1, 2]  # the user's own 'id' column is kept
    assert all(r.reject_reason is None for r in rows)


def test_parquet_with_integer_ids(spark, tmp_path):
    spark.createDataFrame([(1, "a b"), (2, None)], "id long, text string").write.parquet(
        str(tmp_path / "p")
    )
    df, facts = read_corpus(spark, str(tmp_path / "p"), DedupConfig())
    assert facts["format"] == "parquet"
    assert sorted(r.id for r in df.collect()) == [1, 2]


def test_text_files_one_document_per_file(spark, tmp_path):
    (tmp_path / "t" / "sub").mkdir(parents=True)
    (tmp_path / "t" / "a.txt").write_text("first document\nwith two lines")
    (tmp_path / "t" / "sub" / "b.txt").write_text("second")
    df, facts = read_corpus(spark, str(tmp_path / "t"), DedupConfig(text_unit="file"))
    got = {r.id: r.text for r in df.collect()}
    assert got == {"a.txt": "first document\nwith two lines", "sub/b.txt": "second"}
    assert facts["derived_ids"]


def test_missing_columns_and_paths_are_config_errors(spark, tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": 1, "body": "x"}\n')
    with pytest.raises(ConfigError, match="--text-col: column 'text' not in input; columns: "):
        read_corpus(spark, str(path), DedupConfig())
    with pytest.raises(ConfigError, match="--id-col: column 'key' not in input"):
        read_corpus(spark, str(path), DedupConfig(id_col="key", text_col="body"))
    with pytest.raises(ConfigError, match="--input: path does not exist"):
        read_corpus(spark, str(tmp_path / "nope"), DedupConfig())


def test_non_string_text_column_is_refused(spark, tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": 1, "text": {"nested": "x"}}\n')
    with pytest.raises(ConfigError, match="has type struct"):
        read_corpus(spark, str(path), DedupConfig())


def test_duplicate_ids_are_named(spark):
    df = spark.createDataFrame(
        [("a",), ("b",), ("a",), ("c",), ("c",), ("c",), (None,), (None,)], "id string"
    )
    with pytest.raises(InputError, match=r"'a' \(x2\), 'c' \(x3\)"):
        check_unique_ids(df)


def test_inferred_json_schema_is_reused_only_for_unchanged_input(spark, tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": 1, "text": "x"}\n')
    first, _ = read_corpus(spark, str(path), DedupConfig())
    again, _ = read_corpus(spark, str(path), DedupConfig())
    assert first.schema == again.schema
    import os
    import time

    path.write_text('{"id": 1, "text": "x", "url": "u"}\n')
    os.utime(path, (time.time() + 5, time.time() + 5))
    changed, _ = read_corpus(spark, str(path), DedupConfig())
    assert "url" in changed.columns and "url" not in first.columns


def test_a_given_schema_is_read_as_given_without_inferring(spark, tmp_path, monkeypatch):
    import lsh_spark.readers as io

    def no_inference(*_):
        raise AssertionError("the schema was inferred although --schema was given")

    monkeypatch.setattr(io, "_infer_json", no_inference)
    path = tmp_path / "a.jsonl"
    lines = [{"id": "a", "text": "x y", "n": 1}, {"id": "b", "text": "y z", "n": "many"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    cfg = DedupConfig(schema="id STRING, text STRING, n INT")
    df, _ = read_corpus(spark, str(path), cfg)
    assert df.schema["n"].dataType.simpleString() == "int"
    rows = {r.id: r for r in df.collect()}
    assert rows["a"].n == 1 and rows["a"].reject_reason is None
    # The record whose n is not an INT does not fit: rejected, never dropped.
    bad = [r for r in rows.values() if r.id != "a"]
    assert len(bad) == 1 and bad[0].reject_reason.startswith("invalid_record")

    csv = tmp_path / "a.csv"
    csv.write_text("id,text,n\na,x y,1\n")
    df, _ = read_corpus(spark, str(csv), cfg)
    assert [(r.id, r.n) for r in df.collect()] == [("a", 1)]


def test_a_bad_or_misplaced_schema_names_the_option(spark, tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": "a", "text": "x"}\n')
    with pytest.raises(ConfigError, match="--schema: cannot parse 'id STRING,, text'"):
        read_corpus(spark, str(path), DedupConfig(schema="id STRING,, text"))
    with pytest.raises(ConfigError, match="--text-col: column 'text' not in input"):
        read_corpus(spark, str(path), DedupConfig(schema="id STRING, body STRING"))
    pq_dir = tmp_path / "p"
    spark.createDataFrame([("a", "x")], "id string, text string").write.parquet(str(pq_dir))
    with pytest.raises(ConfigError, match="--schema: given for --format parquet"):
        read_corpus(spark, str(pq_dir), DedupConfig(schema="id STRING, text STRING"))


@pytest.mark.parametrize("kind", ["staged", "stagewise"])
def test_outputs_read_back_with_the_schema_spark_infers(spark, tmp_path, kind):
    from pyspark.sql import functions as F

    from lsh_spark.outputs import StagedOutput, StagewiseOutput

    out = (StagedOutput if kind == "staged" else StagewiseOutput)(spark, str(tmp_path / "out"))
    # Non-null columns, an array without null elements, a struct, a map, bytes,
    # and a column with metadata: Parquet gives them all back nullable.
    df = spark.range(3).select(
        "id",
        F.array("id", F.lit(7)).alias("a"),
        F.struct(F.col("id").alias("x"), F.lit("s").alias("y")).alias("s"),
        F.create_map(F.lit("k"), F.col("id")).alias("m"),
        F.lit(b"\x00").alias("b"),
        F.col("id").cast("string").alias("t", metadata={"note": "kept"}),
    )
    out.write(df, "d")
    assert out.read("d").schema == spark.read.parquet(out.path("d")).schema
    assert not df.schema["id"].nullable and out.read("d").schema["id"].nullable
    assert sorted(out.read("d").collect()) == sorted(df.collect())
    if kind == "staged":
        # Replacing a dataset replaces its recorded schema.
        out.replace(out.read("d").select("id", F.lit(1.5).alias("z")), "d")
        assert out.read("d").columns == ["id", "z"]
        assert out.read("d").schema == spark.read.parquet(out.path("d")).schema
        assert "d.new" not in out.schemas
    else:
        # Nothing of a stage is in place before its commit.
        assert not (tmp_path / "out" / "d").exists()
        out.commit()
        # A later stage job (another process) infers the schema: the same one.
        later = StagewiseOutput(spark, str(tmp_path / "out"))
        assert later.schemas == {} and later.read("d").schema == out.read("d").schema


def _late_corpus(path, late_id):
    """Documents with integer ids, near-duplicate pairs, and a last record whose
    id is ``late_id`` and which alone has the column ``late``."""
    words = [f"w{i}" for i in range(400)]
    rows = []
    for i in range(40):
        text = " ".join(words[(i // 2) * 9 : (i // 2) * 9 + 30])
        rows.append({"id": i, "text": text + (" extra" if i % 2 else "")})
    rows.append({"id": late_id, "text": " ".join(words[300:340]), "late": "kept"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.heavy
@pytest.mark.parametrize("late_id", [40, "late"])
def test_dedup_types_ids_from_the_whole_input_and_keeps_every_column(spark, tmp_path, late_id):
    from lsh_spark.pipeline import run_dedup

    path = tmp_path / "c.jsonl"
    _late_corpus(path, late_id)
    report = run_dedup(spark, str(path), str(tmp_path / "out"), DedupConfig(threshold=0.5))
    # A string id after integer ones: Spark types the column as string, nothing is rejected.
    assert report["counts"]["rejected"] == 0 and report["counts"]["input_records"] == 41
    assert report["counts"]["verified_pairs"] >= 10
    deduped = spark.read.parquet(str(tmp_path / "out" / "deduped"))
    assert dict(deduped.dtypes)["id"] == ("string" if isinstance(late_id, str) else "bigint")
    assert "late" in deduped.columns  # a column only the last record has
    assert deduped.filter("late = 'kept'").count() == 1


# -- FileSystem ---------------------------------------------------------------
def _tree(root):
    """Data files, hidden ones, ``_`` ones, a Hadoop checksum file and a nested dir."""
    (root / "sub" / ".hid").mkdir(parents=True)
    for name, text in {
        "a.txt": "aaaa",
        "sub/b.txt": "bb",
        "sub/.h.txt": "h",
        "_x.txt": "x",
        "sub/.hid/c.txt": "ccc",
        ".a.txt.crc": "crc!",
    }.items():
        (root / name).write_text(text)


def test_file_system_qualifies_local_paths_as_hadoop_did(spark, tmp_path, monkeypatch):
    from lsh_spark.store import FileSystem

    fs = FileSystem(spark, str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for given in (
        f"{tmp_path}/d",
        f"{tmp_path}/d/",
        f"file://{tmp_path}/d",
        f"file:{tmp_path}/d",
        f"{tmp_path}//d",
        f"{tmp_path}/x/../d",
        "d",
        "./d/",
    ):
        assert fs.qualify(given) == f"file:{tmp_path}/d", given
    assert fs.qualify(f"{tmp_path}/a b") == f"file:{tmp_path}/a b"  # not URL-encoded


def test_file_system_lists_fingerprints_and_sizes_a_tree(spark, tmp_path):
    from lsh_spark.store import FileSystem

    _tree(tmp_path / "t")
    root = f"file:{tmp_path}/t"
    fs = FileSystem(spark, str(tmp_path / "t"))
    assert fs.exists(str(tmp_path / "t")) and fs.is_dir(root)
    assert not fs.is_dir(f"{root}/a.txt") and not fs.exists(f"{root}/nope")
    # Hidden and _ files are left out by their own names; a hidden directory's are not
    # (as Hadoop's recursive listing did).
    assert fs.list_files(str(tmp_path / "t")) == [
        f"{root}/a.txt",
        f"{root}/sub/.hid/c.txt",
        f"{root}/sub/b.txt",
    ]
    fp = fs.fingerprint(root)
    assert [(n, size) for n, size, _ in fp] == [
        (f"{root}/a.txt", 4),
        (f"{root}/sub/.hid/c.txt", 3),
        (f"{root}/sub/b.txt", 2),
    ]
    assert all(abs(t / 1000 - os.path.getmtime(n[5:])) < 1 for n, _, t in fp)  # ms
    assert fs.fingerprint(f"{root}/a.txt") == fp[:1]
    assert fs.list_names(root) == ["_x.txt", "a.txt", "sub"]  # no checksum file
    assert fs.list_names(f"{root}/nope") == []
    assert fs.size_bytes(root) == 4 + 2 + 1 + 1 + 3  # hidden files count, checksums not
    assert fs.size_bytes(f"{root}/sub/b.txt") == 2


def test_file_system_writes_reads_renames_and_deletes(spark, tmp_path):
    from lsh_spark.store import FileSystem

    fs = FileSystem(spark, str(tmp_path))
    fs.write_text(f"{tmp_path}/new/dir/m.json", '{"é": 1}\r\n')  # creates the parents
    assert fs.read_text(f"file:{tmp_path}/new/dir/m.json") == '{"é": 1}\r\n'
    fs.write_bytes(f"{tmp_path}/new/b.bin", b"\x00\x01")
    assert (tmp_path / "new" / "b.bin").read_bytes() == b"\x00\x01"
    fs.rename(f"{tmp_path}/new/dir/m.json", f"{tmp_path}/v/m.json")  # parents created
    assert not fs.exists(f"{tmp_path}/new/dir/m.json") and fs.exists(f"{tmp_path}/v/m.json")
    fs.rename(f"{tmp_path}/new", f"{tmp_path}/a/b/moved")  # a directory, parents created
    assert sorted(os.listdir(tmp_path / "a" / "b" / "moved")) == ["b.bin", "dir"]
    with pytest.raises(OSError, match="could not rename"):
        fs.rename(f"{tmp_path}/nope", f"{tmp_path}/x")
    (tmp_path / "v" / ".m.json.crc").write_text("stale")
    fs.delete(f"{tmp_path}/v/m.json")  # with Hadoop's checksum file
    assert os.listdir(tmp_path / "v") == []
    fs.delete(f"{tmp_path}/a")
    fs.delete(f"{tmp_path}/absent")
    assert not (tmp_path / "a").exists()


def test_file_system_counts_parquet_row_groups_from_footers(spark, tmp_path):
    from lsh_spark.store import FileSystem

    path = str(tmp_path / "p")
    spark.range(100).repartition(3).write.parquet(path)
    assert FileSystem(spark, path).parquet_row_groups(path) == (3, 3, 100)


def test_file_system_names_an_unsupported_scheme(spark):
    from lsh_spark.store import FileSystem

    with pytest.raises(
        ConfigError,
        match=r"'ftp' is not supported; supported: local paths, "
        r"file:, hdfs://, s3://, s3a://, s3n://, gs://, abfss://, dbfs:/",
    ):
        FileSystem(spark, "ftp://host/corpus")


def test_file_system_keeps_the_s3a_scheme_for_spark(spark):
    from lsh_spark.store import FileSystem

    key = "spark.hadoop.fs.s3a.endpoint"
    spark.conf.set(key, "http://127.0.0.1:9")  # an S3-compatible store: no region look-up
    try:
        fs = FileSystem(spark, "s3a://bucket/index")
    finally:
        spark.conf.unset(key)
    assert fs.qualify("s3a://bucket/index/") == "s3a://bucket/index"
    assert fs._p("s3a://bucket/index/_manifests") == "bucket/index/_manifests"
    with pytest.raises(ValueError, match="not on the file system"):
        fs.exists("/tmp/local")


def test_observed_metrics_come_from_the_output_when_connect_drops_them(spark, tmp_path):
    from types import SimpleNamespace

    from pyspark.sql import functions as F

    from lsh_spark.outputs import StagewiseOutput
    from lsh_spark.stages.common import observed

    out = StagewiseOutput(spark, str(tmp_path / "out"))
    df = spark.range(10).withColumn("even", F.col("id") % 2 == 0)
    written, seen = observed(df, n=F.count(F.lit(1)), evens=F.count(F.when(F.col("even"), 1)))
    out.write(written, "rows")
    assert seen.result(out, "rows") == {"n": 10, "evens": 5}
    # What a Spark 4.0 Connect client holds when the server dropped the
    # metrics that came late (SPARK-54279): an empty result.
    seen._obs = SimpleNamespace(get={})
    assert seen.result(out, "rows") == {"n": 10, "evens": 5}
