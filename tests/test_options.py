"""Every option is defined once: the parsers, the YAML checks and docs/options.md
all come from the definitions in lsh_spark.config and lsh_spark.cli."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys

import pytest

from lsh_spark.cli import CONFIG_FILE, JOBS, build_parser, parse, run_job
from lsh_spark.config import (
    GROUPS,
    ConfigError,
    CrawlConfig,
    DedupConfig,
    SimHashConfig,
    VectorConfig,
    flag,
    options,
)
from lsh_spark.errors import LshSparkError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "data", "sample", "corpus.jsonl")
SCRIPT = os.path.join(ROOT, "scripts", "options_doc.py")


def _actions(parser):
    return {a.dest: a for a in parser._actions if a.option_strings}


def _error(capsys, prog: str, argv: list[str]) -> str:
    """The one line a job prints for invalid flags (exit code 2)."""
    with pytest.raises(SystemExit) as exc:
        parse(build_parser(prog, ""), argv)
    assert exc.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_every_config_field_is_a_defined_option():
    for f in dataclasses.fields(DedupConfig):
        assert f.name == "_band_params" or {"option", "section"} & set(f.metadata), f.name
    for cls in (DedupConfig, SimHashConfig, VectorConfig, CrawlConfig):
        for key, opt in options(cls).items():
            assert opt.help and opt.allowed, key
            assert opt.required or opt.accepts(opt.default), key
    assert {opt.group for opt in options(DedupConfig).values()} == set(GROUPS)


@pytest.mark.parametrize("prog", sorted(JOBS))
def test_every_option_of_a_job_is_a_flag_of_its_parser(prog):
    job = JOBS[prog]
    actions = _actions(build_parser(prog, ""))
    for key, (_, opt) in job.options().items():
        action = actions[key]
        assert action.option_strings == [flag(key)]
        assert action.required == opt.required
        assert action.help.startswith(opt.help)
        if opt.type is bool:
            assert action.nargs == 0 and action.const is True  # store_true
        elif opt.type is list:  # one or more strings
            assert action.nargs == "+" and action.type is str
        else:
            assert action.type is opt.type
            assert action.choices == opt.choices
    assert ("config" in actions) == bool(job.yaml_keys())
    expected = (
        set(job.options())
        | {"help", "remote", "progress"}
        | ({"config"} if job.yaml_keys() else set())
    )
    assert set(actions) == expected


def test_jobs_with_a_config_take_every_option_of_it():
    for prog, job in JOBS.items():
        if DedupConfig in job.groups:
            assert set(options(DedupConfig)) <= set(_actions(build_parser(prog, ""))), prog
    # crawl_dedup.py's --keep is its own (oldest | newest), not DedupConfig's.
    assert _actions(build_parser("crawl_dedup.py", ""))["keep"].choices == ("oldest", "newest")


@pytest.mark.parametrize(
    "key, yaml_value, flag_value, message",
    [
        ("max-hamming", "40", "40", "--max-hamming: got 40; allowed: an integer from 0 to 32"),
        ("bucket-width", "-1.5", "-1.5", "--bucket-width: got -1.5; allowed: a positive number"),
        ("num-perm", "0", "0", "--num-perm: got 0; allowed: an integer from 1 to 4096"),
    ],
)
def test_bad_yaml_value_gives_the_flags_error(
    capsys, tmp_path, key, yaml_value, flag_value, message
):
    conf = tmp_path / "bad.yaml"
    conf.write_text(f"{key}: {yaml_value}\n", encoding="utf-8")
    base = ["--input", SAMPLE, "--output", str(tmp_path / "out")]
    from_yaml = _error(capsys, "dedup.py", [*base, "--config", str(conf)])
    from_flag = _error(capsys, "dedup.py", [*base, f"--{key}", flag_value])
    assert from_yaml == from_flag == f"dedup.py: error: {message}"


def test_yaml_keys_in_either_spelling_reach_the_method_configs(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text("method: simhash\nmax_hamming: 5\nsimhash-weight: uniform\n")
    _, cfg = parse(
        build_parser("signatures.py", ""),
        ["--input", SAMPLE, "--output", str(tmp_path / "o"), "--config", str(conf)],
    )
    assert cfg.simhash == SimHashConfig(max_hamming=5, simhash_weight="uniform")
    assert cfg.to_dict()["max_hamming"] == 5 and cfg.to_dict()["simhash_blocks"] == 8


@pytest.mark.parametrize(
    "prog, argv",
    [
        ("dedup.py", ["--input", SAMPLE]),
        ("crawl_dedup.py", ["--batch", "b", "--index", "i"]),
    ],
)
def test_unknown_yaml_key_lists_the_allowed_keys(capsys, tmp_path, prog, argv):
    conf = tmp_path / "c.yaml"
    conf.write_text("treshold: 0.7\n")
    line = _error(capsys, prog, [*argv, "--output", str(tmp_path / "o"), "--config", str(conf)])
    allowed = ", ".join(k.replace("_", "-") for k in JOBS[prog].yaml_keys())
    assert line == f"{prog}: error: {conf}: unknown key 'treshold'; allowed keys: {allowed}"
    assert "max-hamming" in allowed and "input" not in allowed and "batch" not in allowed


def test_job_flags_are_checked_by_their_definitions(capsys, tmp_path):
    line = _error(
        capsys, "advise.py", ["--input", SAMPLE, "--output", str(tmp_path / "a"), "--sample", "1"]
    )
    assert line == "advise.py: error: --sample: got 1; allowed: an integer from 2 to 20000"
    line = _error(capsys, "index_compact.py", ["--index", "i", "--target-file-mb", "0"])
    assert line == "index_compact.py: error: --target-file-mb: got 0; allowed: a positive integer"
    args, cfg = parse(build_parser("advise.py", ""), ["--input", SAMPLE])
    assert (args.output, args.sample, args.overwrite, cfg.threshold) == ("advice", 2000, False, 0.8)


def _options_doc():
    spec = importlib.util.spec_from_file_location("options_doc", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_options_doc_is_current():
    with open(os.path.join(ROOT, "docs", "options.md"), encoding="utf-8") as fh:
        committed = fh.read()
    assert committed == _options_doc().render(), "run: python scripts/options_doc.py"
    proc = subprocess.run([sys.executable, SCRIPT, "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_options_doc_lists_every_option_with_its_allowed_values():
    text = _options_doc().render()
    for job in JOBS.values():
        assert f"### jobs/{job.prog}" in text
        for key, (_, opt) in job.options().items():
            assert f"`{flag(key)}`" in text
            assert opt.allowed.replace("|", "\\|") in text
    assert CONFIG_FILE.help in text


# -- run_job -----------------------------------------------------------------------
class _Session:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def session(monkeypatch):
    import lsh_spark.session

    fake = _Session()

    def build(app_name, remote=None, progress=False, master=None, conf=(), properties_file=None):
        fake.remote, fake.progress = remote, progress
        fake.master, fake.conf, fake.properties_file = master, conf, properties_file
        return fake

    monkeypatch.setattr(lsh_spark.session, "build_session", build)
    return fake


def test_run_job_returns_the_result_and_stops_the_session(session):
    assert run_job("x.py", lambda spark: spark is session and 42) == 42
    assert session.stopped and session.remote is None


def test_remote_flag_reaches_the_session_and_is_checked(session, capsys, tmp_path):
    for prog in JOBS:
        assert "--remote" in build_parser(prog, "d").format_help()
    argv = ["--input", str(tmp_path), "--output", str(tmp_path / "o")]
    args, _ = parse(build_parser("dedup.py", "d"), [*argv, "--remote", "sc://h:15002"])
    assert args.remote == "sc://h:15002"
    assert parse(build_parser("dedup.py", "d"), argv)[0].remote is None
    run_job("x.py", lambda spark: None, remote=args.remote)
    assert session.remote == "sc://h:15002" and session.progress is False
    args, _ = parse(build_parser("verify.py", "d"), ["--output", "o", "--progress"])
    run_job("x.py", lambda spark: None, progress=args.progress)
    assert session.progress is True
    with pytest.raises(SystemExit) as err:
        parse(build_parser("dedup.py", "d"), [*argv, "--remote", "http://h:1"])
    assert err.value.code == 2
    assert "--remote: got 'http://h:1'; allowed: a Spark Connect URL" in capsys.readouterr().err


def test_the_console_commands_session_flags_reach_the_session(session, tmp_path, monkeypatch):
    """lsh-spark COMMAND takes --master, --conf (repeatable, the value may hold '=')
    and --properties-file, and run_job hands them to build_session; a job file run
    by spark-submit takes spark-submit's own flags, not these."""
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    props = tmp_path / "spark.properties"
    props.write_text("spark.ui.enabled false\n")
    argv = ["--input", str(tmp_path), "--output", str(tmp_path / "o")]
    flags = ["--master", "local[3]", "--conf", "spark.a=1", "--conf", "spark.b= -Dx=y "]
    args, _ = parse(build_parser("dedup.py", "d", "lsh-spark dedup"), [*argv, *flags])
    assert args.session == dict(
        remote=None,
        progress=False,
        master="local[3]",
        conf=(("spark.a", "1"), ("spark.b", " -Dx=y ")),
        properties_file=None,
    )
    run_job("lsh-spark dedup", lambda spark: None, **args.session)
    assert session.master == "local[3]" and session.conf == (
        ("spark.a", "1"),
        ("spark.b", " -Dx=y "),
    )
    args, _ = parse(
        build_parser("verify.py", "d", "lsh-spark verify"),
        ["--output", "o", "--properties-file", str(props)],
    )
    run_job("lsh-spark verify", lambda spark: None, **args.session)
    assert session.properties_file == str(props) and session.master is None
    for job in JOBS:
        assert "--master" in build_parser(job, "d", "lsh-spark x").format_help()
        assert "--master" not in build_parser(job, "d").format_help()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--conf", "spark.a"], "--conf: got 'spark.a'; allowed: KEY=VALUE"),
        (["--conf", "=1"], "--conf: got '=1'; allowed: KEY=VALUE"),
        (["--properties-file", "nowhere.properties"], "--properties-file: no such file: nowhere"),
        (["--master", ""], "--master: got ''; allowed: a Spark master URL"),
        (["--master", "yarn", "--remote", "sc://h:15002"], "--master: not with a Spark Connect"),
    ],
)
def test_bad_session_flags_stop_the_command_with_one_line(flags, message, tmp_path, capsys):
    argv = ["--input", str(tmp_path), "--output", str(tmp_path / "o"), *flags]
    with pytest.raises(SystemExit) as err:
        parse(build_parser("dedup.py", "d", "lsh-spark dedup"), argv)
    assert err.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"lsh-spark dedup: error: {message}"), line


