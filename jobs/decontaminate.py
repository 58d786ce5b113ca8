"""spark-submit jobs/decontaminate.py --input CORPUS --reference REF [REF ...] --output DIR

Removes from the input what overlaps the reference collections (evaluation sets,
an earlier release): documents that contain a reference item's word n-grams
(containment) or are near-duplicates of a reference document (Jaccard), with the
matching reference item named in matches/.  Writes clean/, removed/, matches/,
rejects/, reference_rejects/ and report.json atomically to --output.  See
docs/decontamination.md.
"""

import json
import sys

from lsh_spark.cli import build_parser, parse, run_job
from lsh_spark.config import DecontamConfig
from lsh_spark.decontam import run_decontaminate

PROG = "decontaminate.py"


def main(argv=None) -> int:
    parser = build_parser(PROG, __doc__.split("\n\n")[1].replace("\n", " "))
    args, cfg = parse(parser, argv)
    dc = DecontamConfig(**{k: getattr(args, k) for k in DecontamConfig.__dataclass_fields__})
    report = run_job(
        PROG,
        lambda spark: run_decontaminate(
            spark, args.input, args.reference, args.output, cfg, dc, overwrite=args.overwrite
        ),
        remote=args.remote,
    )
    print(
        json.dumps(
            {"output": args.output, **report["counts"], "seconds": report["seconds"]["total"]}
        )
    )
    print(f"results in {args.output}/ (clean/, removed/, matches/, rejects/, report.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
