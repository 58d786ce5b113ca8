"""Outputs committed whole: what a run writes, and how it becomes the output.

:class:`StagedOutput` commits a whole output so that a crash at any point leaves
the old or the new one (:func:`recover_output` finishes what a killed commit
left); :class:`StagewiseOutput` commits one stage job's datasets as one unit
(:func:`recover_stages`).  Every directory a run writes carries its owner
record, which tells recovery on any host whether that run is still alive.
docs/outputs.md says what each store guarantees and which test breaks it.
"""

from __future__ import annotations

import json
import logging
import posixpath
import uuid
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from lsh_spark.config import ConfigError
from lsh_spark.faults import maybe_die
from lsh_spark.owners import OWNER, Lease, abandoned, read_owner
from lsh_spark.store import FileSystem

log = logging.getLogger(__name__)


# -- writing ------------------------------------------------------------------
def as_written(schema: T.DataType) -> T.DataType:
    """The schema Spark reads back from Parquet it wrote from a DataFrame of
    ``schema``: the same fields, every one nullable (arrays and maps too), as
    Spark makes them when it writes files."""
    if isinstance(schema, T.StructType):
        return T.StructType(
            [T.StructField(f.name, as_written(f.dataType), True, f.metadata) for f in schema.fields]
        )
    if isinstance(schema, T.ArrayType):
        return T.ArrayType(as_written(schema.elementType), True)
    if isinstance(schema, T.MapType):
        return T.MapType(as_written(schema.keyType), as_written(schema.valueType), True)
    return schema


class _KnownSchemas:
    """The schemas of the datasets an output wrote in this process, so reading
    one back skips Parquet's schema inference: a Spark job that reads a footer,
    about 50 ms each, nine times in a dedup run."""

    schemas: dict[str, T.StructType]

    def _record(self, df: DataFrame, name: str) -> None:
        self.schemas[name] = as_written(df.schema)

    def read(self, name: str) -> DataFrame:
        """A dataset of this output; ``name`` as given to ``write``."""
        schema = self.schemas.get(name)
        reader = self.spark.read if schema is None else self.spark.read.schema(schema)
        return reader.parquet(self.path(name))


# -- committing ------------------------------------------------------------------
_SUCCESS = "_SUCCESS"


def _sibling(output: str, kind: str, run: str) -> str:
    """A hidden sibling of ``output``: its staging (``inprogress``) or old (``aside``) copy."""
    parent, name = posixpath.split(output)
    return f"{parent}/.{name}.{kind}-{run}"


def recover_output(spark: SparkSession, output: str, all_hosts: bool = True) -> list[str]:
    """Finish an interrupted commit of ``output`` and delete what killed runs left.

    An old output moved aside is put back unless the new one was complete
    (``_SUCCESS``), which then takes its place; staging directories of runs that
    are gone are deleted; so are asides once ``output`` stands.  A run still
    writing on this host is left alone; runs of other hosts are treated as gone
    when ``all_hosts`` (``jobs/recover.py``), kept otherwise (the start of a run).

    Returns
    -------
    list of str
        One line per action, e.g. ``"deleted .out.inprogress-1a2b"``.
    """
    fs = FileSystem(spark, output)
    output = fs.qualify(output).rstrip("/")
    if fs.object_store:
        return _recover_in_place(fs, output, all_hosts)
    parent, name = posixpath.split(output)
    done: list[str] = []
    asides = [n for n in fs.list_names(parent) if n.startswith(f".{name}.aside-")]
    for aside in asides:
        run = aside.rsplit("-", 1)[1]
        staging = _sibling(output, "inprogress", run)
        if not abandoned(fs, staging, all_hosts):  # its run is still committing
            continue
        if not fs.exists(output):
            new = fs.exists(f"{staging}/{_SUCCESS}")
            fs.rename(staging if new else f"{parent}/{aside}", output)
            done.append(f"{'committed' if new else 'restored'} {name} from run {run}")
        fs.delete(f"{parent}/{aside}")
        done.append(f"deleted {aside}")
    for staging in fs.list_names(parent):
        path = f"{parent}/{staging}"
        if staging.startswith(f".{name}.inprogress-") and abandoned(fs, path, all_hosts):
            fs.delete(path)
            done.append(f"deleted {staging}")
    return done


