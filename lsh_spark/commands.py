"""The jobs as functions, and the ``lsh-spark`` console command.

``jobs/*.py`` (the ``spark-submit`` entry points) and ``lsh-spark COMMAND``
(installed with the wheel) call the same functions here.  Each is
``command(argv=None, spark=None, prog=...) -> int``: it parses ``argv`` (default
``sys.argv[1:]``) with the flags of docs/options.md, runs in ``spark`` if given
(a notebook's or a test's session, left as it was; see
:func:`lsh_spark.cli.run_job`) or else in a session of its own, prints its JSON
summary line and returns the exit code.  ``prog`` names the command in
``--help`` and in error lines (``dedup.py: error: ...``).  The first paragraph
of each docstring is its ``--help`` description.

Standard output holds the summary alone, one JSON object (for ``| jq`` and a
scheduler's last-line result); every other line goes to standard error.  PySpark
is imported once a command runs, so ``--help`` works without it.
"""

from __future__ import annotations

import argparse
import inspect as pyinspect
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from lsh_spark import __version__
from lsh_spark.cli import add_session_flags, build_parser, parse, parse_flags, run_job, run_stage
from lsh_spark.jobs import conf_names, find_conf, job_file

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Argv = Sequence[str] | None


def _run(prog: str, args: argparse.Namespace, spark: SparkSession | None, work: Callable) -> Any:
    """``work(session)`` in the command's session: :func:`lsh_spark.cli.run_job` with
    the command's session flags (--remote, --progress; --master, --conf and
    --properties-file for ``lsh-spark``)."""
    return run_job(prog, work, spark=spark, **args.session)


def _say(line: str) -> None:
    """A line for the person at the terminal: standard error (stdout is the JSON)."""
    print(line, file=sys.stderr)


def _about(fn: Callable[..., Any]) -> str:
    """The first paragraph of ``fn``'s docstring, on one line."""
    return " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())


def dedup(argv: Argv = None, spark: SparkSession | None = None, prog: str = "dedup.py") -> int:
    """Runs the whole near-duplicate pipeline: signatures, candidates, exact
    verification, clusters and the deduplicated corpus, written atomically to
    --output.  See docs/options.md for every option and README.md for the
    output layout."""
    args, cfg = parse(build_parser("dedup.py", _about(dedup), prog), argv)
    report = _run(prog, args, spark, lambda s: _dedup(s, args, cfg))
    c = report["counts"]
    keys = (
        "input_records",
        "rejected",
        "candidate_pairs",
        "verified_pairs",
        "duplicate_clusters",
        "deduped_documents",
    )
    summary = {"output": args.output, **{k: c[k] for k in keys}}
    if args.output_table:
        summary["output_table"] = args.output_table
    print(json.dumps({**summary, "seconds": report["seconds"]["total"]}))
    _say(
        f"results in {args.output}/ (deduped/, clusters/, pairs/, rejects/, report.json, "
        "s_curve.png)"
    )
    return 0


def _dedup(spark: SparkSession, args: argparse.Namespace, cfg: Any) -> dict:
    """The dedup run of ``args``: from --input or --input-table, into --output, then
    the deduplicated corpus into --output-table."""
    from lsh_spark.pipeline import run_dedup
    from lsh_spark.readers import check_table_target, read_table, write_table

    source = read_table(spark, args.input_table) if args.input_table else args.input
    if args.output_table:
        check_table_target(spark, args.output_table, args.output_format, args.overwrite)
    report = run_dedup(spark, source, args.output, cfg, overwrite=args.overwrite)
    if args.output_table:
        deduped = spark.read.parquet(f"{args.output.rstrip('/')}/deduped")
        write_table(deduped, args.output_table, args.output_format, args.overwrite)
    return report


def decontaminate(
    argv: Argv = None, spark: SparkSession | None = None, prog: str = "decontaminate.py"
) -> int:
    """Removes from the input what overlaps the reference collections (evaluation
    sets, an earlier release): documents that contain a reference item's word
    n-grams (containment) or are near-duplicates of a reference document
    (Jaccard), with the matching reference item named in matches/.  Writes
    clean/, removed/, matches/, rejects/, reference_rejects/ and report.json
    atomically to --output.  See docs/decontamination.md."""
    from lsh_spark.config import DecontamConfig

    args, cfg = parse(build_parser("decontaminate.py", _about(decontaminate), prog), argv)
    from lsh_spark.decontam import run_decontaminate

    dc = DecontamConfig(**{k: getattr(args, k) for k in DecontamConfig.__dataclass_fields__})
    report = _run(
        prog,
        args,
        spark,
        lambda s: run_decontaminate(
            s, args.input, args.reference, args.output, cfg, dc, overwrite=args.overwrite
        ),
    )
    summary = {"output": args.output, **report["counts"], "seconds": report["seconds"]["total"]}
    print(json.dumps(summary))
    _say(f"results in {args.output}/ (clean/, removed/, matches/, rejects/, report.json)")
    return 0


