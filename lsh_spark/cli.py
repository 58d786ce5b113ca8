"""Command-line parsing and the main of every job in ``jobs/``.

A job's flags are derived from option definitions (:func:`lsh_spark.config.option`):
its own flags (the small classes below, :class:`lsh_spark.config.CrawlConfig`)
and the options of :class:`lsh_spark.config.DedupConfig`, which a YAML file
given with ``--config`` can set too (flags given on the command line win).
:data:`JOBS` says which job takes which.  :func:`run_job` runs a job's work in
a Spark session and turns a user error into one line, ``prog: error:
message``, with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from lsh_spark.config import (
    PATH,
    PATHS,
    RETENTION_HOURS,
    VECTOR_METHODS,
    Checked,
    ConfigError,
    CrawlConfig,
    DecontamConfig,
    DedupConfig,
    Option,
    Rule,
    flag,
    integers,
    load_yaml,
    non_empty,
    normalize_keys,
    numbers,
    option,
    option_values,
    options,
)
from lsh_spark.errors import LshSparkError
from lsh_spark.versions import check_spark, installed_pyspark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
T = TypeVar("T")


# -- the jobs' own flags ---------------------------------------------------------
TABLE_FORMATS = ("parquet", "delta")
TABLE_NAME = non_empty("a table name ([catalog.][schema.]table)")


def _input() -> Any:
    return option(
        None,
        "input file or directory (local path, hdfs://, s3a://, ...), searched recursively",
        type=str,
        check=PATH,
        required=True,
        yaml=False,
    )


def _output(default: str | None = None) -> Any:
    return option(
        default, "output directory", type=str, check=PATH, required=default is None, yaml=False
    )


def _overwrite() -> Any:
    return option(
        False,
        "replace --output if it exists (the old output stays intact until "
        "the new run has succeeded)",
        yaml=False,
    )


@dataclass(frozen=True)
class DedupFlags(Checked):
    """Own flags of ``jobs/dedup.py``."""

    input: str | None = option(
        None,
        "input file or directory (local path, hdfs://, s3a://, gs://, abfss://, dbfs:/), "
        "searched recursively; or --input-table",
        type=str,
        check=PATH,
        yaml=False,
    )
    input_table: str | None = option(
        None,
        "a catalog table to read instead of --input (spark.table: Hive, Unity Catalog, "
        "Delta); it must have the --id-col column",
        type=str,
        check=TABLE_NAME,
        yaml=False,
    )
    output: str = _output()
    overwrite: bool = _overwrite()
    output_table: str | None = option(
        None,
        "also write the deduplicated corpus as this catalog table (saveAsTable), once "
        "--output is committed; --overwrite replaces an existing table",
        type=str,
        check=TABLE_NAME,
        yaml=False,
    )
    output_format: str = option(
        "parquet",
        "format of --output-table: 'parquet' or 'delta' (needs Delta Lake in the session)",
        choices=TABLE_FORMATS,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.input is None) == (self.input_table is None):
            raise ConfigError(
                "--input: give exactly one of --input PATH and --input-table NAME"
                + ("; got both" if self.input is not None else "")
            )


@dataclass(frozen=True)
class InputStageFlags(Checked):
    """Own flags of the stage jobs that read the input (signatures.py, cluster.py)."""

    input: str = _input()
    output: str = _output()


@dataclass(frozen=True)
class StageFlags(Checked):
    """Own flags of the stage jobs that read only earlier stages (candidates.py, verify.py)."""

    output: str = _output()


@dataclass(frozen=True)
class AdviseFlags(Checked):
    """Own flags of ``jobs/advise.py``."""

    input: str = _input()
    output: str = _output("advice")
    overwrite: bool = _overwrite()
    sample: int = option(
        2000,
        "documents sampled (all pairs are measured exactly)",
        check=integers(2, 20000),
        yaml=False,
    )


@dataclass(frozen=True)
class CrawlJobFlags(Checked):
    """Own flags of ``jobs/crawl_dedup.py`` besides :class:`CrawlConfig`."""

    output: str = _output()


@dataclass(frozen=True)
class DecontamFlags(Checked):
    """Own flags of ``jobs/decontaminate.py`` besides :class:`DecontamConfig`."""

    input: str = _input()
    reference: list = option(
        None,
        "reference collections to remove from the input: files or directories of "
        "JSON Lines or Parquet (a Hugging Face dataset exported to Parquet works)",
        type=list,
        check=PATHS,
        required=True,
        yaml=False,
    )
    output: str = _output()
    overwrite: bool = _overwrite()


@dataclass(frozen=True)
class CompactFlags(Checked):
    """Flags of ``jobs/index_compact.py``."""

    index: str = option(None, "index directory", type=str, check=PATH, required=True, yaml=False)
    target_file_mb: int = option(
        256, "approximate size of each rewritten Parquet file in MB", check=integers(1), yaml=False
    )
    retention_hours: float = option(
        RETENTION_HOURS,
        "unnamed segments and replaced manifests are deleted once this old (a batch "
        "that read an older version, or is about to commit, keeps its files meanwhile)",
        check=numbers("a number >= 0", lambda v: v >= 0),
        yaml=False,
    )


# --remote, taken by every job: where its Spark runs.
REMOTE = Option(
    str,
    None,
    "Spark Connect server to run on; without it, $SPARK_REMOTE when set, else the "
    "classic Spark of spark-submit (docs/connect.md)",
    rule=Rule("a Spark Connect URL, sc://HOST:PORT", lambda v: str(v).startswith("sc://")),
    default_text="$SPARK_REMOTE",
    yaml=False,
)

# --progress, taken by every job: Spark's console progress bar.
PROGRESS = Option(
    bool,
    False,
    "show Spark's console progress bar (one line per running stage) on stderr; the "
    "INFO lines of each stage's start, end and counts are shown either way",
    yaml=False,
)

# --master, --conf and --properties-file: the session of the lsh-spark command, which
# starts Spark itself (a job under spark-submit takes spark-submit's own flags instead).
MASTER = Option(
    str,
    None,
    "Spark master of the command's session, as spark-submit's --master: local[N], "
    "spark://HOST:PORT, yarn (client mode), k8s://https://HOST:PORT",
    rule=non_empty("a Spark master URL"),
    default_text="local[*]",
    yaml=False,
)
SPARK_CONF = Option(
    str,
    None,
    "a Spark setting of the command's session, as spark-submit's --conf KEY=VALUE "
    "(repeat the flag for each); wins over --properties-file",
    rule=Rule("KEY=VALUE", lambda v: "=" in v and v.partition("=")[0].strip() != ""),
    yaml=False,
)
PROPERTIES_FILE = Option(
    str,
    None,
    "a Spark properties file for the command's session, read by Spark as spark-submit's "
    "--properties-file (lsh-spark submit-path spark-cluster.properties: the shipped one)",
    rule=non_empty("a local Spark properties file"),
    yaml=False,
)
# The command's session flags (with --remote and --progress: every job's).
CONSOLE_SESSION = {"master": MASTER, "conf": SPARK_CONF, "properties_file": PROPERTIES_FILE}

# --config, taken by every job with options a YAML file may set.
CONFIG_FILE = Option(
    str,
    None,
    "YAML file whose keys are this job's flags without the dashes "
    "(see conf/ and docs/options.md); flags given here win",
    rule=non_empty("a local YAML file"),
    yaml=False,
)


@dataclass(frozen=True)
class Job:
    """A job's flags: the option classes it takes, in ``--help`` order.

    A key defined by two classes belongs to the first (crawl_dedup.py's
    ``--keep`` replaces DedupConfig's).  A job with options a YAML file may
    set also takes ``--config``.
    """

    prog: str
    groups: tuple[type, ...]

    def options(self) -> dict[str, tuple[type, Option]]:
        """Every option of the job by key, with the class that owns it."""
        out: dict[str, tuple[type, Option]] = {}
        for cls in self.groups:
            for key, opt in options(cls).items():
                out.setdefault(key, (cls, opt))
        return out

    def yaml_keys(self) -> list[str]:
        """The keys a ``--config`` file may set."""
        return [key for key, (_, opt) in self.options().items() if opt.yaml]

    def build(self, args: argparse.Namespace) -> dict[type, Any]:
        """One object per group from the YAML file and the flags given, validated.

        Every option of the job's own groups (not DedupConfig's) is set on
        ``args`` with the value used.
        """
        owned = self.options()
        config = getattr(args, "config", None)
        values = normalize_keys(load_yaml(config), self.yaml_keys(), config) if config else {}
        values.update({key: getattr(args, key) for key in owned if hasattr(args, key)})
        built = {}
        for cls in self.groups:
            built[cls] = cls(**{k: v for k, v in values.items() if owned[k][0] is cls})
            if cls is not DedupConfig:  # the job reaches DedupConfig's values through cfg
                vars(args).update(
                    {k: v for k, v in option_values(built[cls]).items() if owned[k][0] is cls}
                )
        return built


JOBS = {
    job.prog: job
    for job in (
        Job("dedup.py", (DedupFlags, DedupConfig)),
        Job("signatures.py", (InputStageFlags, DedupConfig)),
        Job("candidates.py", (StageFlags, DedupConfig)),
        Job("verify.py", (StageFlags, DedupConfig)),
        Job("cluster.py", (InputStageFlags, DedupConfig)),
        Job("advise.py", (AdviseFlags, DedupConfig)),
        Job("crawl_dedup.py", (CrawlJobFlags, CrawlConfig, DedupConfig)),
        Job("index_compact.py", (CompactFlags,)),
        Job("decontaminate.py", (DecontamFlags, DecontamConfig, DedupConfig)),
    )
}


# -- parsing ---------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def __init__(self, job: Job, prog: str | None = None, **kwargs: Any) -> None:
        super().__init__(prog=prog or job.prog, **kwargs)
        self.job = job

    def error(self, message: str) -> NoReturn:  # one line, exit code 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_option(parser: argparse.ArgumentParser, key: str, opt: Option, default: Any) -> None:
    quiet = opt.required or opt.type is bool or opt.default_label == "none"
    shown = "" if quiet else f" (default: {opt.default_label})"
    kwargs: dict[str, Any] = dict(
        dest=key, default=default, required=opt.required, help=(opt.help + shown).replace("%", "%%")
    )
    if opt.type is bool:
        kwargs["action"] = "store_true"
    elif opt is SPARK_CONF:  # repeatable, as spark-submit's
        kwargs.update(type=str, action="append", metavar="KEY=VALUE")
    elif opt.type is list:  # one or more values: --reference A B
        kwargs.update(type=str, nargs="+")
    else:
        kwargs.update(type=opt.type, choices=opt.choices)
    parser.add_argument(flag(key), **kwargs)


def build_parser(
    job_name: str, description: str, prog: str | None = None
) -> argparse.ArgumentParser:
    """The parser of the job ``job_name`` (a key of :data:`JOBS`), flags from the
    definitions; ``prog``: its name in help and errors (default ``job_name``).

    Options are left out of the namespace unless given (:func:`parse` fills in
    the YAML file's values and the defaults).
    """
    job = JOBS[job_name]
    parser = _Parser(job, prog, description=description)
    owners = job.options()
    for i, cls in enumerate(job.groups):
        for key, opt in options(cls).items():
            if owners[key][0] is cls:
                _add_option(parser, key, opt, argparse.SUPPRESS)
        if i == 0 and job.yaml_keys():
            _add_option(parser, "config", CONFIG_FILE, None)
    add_session_flags(parser)
    return parser


def is_console(prog: str) -> bool:
    """Whether ``prog`` names the ``lsh-spark`` command (as opposed to a job file run by
    spark-submit): it builds the session itself, so it takes the session flags."""
    return prog.startswith("lsh-spark")


def add_session_flags(parser: argparse.ArgumentParser) -> None:
    """--remote and --progress; for the ``lsh-spark`` command also --master, --conf and
    --properties-file (:data:`CONSOLE_SESSION`)."""
    _add_option(parser, "remote", REMOTE, None)
    _add_option(parser, "progress", PROGRESS, False)
    if is_console(parser.prog):
        for key, opt in CONSOLE_SESSION.items():
            _add_option(parser, key, opt, None)


def parse_flags(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with the session flags checked and gathered in
    ``args.session`` (the keyword arguments of :func:`run_job`); exits with one line
    on a bad value."""
    args = parser.parse_args(argv)
    try:
        args.session = session_flags(args)
    except ConfigError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    return args


def session_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The session flags of ``args``, checked: --remote's URL, --conf's KEY=VALUE, an
    existing --properties-file, and neither --master nor --properties-file with a
    Spark Connect server (whose master and settings are the server's)."""
    REMOTE.check("remote", args.remote)
    given = {key: getattr(args, key, None) for key in CONSOLE_SESSION}
    for item in given["conf"] or []:
        SPARK_CONF.check("conf", item)
    MASTER.check("master", given["master"])
    path = given["properties_file"]
    PROPERTIES_FILE.check("properties_file", path)
    remote = args.remote or os.environ.get("SPARK_REMOTE")
    for key in ("master", "properties_file"):
        if given[key] is not None and remote:
            raise ConfigError(
                f"{flag(key)}: not with a Spark Connect server ({remote}), whose master and "
                "settings are its own; --conf sets the session's settings there"
            )
    if path is not None and not os.path.isfile(path):
        raise ConfigError(f"--properties-file: no such file: {path}")
    conf = tuple((k.strip(), v) for k, _, v in (c.partition("=") for c in given["conf"] or []))
    return dict(
        remote=args.remote,
        progress=args.progress,
        master=given["master"],
        conf=conf,
        properties_file=path,
    )


def parse(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None
) -> tuple[argparse.Namespace, DedupConfig | None]:
    """Parse flags, merge with ``--config``, validate. Exits with one line on error.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        A job's parser, from :func:`build_parser`.
    argv : sequence of str, optional
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    args : argparse.Namespace
        The value used of each of the job's own flags (``args.output``,
        ``args.sample``, ...), checked by its definition.
    cfg : DedupConfig or None
        The run's parameters (None for a job without them).
    """
    args = parse_flags(parser, argv)
    try:
        built = parser.job.build(args)
        precheck_paths(args)
    except ConfigError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    return args, built.get(DedupConfig)


def _local(path: str) -> str | None:
    """The local file system path of ``path``, or None for a remote URI (hdfs://, s3a://,
    dbfs:/).

    >>> _local("file:/tmp/x"), _local("dbfs:/mnt/x"), _local("gs://b/x"), _local("data/x")
    ('/tmp/x', None, None, 'data/x')
    """
    if path.startswith("file:"):
        return path[len("file:") :]
    return None if re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", path) else path


def precheck_paths(args: argparse.Namespace) -> None:
    """Fail before Spark starts when a local --input or --reference is missing or
    --output exists.

    Remote paths are checked again through Hadoop once the session is up.
    """
    for key in ("input", "reference"):
        given = getattr(args, key, None)
        for path in [given] if isinstance(given, str) else given or []:
            local = _local(path)
            if local is not None and not os.path.exists(local):
                raise ConfigError(f"{flag(key)}: path does not exist: {path}")
    local_out = _local(getattr(args, "output", None) or "")
    if getattr(args, "overwrite", None) is False and local_out and os.path.exists(local_out):
        raise ConfigError(f"--output: {args.output} already exists; pass --overwrite to replace it")


# -- running ---------------------------------------------------------------------
def fail(prog: str, exc: Exception) -> NoReturn:
    """Print a one-line error for a known user error and exit 2."""
    sys.stderr.write(f"{prog}: error: {exc}\n")
    sys.exit(2)


def run_job(
    prog: str,
    work: Callable[[SparkSession], T],
    user_errors: tuple[type[Exception], ...] = (),
    remote: str | None = None,
    spark: SparkSession | None = None,
    progress: bool = False,
    master: str | None = None,
    conf: Sequence[tuple[str, str]] = (),
    properties_file: str | None = None,
) -> T:
    """Run ``work(spark)`` in the job's Spark session and return its result.

    A user error becomes one line, ``prog: error: message``, on stderr and exit
    code 2; any other exception keeps its traceback.

    Parameters
    ----------
    prog : str
        The job's name (``dedup.py``); the session is named ``lsh-spark dedup``.
    work : callable
        The job's work, given the session.
    user_errors : tuple of exception classes
        Errors that are the user's to fix besides :class:`LshSparkError` and
        the input and index errors.
    remote : str, optional
        The Spark Connect server of ``--remote`` (see
        :func:`lsh_spark.session.build_session`).
    spark : SparkSession, optional
        Run in this session (a notebook's, a test's) instead of building one:
        it is not stopped, and the settings the job changes are put back
        (:func:`lsh_spark.session.settings_restored`).  Without it the job
        builds its session and stops it in every case, and shows lsh-spark's
        INFO lines on stderr (:func:`lsh_spark.session.show_progress_lines`).
    progress : bool
        Spark's console progress bar (``--progress``), for a session built here.
    master, conf, properties_file
        The ``lsh-spark`` command's ``--master``, ``--conf`` (key, value pairs) and
        ``--properties-file``, for a session built here (:func:`session_flags`).

    Returns
    -------
    Any
        What ``work`` returned.
    """
    errors = (LshSparkError, *user_errors)
    name = prog if is_console(prog) else f"lsh-spark {prog.removesuffix('.py')}"
    try:
        check_spark(installed_pyspark())  # before anything imports PySpark
        from lsh_spark.session import (
            build_session,
            fill_defaults,
            settings_restored,
            show_progress_lines,
        )

        if spark is not None:
            with settings_restored(spark):
                fill_defaults(spark)
                return work(spark)
        show_progress_lines()
        spark = build_session(name, remote, progress, master, conf, properties_file)
        try:
            return work(spark)
        finally:
            spark.stop()
    except errors as exc:
        fail(prog, exc)


def run_stage(
    job: str,
    description: str,
    stage: str,
    requires: tuple[tuple[str, str], ...],
    argv: Sequence[str] | None = None,
    spark: SparkSession | None = None,
    prog: str | None = None,
) -> int:
    """Main of a per-stage job: parse flags, check earlier stages, run, merge the report.

    ``job``: the job's file name (``verify.py``); ``stage``: the name of its function
    in :mod:`lsh_spark.pipeline` (imported when it runs, so that ``--help`` needs no
    PySpark); ``requires`` lists the datasets
    of earlier stages the stage reads, with the stage (``signatures``) that
    writes each; ``spark``: see :func:`run_job`; ``prog``: the command's name
    in help and errors (default ``job``).
    """
    prog = prog or job
    args, cfg = parse(build_parser(job, description, prog), argv)
    needs = tuple(
        (dataset, f"lsh-spark {writer}" if is_console(prog) else f"jobs/{writer}.py")
        for dataset, writer in requires
    )
    section = run_job(
        prog,
        lambda spark: _run_stage(spark, job, stage, needs, args, cfg),
        spark=spark,
        **args.session,
    )
    print(
        json.dumps(
            {"stage": job.removesuffix(".py"), "output": args.output, **section.get("counts", {})}
        )
    )
    return 0


def _run_stage(
    spark: SparkSession,
    prog: str,
    stage_name: str,
    requires: tuple[tuple[str, str], ...],
    args: argparse.Namespace,
    cfg: DedupConfig,
) -> dict[str, Any]:
    """Run one stage under ``args.output`` and merge its section into report.json."""
    from lsh_spark import pipeline
    from lsh_spark.outputs import StagewiseOutput
    from lsh_spark.pipeline import describe_bounded_families, merge_reports, report_header
    from lsh_spark.session import size_shuffle_partitions
    from lsh_spark.stages.common import log_counts

    stage = getattr(pipeline, stage_name)
    needs_input = "input" in JOBS[prog].options()
    out = StagewiseOutput(spark, args.output)
    for dataset, job in requires:
        if dataset == "shingles" and cfg.method in VECTOR_METHODS:
            dataset = "vectors"  # what the vector methods verify with
        out.require(dataset, job)
    sized_by = args.input if needs_input else out.path("signatures")
    size_shuffle_partitions(spark, out.fs.size_bytes(sized_by))
    old = out.read_json("report.json")  # before the stage writes: its datasets are new
    section = stage(spark, args.input, out, cfg) if needs_input else stage(spark, out, cfg)
    log_counts(prog.removesuffix(".py"), section)
    if old.get("parameters") not in (None, cfg.to_dict()):
        log.warning(
            "%s: warning: parameters differ from the earlier stages recorded in report.json", prog
        )
    header = report_header(getattr(args, "input", old.get("input_path")), cfg)
    report = merge_reports(old, header, section)
    describe_bounded_families(spark, out, report)
    out.write_json("report.json", report)
    out.commit()
    out.fs.delete(out.path("_checkpoints"))
    return section
