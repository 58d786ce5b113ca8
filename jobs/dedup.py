"""spark-submit jobs/dedup.py --input PATH --output DIR [options]

Runs the whole near-duplicate pipeline: signatures, candidates, exact
verification, clusters and the deduplicated corpus, written atomically to
--output.  See README.md for every option and the output layout.
"""

import json
import sys

from lsh_spark.cli import build_parser, fail, parse
from lsh_spark.config import ConfigError
from lsh_spark.io import InputError
from lsh_spark.pipeline import run_dedup
from lsh_spark.session import build_session, stop_session


def main(argv=None) -> int:
    parser = build_parser("dedup.py", __doc__.split("\n\n")[1].replace("\n", " "))
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --output if it exists (the old output stays intact "
                             "until the new run has succeeded)")
    args, cfg = parse(parser, argv)
    spark = build_session("lsh-spark dedup")
    try:
        report = run_dedup(spark, args.input, args.output, cfg, overwrite=args.overwrite)
    except (ConfigError, InputError) as exc:
        fail("dedup.py", exc)
    finally:
        stop_session(spark)
    c = report["counts"]
    print(json.dumps({"output": args.output, **{k: c[k] for k in (
        "input_records", "rejected", "candidate_pairs", "verified_pairs",
        "duplicate_clusters", "deduped_documents")}, "seconds": report["seconds"]["total"]}))
    print(f"results in {args.output}/ (deduped/, clusters/, pairs/, rejects/, report.json, "
          "s_curve.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
