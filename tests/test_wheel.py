"""The wheel as a user installs it, and the ``lsh-spark`` command.

The wheel is built with ``python -m build``, installed with the tested versions
(``-c constraints.txt``) into an empty virtualenv, and its ``lsh-spark``
command runs the dedup job on the sample from outside the checkout, so only
what the wheel holds is used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest

from lsh_spark import __version__
from lsh_spark.commands import COMMANDS, main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.mark.slow
def test_the_built_wheel_installs_into_an_empty_venv_and_runs_dedup_and_inspect(tmp_path):
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), ROOT])
    (wheel,) = dist.glob("*.whl")
    assert wheel.name == f"lsh_spark-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(f"lsh_spark-{__version__}.dist-info/METADATA").decode()
        entry = zf.read(f"lsh_spark-{__version__}.dist-info/entry_points.txt").decode()
    assert "lsh_spark/commands.py" in names and "lsh_spark/stages/verify.py" in names
    assert not [n for n in names if n.startswith(("tests/", "jobs/", "bench/"))]
    assert "lsh-spark = lsh_spark.commands:main" in entry
    requires = [ln for ln in meta.splitlines() if ln.startswith("Requires-Dist:")]
    pyspark = [r for r in requires if "pyspark" in r]
    assert pyspark and all('extra == "spark"' in r for r in pyspark)  # never forced on a platform
    assert not [r for r in requires if "==" in r.split(";")[0]]  # ranges; pins: constraints.txt

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    constraints = os.path.join(ROOT, "constraints.txt")
    run([py, "-m", "pip", "install", "-q", "-c", constraints, f"{wheel}[spark]"])

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.update(PATH=f"{venv / 'bin'}:{env['PATH']}", PYSPARK_PYTHON=py)
    home = tmp_path / "elsewhere"  # not the checkout: the wheel's code only
    home.mkdir()
    where = run([py, "-c", "import lsh_spark; print(lsh_spark.__file__)"], cwd=home, env=env)
    assert where.stdout.startswith(str(venv))
    version = run([str(venv / "bin" / "lsh-spark"), "--version"], cwd=home, env=env)
    assert version.stdout.strip() == f"lsh-spark {__version__}"
    out = home / "out"
    done = run(
        [str(venv / "bin" / "lsh-spark"), "dedup", "--input", SAMPLE, "--output", str(out)],
        cwd=home,
        env=env,
    )
    summary = json.loads([ln for ln in done.stdout.splitlines() if ln.startswith("{")][-1])
    assert summary["input_records"] == 411 and summary["duplicate_clusters"] > 0
    report = json.loads((out / "report.json").read_text())
    assert report["lsh_spark_version"] == __version__
    assert (out / "deduped" / "_SUCCESS").exists()
    lsh_spark = str(venv / "bin" / "lsh-spark")
    run([lsh_spark, "inspect", str(out), "--input", SAMPLE], cwd=home, env=env)
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
    """jobs/X.py runs the command of the same function: one implementation."""
    jobs = sorted(f for f in os.listdir(os.path.join(ROOT, "jobs")) if f.endswith(".py"))
    by_default = {}
    for fn, _ in COMMANDS.values():
        by_default[fn.__defaults__[-1]] = fn  # prog's default: the job file's name
    assert sorted(by_default) == jobs
    for job, fn in by_default.items():
        with open(os.path.join(ROOT, "jobs", job), encoding="utf-8") as fh:
            assert f"from lsh_spark.commands import {fn.__name__} as main\n" in fh.read(), job


def test_no_job_file_shadows_a_standard_module():
    """spark-submit puts jobs/ first on sys.path: jobs/inspect.py once hid the
    standard library's inspect from every job."""
    for name in os.listdir(os.path.join(ROOT, "jobs")):
        assert name.removesuffix(".py") not in sys.stdlib_module_names, name