def crawl_parser(prog: str = "crawl_dedup.py") -> argparse.ArgumentParser:
    """The flags of :func:`crawl` (for the tests of ``--config``)."""
    return build_parser("crawl_dedup.py", _about(crawl), prog)


def crawl(
    argv: Argv = None, spark: SparkSession | None = None, prog: str = "crawl_dedup.py"
) -> int:
    """Deduplicates one crawl batch (WARC, WARC.gz, WET, or any --format of the
    dedup job) within itself and against every document kept in --index before,
    with exact Jaccard verification; writes deduped/, duplicates/, superseded/,
    rejects/ and report.json under --output; then adds the batch's new documents
    to the index as one compare-and-swap of its manifest (a batch that loses it
    to another batch or a compaction runs again from the new version,
    --max-retries times); the output is committed after the index.  Re-running
    a committed batch (same --batch-id) changes nothing.  See docs/crawl.md."""
    args, cfg = parse(crawl_parser(prog), argv)
    from lsh_spark.crawl import run_crawl_batch

    report = _run(
        prog,
        args,
        spark,
        lambda s: run_crawl_batch(
            s,
            args.batch,
            args.index,
            args.output,
            cfg,
            batch_id=args.batch_id,
            keep=args.keep,
            max_retries=args.max_retries,
        ),
    )
    index = report["index"]
    summary = {
        "batch_id": report["batch_id"],
        "status": report["status"],
        "index_version": index["after"]["version"],
        "attempts": index.get("attempts", 1),
        "index_documents": index["after"]["documents"],
        **report["counts"],
    }
    print(json.dumps(summary))
    if report["status"] == "already_applied":
        _say(report["message"])
    return 0


def compact(
    argv: Argv = None, spark: SparkSession | None = None, prog: str = "index_compact.py"
) -> int:
    """Rewrites a crawl index into fewer, larger files without changing its
    content: merges all live segments into one (documents sorted by key, files
    of about --target-file-mb), drops the documents later batches superseded,
    commits the result as a new index version through the same compare-and-swap
    as a batch, and deletes the manifests and segments no reader needs that are
    older than --retention-hours.  A batch running meanwhile is not harmed."""
    args, _ = parse(build_parser("index_compact.py", _about(compact), prog), argv)
    from lsh_spark.index import compact as compact_index

    result = _run(
        prog,
        args,
        spark,
        lambda s: compact_index(
            s, args.index, args.target_file_mb << 20, args.retention_hours * 3600
        ),
    )
    print(json.dumps(result))
    return 0


def advise(argv: Argv = None, spark: SparkSession | None = None, prog: str = "advise.py") -> int:
    """Recommends LSH parameters from a sample of the corpus: measures the exact
    similarity of every pair of the sample, recommends num-perm, bands and rows
    (or the method's equivalents) with the predicted recall at --threshold and
    the predicted candidate pairs per document, then checks the prediction by
    hashing the sample.  Writes advice.json and s_curve.png under --output."""
    args, cfg = parse(build_parser("advise.py", _about(advise), prog), argv)
    advice = _run(prog, args, spark, lambda s: _write_advice(s, args, cfg))
    rec = advice["recommended"]
    keys = (
        ("max_hamming", "blocks", "tables", "jaccard_recall")
        if cfg.method == "simhash"
        else ("num_perm", "bands", "rows", "predicted_recall")
    )
    print(json.dumps({k: rec[k] for k in (*keys, "predicted_candidates_per_document", "flags")}))
    _say(f"advice in {args.output}/ (advice.json, s_curve.png)")
    return 0


