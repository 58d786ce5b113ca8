"""Command-line parsing shared by the jobs in ``jobs/``.

Flags mirror :class:`lsh_spark.config.DedupConfig` keys; ``--config FILE`` reads
the same keys from YAML and flags given on the command line win.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from lsh_spark.config import (
    FORMATS,
    KEEP_POLICIES,
    METHODS,
    SHINGLE_KINDS,
    SIMHASH_WEIGHTS,
    VECTOR_METHODS,
    TEXT_UNITS,
    ConfigError,
    DedupConfig,
    load_yaml,
)

_HELP = {
    "format": f"input format, one of {', '.join(FORMATS)} (default: from the file "
              "extensions; .gz and other codecs are read transparently)",
    "id_col": "column holding a unique document id (default: id; when the input has no "
              "such column a deterministic id is derived from file name and content)",
    "text_col": "column holding the document text (default: text)",
    "text_unit": "for --format text: one document per 'line' (default) or per 'file'",
    "threshold": "Jaccard similarity at or above which two documents are duplicates, "
                 "in (0, 1] (default: 0.8)",
    "num_perm": "MinHash permutations per signature, 1..4096 (default: 128)",
    "bands": "LSH bands b (default: chosen so a pair at the threshold becomes a "
             "candidate with probability >= --target-recall at the least cost)",
    "rows": "rows per band r; bands x rows must be <= --num-perm (default: with --bands)",
    "target_recall": "candidate probability at the threshold used to choose b and r "
                     "(default: 0.99)",
    "shingle": "shingle kind: 'word' k-grams (default) or 'char' k-grams (short texts, "
               "scripts without spaces)",
    "k": "shingle length in words or characters (default: 5)",
    "seed": "seed of the shingle hashes and MinHash permutations, 0..2^31-1 (default: 1); "
            "same seed, same signatures on every machine",
    "keep": "which member of a duplicate cluster is kept: 'min-id' (default) or 'longest'",
    "max_bucket_size": "buckets with more members get star edges to their smallest id "
                       "instead of all pairs (default: 5000)",
    "block_min_size": "buckets with at least this many members (and at most "
                      "--max-bucket-size) are verified as one block by a matrix product "
                      "instead of pair by pair (default: 32)",
    "max_family_size": "a family of large buckets (connected blocks) with more members "
                       "writes only a spanning forest of its verified pairs to pairs/; "
                       "the clusters are the same as when every pair is listed "
                       "(default: 3000)",
    "max_text_chars": "documents longer than this many characters are rejected "
                      "(default: 20000000)",
    "max_cc_iterations": "round limit of the connected-components loop (default: 64)",
    "checkpoint_dir": "reliable checkpoint directory for clustering (default: a "
                      "temporary folder inside the output, removed at the end)",
    "method": "LSH family: 'minhash' (Jaccard, default), 'simhash' (Hamming distance of "
              "64-bit fingerprints), 'hyperplane' (cosine of --vector-col), 'pstable' "
              "(Euclidean distance of --vector-col)",
    "max_hamming": "simhash: pairs at most this many bits apart are duplicates (default: 3)",
    "simhash_blocks": "simhash: blocks B of the permuted block tables, C(B, max-hamming) "
                      "tables (default: max-hamming + 3)",
    "simhash_weight": "simhash: shingle weight 'tf' (term frequency, default) or 'uniform'",
    "verify_jaccard": "simhash: also compute the exact Jaccard of every pair within "
                      "--max-hamming and keep only pairs at or above --threshold",
    "vector_col": "hyperplane/pstable: column holding the vector (array of numbers or an "
                  "MLlib vector; default: vector)",
    "max_distance": "pstable: pairs at most this Euclidean distance apart are duplicates "
                    "(required)",
    "bucket_width": "pstable: bucket width w of floor((a.v + b) / w) (default: 4 x "
                    "--max-distance)",
}

_TYPES = {
    "format": dict(choices=FORMATS), "text_unit": dict(choices=TEXT_UNITS),
    "shingle": dict(choices=SHINGLE_KINDS), "keep": dict(choices=KEEP_POLICIES),
    "threshold": dict(type=float), "target_recall": dict(type=float),
    "num_perm": dict(type=int), "bands": dict(type=int), "rows": dict(type=int),
    "k": dict(type=int), "seed": dict(type=int), "max_bucket_size": dict(type=int),
    "block_min_size": dict(type=int), "max_family_size": dict(type=int),
    "method": dict(choices=METHODS),
    "max_hamming": dict(type=int), "simhash_blocks": dict(type=int),
    "simhash_weight": dict(choices=SIMHASH_WEIGHTS), "verify_jaccard": dict(action="store_true"),
    "max_distance": dict(type=float), "bucket_width": dict(type=float),
    "max_text_chars": dict(type=int), "max_cc_iterations": dict(type=int),
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit code 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(prog: str, description: str, need_input: bool = True,
                 exclude: tuple[str, ...] = (), output_default: str | None = None
                 ) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description=description)
    if need_input:
        parser.add_argument("--input", required=True,
                            help="input file or directory (local path, hdfs://, s3a://, ...)")
    if output_default is None:
        parser.add_argument("--output", required=True, help="output directory")
    else:
        parser.add_argument("--output", default=output_default,
                            help=f"output directory (default: {output_default})")
    parser.add_argument("--config", help="YAML file whose keys are these flags without "
                                         "the dashes (see conf/); flags given here win")
    for key in DedupConfig.keys():
        if key in exclude:
            continue
        flag = "--" + key.replace("_", "-")
        parser.add_argument(flag, dest=key, default=argparse.SUPPRESS, help=_HELP[key],
                            **_TYPES.get(key, {}))
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None,
          job_keys: dict[str, str] | None = None) -> tuple[argparse.Namespace, DedupConfig]:
    """Parse flags, merge with ``--config``, validate. Exits with one line on error.

    ``job_keys`` maps YAML keys of the job's own flags (not :class:`DedupConfig`
    keys) to their ``args`` attribute; a flag given on the command line wins.
    """
    args = parser.parse_args(argv)
    values: dict[str, Any] = {}
    try:
        if args.config:
            values.update(load_yaml(args.config))
        for key, dest in (job_keys or {}).items():
            for spelling in (key, key.replace("_", "-"), key.replace("-", "_")):
                if spelling in values:
                    value = values.pop(spelling)
                    if getattr(args, dest, None) is None:
                        setattr(args, dest, value)
        values.update({k: getattr(args, k) for k in DedupConfig.keys() if hasattr(args, k)})
        cfg = DedupConfig.from_mapping(values, source=args.config or "flags")
        precheck_paths(args)
    except ConfigError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    return args, cfg


def _local(path: str) -> str | None:
    """The local file system path of ``path``, or None for a remote URI (hdfs://, s3a://)."""
    if path.startswith("file:"):
        return path[len("file:"):]
    return None if "://" in path else path


def precheck_paths(args: argparse.Namespace) -> None:
    """Fail before Spark starts when a local --input is missing or --output exists.

    Remote paths are checked again through Hadoop once the session is up.
    """
    import os

    local_in = _local(getattr(args, "input", None) or "")
    if getattr(args, "input", None) and local_in is not None and not os.path.exists(local_in):
        raise ConfigError(f"--input: path does not exist: {args.input}")
    local_out = _local(args.output)
    if (getattr(args, "overwrite", None) is False and local_out is not None
            and os.path.exists(local_out)):
        raise ConfigError(
            f"--output: {args.output} already exists; pass --overwrite to replace it")


def fail(prog: str, exc: Exception) -> None:
    """Print a one-line error for a known user error and exit 2."""
    sys.stderr.write(f"{prog}: error: {exc}\n")
    sys.exit(2)


def run_stage(name: str, description: str, stage, needs_input: bool, requires: tuple,
              argv=None) -> int:
    """Main of a per-stage job: parse flags, check earlier stages, run, merge the report."""
    from lsh_spark.io import InputError, StagewiseOutput
    from lsh_spark.pipeline import describe_bounded_families, merge_reports, report_header
    from lsh_spark.session import build_session, size_shuffle_partitions, stop_session
    parser = build_parser(f"{name}.py", description, need_input=needs_input)
    args, cfg = parse(parser, argv)
    spark = build_session(f"lsh-spark {name}")
    try:
        out = StagewiseOutput(spark, args.output)
        for dataset, job in requires:
            if dataset == "shingles" and cfg.method in VECTOR_METHODS:
                dataset = "vectors"  # what the vector methods verify with
            out.require(dataset, job)
        spark.sparkContext.setCheckpointDir(cfg.checkpoint_dir or out.path("_checkpoints"))
        sized_by = args.input if needs_input else out.path("signatures")
        size_shuffle_partitions(spark, out.fs.size_bytes(sized_by))
        section = stage(spark, args.input, out, cfg) if needs_input else stage(spark, out, cfg)
        old = out.read_json("report.json")
        if old.get("parameters") not in (None, cfg.to_dict()):
            sys.stderr.write(f"{name}.py: warning: parameters differ from the earlier stages "
                             "recorded in report.json\n")
        header = report_header(getattr(args, "input", old.get("input_path")), cfg)
        report = merge_reports(old, header, section)
        describe_bounded_families(spark, out, report)
        out.write_json("report.json", report)
        out.commit()
        out.fs.delete(out.path("_checkpoints"))
    except (ConfigError, InputError) as exc:
        fail(f"{name}.py", exc)
    finally:
        stop_session(spark)
    print(json.dumps({"stage": name, "output": args.output, **section.get("counts", {})}))
    return 0
