"""spark-submit jobs/dedup.py --input PATH --output DIR [options]

Runs the whole near-duplicate pipeline: signatures, candidates, exact
verification, clusters and the deduplicated corpus, written atomically to
--output.  See docs/options.md for every option and README.md for the output
layout.
"""

import json
import sys

from lsh_spark.cli import build_parser, parse, run_job
from lsh_spark.pipeline import run_dedup

PROG = "dedup.py"


def main(argv=None, spark=None) -> int:
    args, cfg = parse(build_parser(PROG, __doc__.split("\n\n")[1].replace("\n", " ")), argv)
    report = run_job(
        PROG,
        lambda spark: run_dedup(spark, args.input, args.output, cfg, overwrite=args.overwrite),
        remote=args.remote,
        spark=spark,
    )
    c = report["counts"]
    print(
        json.dumps(
            {
                "output": args.output,
                **{
                    k: c[k]
                    for k in (
                        "input_records",
                        "rejected",
                        "candidate_pairs",
                        "verified_pairs",
                        "duplicate_clusters",
                        "deduped_documents",
                    )
                },
                "seconds": report["seconds"]["total"],
            }
        )
    )
    print(
        f"results in {args.output}/ (deduped/, clusters/, pairs/, rejects/, report.json, "
        "s_curve.png)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