def test_properties_file_is_refused_with_spark_remote_set(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPARK_REMOTE", "sc://h:15002")
    props = tmp_path / "p.properties"
    props.write_text("")
    with pytest.raises(SystemExit):
        parse(
            build_parser("verify.py", "d", "lsh-spark verify"),
            ["--output", "o", "--properties-file", str(props)],
        )
    assert (
        "--properties-file: not with a Spark Connect server (sc://h:15002)"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize("exc", [ConfigError("--k: got 0; allowed: x"), LshSparkError("bad index")])
def test_run_job_turns_a_user_error_into_one_line(session, capsys, exc):
    def work(spark):
        raise exc

    with pytest.raises(SystemExit) as err:
        run_job("x.py", work)
    assert err.value.code == 2 and session.stopped
    assert capsys.readouterr().err == f"x.py: error: {exc}\n"


def test_run_job_keeps_the_traceback_of_a_bug(session):
    def work(spark):
        raise KeyError("bug")

    with pytest.raises(KeyError):
        run_job("x.py", work)
    assert session.stopped


def test_input_and_index_errors_are_user_errors():
    from lsh_spark.index import IndexConflict
    from lsh_spark.readers import InputError

    assert issubclass(InputError, LshSparkError) and issubclass(IndexConflict, LshSparkError)
    assert issubclass(ConfigError, LshSparkError) and issubclass(ConfigError, ValueError)


def test_run_job_in_a_given_session_leaves_its_settings_and_runs_on(spark):
    from lsh_spark.session import ADAPTIVE_KEY, PARTITIONS_KEY, size_shuffle_partitions

    keys = ("spark.sql.parquet.compression.codec", PARTITIONS_KEY, ADAPTIVE_KEY, "spark.x.unset")
    before = {key: spark.conf.get(key, None) for key in keys}
    spark.conf.unset(PARTITIONS_KEY)  # as a notebook's session: nothing set

    def work(session):
        assert session is spark
        size_shuffle_partitions(session, 10 << 30)  # a large input: many partitions
        assert int(session.conf.get(PARTITIONS_KEY)) > 100
        session.conf.set("spark.x.unset", "1")  # not ours: left alone
        return 7

    try:
        assert run_job("x.py", work, spark=spark) == 7
        assert spark.conf.get(PARTITIONS_KEY, None) is None
        assert spark.conf.get(keys[0], None) == before[keys[0]]
        assert spark.conf.get(ADAPTIVE_KEY, None) == before[ADAPTIVE_KEY]
        assert spark.conf.get("spark.x.unset") == "1"
        assert spark.range(3).count() == 3  # not stopped
    finally:
        for key, value in before.items():
            spark.conf.set(key, value) if value is not None else spark.conf.unset(key)


def test_jobs_show_lsh_sparks_info_lines_unless_logging_is_configured(monkeypatch):
    import logging

    from lsh_spark.session import show_progress_lines

    ours = logging.getLogger("lsh_spark")
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(ours, "handlers", [])
    monkeypatch.setattr(ours, "level", logging.NOTSET)
    show_progress_lines()
    show_progress_lines()  # once
    assert len(ours.handlers) == 1 and ours.level == logging.INFO
    configured = logging.StreamHandler()
    monkeypatch.setattr(ours, "handlers", [])
    monkeypatch.setattr(logging.getLogger(), "handlers", [configured])
    show_progress_lines()  # the application's own configuration wins
    assert ours.handlers == []
