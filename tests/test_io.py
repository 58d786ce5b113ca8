import gzip
import json

import pytest

from lsh_spark.config import ConfigError, DedupConfig
from lsh_spark.io import InputError, check_unique_ids, detect_format, read_corpus


@pytest.mark.parametrize("names, fmt", [
    (["a.jsonl"], "jsonl"), (["a.json.gz", "b.jsonl.gz"], "jsonl"), (["p/x.parquet"], "parquet"),
    (["a.csv"], "csv"), (["a.tsv.gz"], "csv"), (["a.txt", "b.txt.bz2"], "text"),
])
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
        str(tmp_path / "p"))
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
    df = spark.createDataFrame([("a",), ("b",), ("a",), ("c",), ("c",), ("c",), (None,), (None,)],
                               "id string")
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


@pytest.mark.parametrize("kind", ["staged", "stagewise"])
def test_outputs_read_back_with_the_schema_spark_infers(spark, tmp_path, kind):
    from pyspark.sql import functions as F

    from lsh_spark.io import StagedOutput, StagewiseOutput

    out = (StagedOutput if kind == "staged" else StagewiseOutput)(spark, str(tmp_path / "out"))
    # Non-null columns, an array without null elements, a struct, a map, bytes,
    # and a column with metadata: Parquet gives them all back nullable.
    df = spark.range(3).select(
        "id", F.array("id", F.lit(7)).alias("a"),
        F.struct(F.col("id").alias("x"), F.lit("s").alias("y")).alias("s"),
        F.create_map(F.lit("k"), F.col("id")).alias("m"), F.lit(b"\x00").alias("b"),
        F.col("id").cast("string").alias("t", metadata={"note": "kept"}))
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
        # A later stage job (another process) infers the schema: the same one.
        later = StagewiseOutput(spark, str(tmp_path / "out"))
        assert later.schemas == {} and later.read("d").schema == out.read("d").schema


def _late_corpus(path, late_id):
    """Documents with integer ids, near-duplicate pairs, and a last record whose
    id is ``late_id`` and which alone has the column ``late``."""
    words = [f"w{i}" for i in range(400)]
    rows = []
    for i in range(40):
        text = " ".join(words[(i // 2) * 9:(i // 2) * 9 + 30])
        rows.append({"id": i, "text": text + (" extra" if i % 2 else "")})
    rows.append({"id": late_id, "text": " ".join(words[300:340]), "late": "kept"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))



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