def _write_advice(spark: SparkSession, args: argparse.Namespace, cfg: Any) -> dict:
    """Advise on the sample and write advice.json and the plot under --output."""
    from lsh_spark.advisor import advise as advise_on
    from lsh_spark.advisor import s_curve_png, simhash_png
    from lsh_spark.outputs import StagedOutput

    out = StagedOutput(spark, args.output, overwrite=args.overwrite)
    advice = advise_on(spark, args.input, cfg, args.sample)
    curve = advice.pop("_curve")
    if cfg.method == "simhash":
        png = simhash_png(advice)
        advice.pop("_by_k")
    else:
        png = s_curve_png(curve[0], curve[1], f"advice for {args.input}")
    out.write_json("advice.json", advice)
    out.write_bytes("s_curve.png", png)
    out.commit()
    return advice


def recover(argv: Argv = None, spark: SparkSession | None = None, prog: str = "recover.py") -> int:
    """Finishes an interrupted commit of an output directory and deletes what
    killed runs left: an old output renamed aside, a new one under a hidden
    staging name, a stage job's half-swapped dataset.  The next run into the
    same output repairs this by itself; this does it on demand.  Run it when no
    job is writing OUT: it treats every staging directory of another host as
    abandoned."""
    parser = argparse.ArgumentParser(prog=prog, description=_about(recover))
    parser.add_argument("output", metavar="OUT", help="the output directory to recover")
    add_session_flags(parser)
    args = parse_flags(parser, argv)
    result = _run(prog, args, spark, lambda s: _recover(s, args.output))
    print(json.dumps(result))
    return 0


def _recover(spark: SparkSession, output: str) -> dict:
    """Recover ``output`` as a whole-run output and as a stage jobs' output."""
    from lsh_spark.outputs import recover_output, recover_stages
    from lsh_spark.store import FileSystem

    actions = recover_output(spark, output)
    if FileSystem(spark, output).is_dir(output):
        actions += recover_stages(spark, output)
    return {"output": output, "actions": actions}


def inspect(
    argv: Argv = None, spark: SparkSession | None = None, prog: str = "inspect_run.py"
) -> int:
    """Writes one self-contained HTML page (no server) of what a dedup run merged
    and why: the largest clusters with their kept document, a sample of removed
    documents beside the document kept in their place with the differing words
    highlighted and their exact Jaccard, the similarity histogram, the S-curve,
    counts per stage and rejects by reason.  Of a crawl batch's output: its
    duplicates beside the kept documents; of a decontamination output: removed
    documents beside the reference items that matched them."""
    parser = argparse.ArgumentParser(prog=prog, description=_about(inspect))
    parser.add_argument(
        "output", metavar="OUT", help="the output of a dedup, crawl or decontaminate run"
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--input", help="the run's input (for the texts; not needed for decontaminate)"
    )
    source.add_argument("--input-table", help="the run's input as a catalog table (--input-table)")
    parser.add_argument("--html", help="where to write the page (default: OUT/inspect.html)")
    add_session_flags(parser)
    args = parse_flags(parser, argv)
    result = _run(prog, args, spark, lambda s: _inspect(s, args))
    print(json.dumps(result))
    return 0


def _inspect(spark: SparkSession, args: argparse.Namespace) -> dict:
    """The page of ``args.output``, the texts from --input or --input-table."""
    from lsh_spark.inspection import inspect_output
    from lsh_spark.readers import read_table

    source = read_table(spark, args.input_table) if args.input_table else args.input
    return inspect_output(spark, args.output, source, args.html)


# -- the stage jobs ----------------------------------------------------------------
def signatures(
    argv: Argv = None, spark: SparkSession | None = None, prog: str = "signatures.py"
) -> int:
    """Stage 1: reads and validates the input, shingles, MinHash -> shingles/,
    signatures/, rejects/."""
    return run_stage("signatures.py", _about(signatures), "stage_signatures", (), argv, spark, prog)


def candidates(
    argv: Argv = None, spark: SparkSession | None = None, prog: str = "candidates.py"
) -> int:
    """Stage 2: LSH band keys and bucket grouping -> candidates/, blocks/ (reads
    signatures/)."""
    needs = (("signatures", "signatures"),)
    return run_stage(
        "candidates.py", _about(candidates), "stage_candidates", needs, argv, spark, prog
    )