def _recover_in_place(fs: FileSystem, output: str, all_hosts: bool) -> list[str]:
    """On an object store: delete an output a killed run left without ``_SUCCESS``."""
    killed = fs.exists(f"{output}/{OWNER}") and not fs.exists(f"{output}/{_SUCCESS}")
    if killed and abandoned(fs, output, all_hosts):
        fs.delete(output)
        return [f"deleted {output} (a run killed before its commit)"]
    return []


class StagedOutput(_KnownSchemas):
    """An output directory written under a staging path and committed whole.

    On local disks and HDFS the run writes a hidden sibling
    ``.NAME.inprogress-RUN``; :meth:`commit` renames an older output aside, the
    new one into place, then deletes the old one: every step a rename, and a
    crash between any two leaves a state :func:`recover_output` completes (the
    next run calls it).  On object stores, where a rename copies every file, a
    new output is written in place and committed by its ``_SUCCESS`` marker
    (one request); an existing one is not replaced (see docs/outputs.md),
    except one this run wrote itself: ``run`` names the run, and a retry of it
    (a crawl batch that lost the index's compare-and-swap) replaces its own
    earlier output, under its own owner record.

    The staging directory's owner record is kept fresh by a :class:`Lease`
    until the commit, so recovery on any host can tell this run is alive.
    Before ``_SUCCESS`` is written, everything staged is synced
    (:meth:`FileSystem.sync`).
    """

    def __init__(
        self,
        spark: SparkSession,
        output: str,
        overwrite: bool = False,
        run: str | None = None,
    ):
        self.spark = spark
        self.fs = FileSystem(spark, output)
        self.output = self.fs.qualify(output).rstrip("/")
        self.run = run or uuid.uuid4().hex[:12]
        recover_output(spark, self.output, all_hosts=False)
        if overwrite and self.fs.object_store and self._earlier_attempt():
            # This run's own earlier output (its index commit lost): it is replaced,
            # unmarked first so that a half-deleted output never looks complete.
            self.fs.delete(f"{self.output}/{_SUCCESS}")
            self.fs.delete(self.output)
        if self.fs.exists(self.output) and not overwrite:
            raise ConfigError(f"--output: {output} already exists; pass --overwrite to replace it")
        if self.fs.exists(self.output) and self.fs.object_store:
            if not self.fs.exists(f"{self.output}/{_SUCCESS}"):
                raise ConfigError(
                    f"--output: {output} holds a run that did not commit (still running, or "
                    f"killed on another host); if none runs, clear it: jobs/recover.py {output}"
                )
            raise ConfigError(
                f"--output: {output} already exists; on an object store an output is not "
                "replaced (that would copy every file): delete it first or choose another --output"
            )
        in_place = self.fs.object_store
        self.staging = self.output if in_place else _sibling(self.output, "inprogress", self.run)
        self.aside = _sibling(self.output, "aside", self.run)
        self.overwrite = overwrite
        self.committed = False
        self.schemas = {}
        # Local disks and HDFS: a directory of this run's own.  Object stores: the
        # output itself, claimed by an exclusive create (two runs on one new path).
        self.lease = Lease(self.fs, self.staging, self.run, exclusive=in_place)
        if not self.lease.acquired:
            raise ConfigError(
                f"--output: another run started writing {output} at the same moment; "
                "this one stopped without writing"
            )

    def _earlier_attempt(self) -> bool:
        """Whether the output on the object store was written by this run before."""
        owner = read_owner(self.fs, self.output)
        return owner is not None and owner.get("run") == self.run

    def path(self, name: str) -> str:
        return f"{self.staging}/{name}"

    def write(self, df: DataFrame, name: str, **options: str) -> None:
        df.write.mode("error").options(**options).parquet(self.path(name))
        self._record(df, name)

    def replace(self, df: DataFrame, name: str) -> None:
        """Write ``df`` as dataset ``name`` in place of the one there (``df`` may read it)."""
        self.write(df, name + ".new")
        self.fs.delete(self.path(name))
        self.fs.rename(self.path(name + ".new"), self.path(name))
        self.schemas[name] = self.schemas.pop(name + ".new")

    def write_json(self, name: str, data: Any) -> None:
        self.fs.write_text(self.path(name), json.dumps(data, indent=2, sort_keys=True) + "\n")

    def write_bytes(self, name: str, data: bytes) -> None:
        self.fs.write_bytes(self.path(name), data)

    def commit(self) -> None:
        """Make the staged output the output, never deleting the old one before
        the new one is in place.

        Raises :class:`ConfigError`, leaving the other output untouched, when
        an output appeared at the path since the start of a run without
        ``overwrite``; an ``OSError`` of a rename leaves the old output in place.
        """
        if self.fs.object_store:
            self._check_owner()
            self.lease.stop()
            maybe_die("commit:staged")
            self.fs.write_text(self.path(_SUCCESS), "")
            self.committed = True
            return
        self.lease.stop()  # no renewal may recreate the staging directory once it moves
        self.fs.sync(self.staging)  # every file durable before _SUCCESS names the output
        self.fs.write_text(self.path(_SUCCESS), "")
        maybe_die("commit:staged")
        if self.fs.exists(self.output):
            self._check_overwrite()
            self.fs.rename(self.output, self.aside)
            maybe_die("commit:aside")
        self._publish()
        self.committed = True
        maybe_die("commit:published")
        try:
            if self.fs.exists(self.aside):
                # Unmarked first: a half-deleted old output never looks complete.
                self.fs.delete(f"{self.aside}/{_SUCCESS}")
                maybe_die("commit:deleting-old")
                self.fs.delete(self.aside)
        except OSError as exc:  # committed all the same; the next run deletes it
            log.warning("could not delete the old output %s (%s)", self.aside, exc)

    def _check_overwrite(self) -> None:
        if not self.overwrite:
            raise ConfigError(
                f"--output: {self.output} appeared while this run was writing; it was "
                "left as it is (pass --overwrite to replace it)"
            )

    def _check_owner(self) -> None:
        """On an object store: refuse to commit an output another run took over."""
        if not self._owns_staging():
            raise ConfigError(
                f"--output: {self.output} was taken over by another run while this one "
                "was writing; not committed"
            )

    def _owns_staging(self) -> bool:
        return self.lease.owned()

    def _publish(self) -> None:
        """Rename the staging directory to the output; on failure put the old one back."""
        try:
            if self.fs.exists(self.output):  # HDFS would move staging inside it
                self._check_overwrite()
                raise OSError(f"{self.output} appeared while committing")
            self.fs.rename(self.staging, self.output)
        except BaseException:
            if self.fs.exists(self.aside) and not self.fs.exists(self.output):
                self.fs.rename(self.aside, self.output)
            raise

    def abort(self) -> None:
        """Delete the staged output, unless the old one is not back in place yet
        (then both stay for :func:`recover_output`)."""
        if self.committed:
            return
        self.lease.stop()
        if self.fs.object_store:  # the output itself: only if this run still owns it
            if self._owns_staging() and not self.fs.exists(self.path(_SUCCESS)):
                self.fs.delete(self.staging)
        elif self.fs.exists(self.output) or not self.fs.exists(self.aside):
            self.fs.delete(self.staging)
        else:  # given up: recover_output may now finish the commit
            self.fs.delete(f"{self.staging}/{OWNER}")
            log.error("%s is not in place: run jobs/recover.py %s", self.output, self.output)


