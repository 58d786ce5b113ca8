"""The wheel as a user installs it, and the ``lsh-spark`` command.

The wheel is built with ``python -m build`` and installed from its ranges alone
into an empty virtualenv, and its ``lsh-spark`` command runs the dedup job on
the sample from outside the checkout, so only what the wheel holds is used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from lsh_spark import __version__
from lsh_spark.commands import COMMANDS, job_of, main
from lsh_spark.errors import LshSparkError
from lsh_spark.versions import NEWEST, UnsupportedSpark, check_spark, spark_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.mark.slow
def test_the_built_wheel_installs_from_the_ranges_and_runs_dedup_and_inspect(tmp_path):
    """The wheel installs with the newest PySpark of its [spark] range (no -c
    constraints.txt: the ranges alone); without the extra, --help and submit-path
    work and a command stops with one line; lsh-spark dedup --master --conf runs
    with the setting in its session and prints one JSON object on stdout."""
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), ROOT])
    (wheel,) = dist.glob("*.whl")
    assert wheel.name == f"lsh_spark-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(f"lsh_spark-{__version__}.dist-info/METADATA").decode()
        entry = zf.read(f"lsh_spark-{__version__}.dist-info/entry_points.txt").decode()
    assert not [n for n in names if n.startswith(("tests/", "jobs/", "bench/", "conf/"))]
    shipped = {f"lsh_spark/conf/{name}" for name in os.listdir(os.path.join(ROOT, "conf"))}
    assert shipped and shipped <= set(names)  # every settings file of conf/
    for folder, _, files in os.walk(os.path.join(ROOT, "lsh_spark")):  # every module
        rel = os.path.relpath(folder, ROOT)
        assert {f"{rel}/{f}" for f in files if f.endswith(".py")} <= set(names), rel
    assert "lsh-spark = lsh_spark.commands:main" in entry
    requires = [ln for ln in meta.splitlines() if ln.startswith("Requires-Dist:")]
    pyspark = [r for r in requires if "pyspark" in r]
    assert pyspark and all('extra == "spark"' in r for r in pyspark)  # never forced on a platform
    assert not [r for r in requires if "==" in r.split(";")[0]]  # ranges; pins: constraints.txt

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    py, bin_ = str(venv / "bin" / "python"), venv / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.pop("PYTHONPATH", None)
    env.update(PATH=f"{bin_}:{env['PATH']}", PYSPARK_PYTHON=py)
    home = tmp_path / "elsewhere"  # not the checkout: the wheel's code only
    home.mkdir()
    lsh_spark = str(bin_ / "lsh-spark")

    # Without the [spark] extra: no PySpark.
    run([py, "-m", "pip", "install", "-q", str(wheel)], env=env)
    assert "submit-path NAME" in run([lsh_spark, "--help"], cwd=home, env=env).stdout
    assert "--properties-file" in run([lsh_spark, "dedup", "--help"], cwd=home, env=env).stdout
    path = run([lsh_spark, "submit-path", "dedup"], cwd=home, env=env).stdout
    assert path.startswith(str(venv)) and path.endswith("/lsh_spark/jobs/dedup.py\n")
    props = run([lsh_spark, "submit-path", "spark-cluster.properties"], cwd=home, env=env).stdout
    with open(props.strip(), encoding="utf-8") as fh:
        assert "spark.executor.memoryOverhead" in fh.read()
    refused = subprocess.run(
        [lsh_spark, "dedup", "--input", SAMPLE, "--output", str(home / "o")],
        cwd=home, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == f"lsh-spark dedup: error: {spark_problem(None)}\n"

    run([py, "-m", "pip", "install", "-q", f"{wheel}[spark]"], env=env)  # the ranges alone
    got = run([py, "-c", "import pyspark; print(pyspark.__version__)"], cwd=home, env=env)
    if sys.version_info >= (3, 11):  # PySpark 4.3 needs Python 3.11
        assert tuple(int(v) for v in got.stdout.split(".")[:2]) == NEWEST, got.stdout
    where = run([py, "-c", "import lsh_spark; print(lsh_spark.__file__)"], cwd=home, env=env)
    assert where.stdout.startswith(str(venv))
    version = run([lsh_spark, "--version"], cwd=home, env=env)
    assert version.stdout.strip() == f"lsh-spark {__version__}"
    assert "usage: dedup.py" in run([py, "-m", "lsh_spark.jobs.dedup", "--help"], env=env).stdout
    out = home / "out"
    flags = ["--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=8"]
    done = run(
        [lsh_spark, "dedup", "--input", SAMPLE, "--output", str(out), *flags], cwd=home, env=env
    )
    summary = json.loads(done.stdout)  # the whole of stdout: one JSON object
    assert done.stdout.count("\n") == 1 and f"results in {out}/" in done.stderr
    assert summary["input_records"] == 411 and summary["duplicate_clusters"] > 0
    report = json.loads((out / "report.json").read_text())
    assert report["lsh_spark_version"] == __version__
    assert report["execution"]["shuffle_partitions"] == 8  # --conf reached the session
    assert (out / "deduped" / "_SUCCESS").exists()
    shown = run([lsh_spark, "inspect", str(out), "--input", SAMPLE], cwd=home, env=env)
    assert json.loads(shown.stdout)
    page = (out / "inspect.html").read_text()
    assert "Removed documents (20 sampled)" in page and "<mark>" in page


def test_console_command_lists_and_dispatches(capsys):
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in COMMANDS)
    assert main([]) == 2 and "usage: lsh-spark COMMAND" in capsys.readouterr().err
    assert main(["--version"]) == 0 and capsys.readouterr().out == f"lsh-spark {__version__}\n"
    assert main(["dedupe"]) == 2
    assert "unknown command 'dedupe'; allowed: dedup, " in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["dedup", "--input", SAMPLE, "--output", "o", "--threshold", "3"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == "lsh-spark dedup: error: --threshold: got 3.0; allowed: a number in (0, 1]\n"


def test_every_job_file_is_a_command():
    """jobs/X.py runs lsh_spark/jobs/X.py (the wheel's), which runs the command of the
    same function: one implementation."""
    jobs = sorted(f for f in os.listdir(os.path.join(ROOT, "jobs")) if f.endswith(".py"))
    package = os.path.join(ROOT, "lsh_spark", "jobs")
    assert sorted(f for f in os.listdir(package) if f.endswith(".py")) == ["__init__.py", *jobs]
    assert sorted(job_of(name) for name in COMMANDS) == jobs
    for name, (fn, _) in COMMANDS.items():
        job = job_of(name)
        with open(os.path.join(ROOT, "jobs", job), encoding="utf-8") as fh:
            assert f"from lsh_spark.jobs.{job[:-3]} import main\n" in fh.read(), job
        with open(os.path.join(package, job), encoding="utf-8") as fh:
            assert f"from lsh_spark.commands import {fn.__name__} as main\n" in fh.read(), job


def test_submit_path_prints_the_job_file_or_the_settings_file(capsys):
    assert main(["submit-path", "crawl"]) == 0
    assert capsys.readouterr().out == os.path.join(ROOT, "lsh_spark", "jobs", "crawl_dedup.py\n")
    assert main(["submit-path", "local.yaml"]) == 0
    assert capsys.readouterr().out == os.path.join(ROOT, "conf", "local.yaml\n")
    with pytest.raises(SystemExit) as exit_:
        main(["submit-path", "dedup.py"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("lsh-spark submit-path: error: unknown NAME 'dedup.py'; allowed: dedup, ")
    assert "spark-cluster.properties" in err


# A Python in which PySpark cannot be imported, or is a Spark 3.5 one (a package of
# that version alone): what a wheel user without the [spark] extra, or on a Spark 3.5
# platform, has.
NO_PYSPARK = "import sys; sys.modules['pyspark'] = None; "


def python(code: str, tmp_path, pythonpath: str = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=pythonpath)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def command(argv: list[str]) -> str:
    return f"from lsh_spark.commands import main; sys.exit(main({argv!r}))"


@pytest.mark.parametrize(
    "argv, shown",
    [
        (["--help"], "  submit-path NAME"),
        (["dedup", "--help"], "--properties-file"),
        (["recover", "--help"], "--conf KEY=VALUE"),
        (["submit-path", "dedup"], os.path.join("lsh_spark", "jobs", "dedup.py")),
        (["--version"], f"lsh-spark {__version__}"),
    ],
)
def test_help_and_submit_path_need_no_pyspark(argv, shown, tmp_path):
    done = python(NO_PYSPARK + command(argv), tmp_path)
    assert done.returncode == 0, done.stderr
    assert shown in done.stdout


def test_a_command_without_pyspark_or_with_spark_35_stops_with_one_line(tmp_path):
    fake = tmp_path / "fake35" / "pyspark"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('__version__ = "3.5.1"\n')
    argv = ["dedup", "--input", SAMPLE, "--output", str(tmp_path / "o")]
    cases = [
        (NO_PYSPARK, ROOT, "PySpark is not installed: pip install 'lsh-spark[spark]'"),
        ("import sys; ", f"{fake.parent}{os.pathsep}{ROOT}", "found PySpark 3.5.1: pip install"),
    ]
    for prelude, path, reason in cases:
        done = python(prelude + command(argv), tmp_path, path)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith("lsh-spark dedup: error: lsh-spark needs Spark 4.0 to 4.3")
        assert done.stderr.count("\n") == 1 and reason in done.stderr, done.stderr
        api = python(prelude + "from lsh_spark import find_duplicates", tmp_path, path)
        assert api.returncode == 1
        assert api.stderr.splitlines()[-1].startswith("ImportError: lsh-spark needs Spark 4.0")
        assert reason in api.stderr
    assert not (tmp_path / "o").exists()


def test_a_newer_spark_line_runs_with_a_warning_and_an_older_one_is_refused(caplog):
    check_spark("4.3.0")
    assert not caplog.records
    check_spark("4.4.0", "Spark")
    assert caplog.messages == ["Spark 4.4.0 is newer than the tested Spark 4.0 to 4.3"]
    with pytest.raises(UnsupportedSpark, match="found Spark 3.5.0: pip install") as err:
        check_spark("3.5.0", "Spark")
    assert isinstance(err.value, LshSparkError)  # one line from run_job, exit code 2


def test_no_job_file_shadows_a_standard_module():
    """spark-submit puts jobs/ first on sys.path: jobs/inspect.py once hid the
    standard library's inspect from every job."""
    for name in os.listdir(os.path.join(ROOT, "jobs")):
        assert name.removesuffix(".py") not in sys.stdlib_module_names, name