def verify(argv: Argv = None, spark: SparkSession | None = None, prog: str = "verify.py") -> int:
    """Stage 3: exact Jaccard of every candidate -> pairs/.  Reads shingles/,
    signatures/ (stage 1) and candidates/, blocks/ (stage 2); not the input."""
    needs = (
        ("signatures", "signatures"),
        ("shingles", "signatures"),
        ("candidates", "candidates"),
        ("blocks", "candidates"),
    )
    return run_stage("verify.py", _about(verify), "stage_verify", needs, argv, spark, prog)


def cluster(argv: Argv = None, spark: SparkSession | None = None, prog: str = "cluster.py") -> int:
    """Stage 4: connected components, keep policy -> clusters/, deduped/ (reads
    pairs/, the input)."""
    needs = (("signatures", "signatures"), ("pairs", "verify"))
    return run_stage("cluster.py", _about(cluster), "stage_cluster", needs, argv, spark, prog)


# -- lsh-spark COMMAND ---------------------------------------------------------------
# Command -> (function, what it does in a line).  The spark-submit job of each is
# lsh_spark/jobs/<the function's default prog> (job_of), and jobs/ of the checkout.
COMMANDS: dict[str, tuple[Callable[..., int], str]] = {
    "dedup": (dedup, "the whole pipeline: pairs, clusters, deduplicated corpus"),
    "decontaminate": (decontaminate, "remove what overlaps reference collections"),
    "crawl": (crawl, "deduplicate a crawl batch against an incremental index"),
    "compact": (compact, "rewrite a crawl index into fewer, larger files"),
    "advise": (advise, "recommend LSH parameters from a sample"),
    "recover": (recover, "finish an interrupted commit of an output"),
    "inspect": (inspect, "an HTML page of what a dedup run merged and why"),
    "signatures": (signatures, "stage 1: shingles and signatures"),
    "candidates": (candidates, "stage 2: LSH buckets and candidate pairs"),
    "verify": (verify, "stage 3: exact Jaccard of the candidates"),
    "cluster": (cluster, "stage 4: clusters and the deduplicated corpus"),
}


def job_of(command: str) -> str:
    """The job file name of ``command`` (its function's default ``prog``).

    >>> job_of("crawl"), job_of("inspect")
    ('crawl_dedup.py', 'inspect_run.py')
    """
    return pyinspect.signature(COMMANDS[command][0]).parameters["prog"].default


def submit_path(argv: Argv = None, prog: str = "lsh-spark submit-path") -> int:
    """Prints the path of a file the wheel ships, for spark-submit: a command's
    job file (NAME a command: dedup, crawl, ...) or a settings file of conf/
    (NAME spark-cluster.properties, spark-cluster.yaml, local.properties, ...).
    It prints the path alone, one line."""
    names = [*COMMANDS, *conf_names()]
    parser = argparse.ArgumentParser(prog=prog, description=_about(submit_path))
    parser.add_argument("name", metavar="NAME", help="one of: " + ", ".join(names))
    name = parser.parse_args(argv).name
    if name not in names:
        parser.exit(2, f"{prog}: error: unknown NAME {name!r}; allowed: {', '.join(names)}\n")
    print(job_file(job_of(name)) if name in COMMANDS else find_conf(name))
    return 0


def usage() -> str:
    """``lsh-spark --help``."""
    lines = [
        "usage: lsh-spark COMMAND [flags]   (lsh-spark COMMAND --help: its flags)",
        "",
        "Near-duplicate detection on Apache Spark. Each command prints one JSON object on",
        "stdout (messages go to stderr) and takes --master, --conf KEY=VALUE and",
        "--properties-file as spark-submit does. Commands:",
    ]
    lines += [f"  {name:<14}{line}" for name, (_, line) in COMMANDS.items()]
    lines += [
        "",
        "  submit-path NAME   the file to hand to spark-submit: a command's job file",
        '                     (spark-submit ... "$(lsh-spark submit-path dedup)" --input ...)',
        "                     or one of conf/ (spark-cluster.properties, spark-cluster.yaml)",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Argv = None) -> int:
    """``lsh-spark COMMAND [flags]``: run ``COMMAND`` with its flags."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        (sys.stdout if argv else sys.stderr).write(usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"lsh-spark {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name == "submit-path":
        return submit_path(rest)
    if name not in COMMANDS:
        sys.stderr.write(
            f"lsh-spark: error: unknown command {name!r}; allowed: {', '.join(COMMANDS)}, "
            "submit-path\n"
        )
        return 2
    return COMMANDS[name][0](rest, prog=f"lsh-spark {name}")