class StagewiseOutput(_KnownSchemas):
    """An output directory filled one stage at a time by the stage jobs.

    A stage is committed as one unit.  Each dataset (and ``report.json``) it
    writes goes under this run's hidden staging directory, where the stage also
    reads it back; :meth:`commit` then records the names in ``_COMMIT`` (an
    exclusive create: the point after which the stage is the new one) and swaps
    each in: the older copy renamed into the staging directory's ``_old/``, the
    new one into place, the old one deleted.  A stage job killed before
    ``_COMMIT`` leaves the output as it was (its staging directory is deleted by
    the next stage job or ``jobs/recover.py``); killed after it, recovery
    finishes the swaps.  Either way every name holds the old stage or every name
    the new one, never a mix.
    """

    def __init__(self, spark: SparkSession, output: str):
        self.spark = spark
        self.fs = FileSystem(spark, output)
        self.output = self.fs.qualify(output).rstrip("/")
        recover_stages(spark, self.output, all_hosts=False)
        self.run = uuid.uuid4().hex[:12]
        self.staging = f"{self.output}/.inprogress-{self.run}"
        self.schemas = {}
        self.pending: list[str] = []  # written by this stage, swapped in by commit()
        self.lease = Lease(self.fs, self.staging, self.run)

    def path(self, name: str) -> str:
        """Where ``name`` is read: this stage's own copy once it wrote one."""
        if name in self.pending:
            return f"{self.staging}/{name}"
        return f"{self.output}/{name}"

    def staged(self, name: str) -> str:
        """The path this stage writes ``name`` to (swapped in by :meth:`commit`)."""
        if name not in self.pending:
            self.pending.append(name)
        return f"{self.staging}/{name}"

    def require(self, name: str, stage_job: str) -> str:
        path = self.path(name)
        if not self.fs.exists(path + "/_SUCCESS"):
            raise ConfigError(f"--output: {path} is missing or incomplete; run {stage_job} first")
        return path

    def write(self, df: DataFrame, name: str, **options: str) -> None:
        df.write.mode("error").options(**options).parquet(self.staged(name))
        self._record(df, name)

    def replace(self, df: DataFrame, name: str) -> None:
        """Write ``df`` as this stage's ``name`` (``df`` may read the one there,
        which stays in place until the commit)."""
        self.write(df, name)

    def write_json(self, name: str, data: Any) -> None:
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        self.fs.write_text(self.staged(name), text)

    def read_json(self, name: str) -> dict:
        """The JSON file ``name`` of the output; ``{}`` before any stage wrote one.

        Raises :class:`ConfigError` when it is missing but stage datasets exist:
        the report of earlier stages would be lost silently.
        """
        path = self.path(name)
        if self.fs.exists(path):
            return json.loads(self.fs.read_text(path))
        stages = [
            n
            for n in self.fs.list_names(self.output)
            if self.fs.exists(f"{self.output}/{n}/_SUCCESS")
        ]
        if stages:
            raise ConfigError(
                f"--output: {path} is missing though stages wrote {', '.join(stages)}; "
                "re-run the stage jobs from jobs/signatures.py into a new --output"
            )
        return {}

    def commit(self) -> None:
        """Swap every dataset of this stage in, as one unit (class docstring)."""
        marker = json.dumps({"names": self.pending}).encode()
        self.lease.stop()  # no renewal may recreate the staging directory once it is swapped
        self.fs.sync(self.staging)  # the stage's files durable before _COMMIT names them
        if not self.fs.create_exclusive(f"{self.staging}/{_STAGE_COMMIT}", marker):
            raise ConfigError(f"--output: {self.staging} was committed twice")
        _finish_stage(self.fs, self.output, self.staging, self.pending)
        self.pending = []  # read from their places from now on

    def abort(self) -> None:
        """Leave the output as it was: nothing of this stage was swapped in."""
        self.lease.stop()
        self.fs.delete(self.staging)


# The commit record of a stage job's staging directory (StagewiseOutput.commit).
_STAGE_COMMIT = "_COMMIT"


def _finish_stage(fs: FileSystem, output: str, staging: str, names: list[str]) -> None:
    """Swap each staged ``name`` in place of the older copy, which is deleted last;
    then delete the staging directory.  Safe to run again after a kill: a name
    already swapped has no staged copy left."""
    for name in names:
        new, old = f"{staging}/{name}", f"{staging}/_old/{name}"
        if not fs.exists(new):
            continue  # swapped in before a kill
        if fs.exists(f"{output}/{name}") and not fs.exists(old):
            fs.rename(f"{output}/{name}", old)
            maybe_die("commit:aside")
        fs.rename(new, f"{output}/{name}")
        maybe_die("commit:published")
    fs.delete(staging)


def recover_stages(spark: SparkSession, output: str, all_hosts: bool = True) -> list[str]:
    """Finish or roll back what killed stage jobs left in ``output``: a staging
    directory with its ``_COMMIT`` record has its swaps finished (the stage is
    the new one); without it, each older copy in its ``_old/`` (left by
    releases that swapped dataset by dataset) returns to its name if that is
    empty, and the staging directory is deleted.  Returns one line per action."""
    fs = FileSystem(spark, output)
    output = fs.qualify(output).rstrip("/")
    done: list[str] = []
    for staging in fs.list_names(output):
        path = f"{output}/{staging}"
        if not staging.startswith(".inprogress-") or not abandoned(fs, path, all_hosts):
            continue
        if fs.exists(f"{path}/{_STAGE_COMMIT}"):
            names = json.loads(fs.read_text(f"{path}/{_STAGE_COMMIT}"))["names"]
            _finish_stage(fs, output, path, names)
            done.append(f"finished the commit of {staging} ({', '.join(names)})")
            continue
        for name in fs.list_names(f"{path}/_old"):
            if not fs.exists(f"{output}/{name}"):
                fs.rename(f"{path}/_old/{name}", f"{output}/{name}")
                done.append(f"restored {name}")
        fs.delete(path)
        done.append(f"deleted {staging}")
    return done
