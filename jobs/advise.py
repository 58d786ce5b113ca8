"""Recommend LSH parameters from a sample of the corpus.

Samples the corpus, measures the exact similarity of every pair of the sample,
and recommends num-perm, bands and rows (or the method's equivalents) with the
predicted recall at --threshold and the predicted candidate pairs per document,
then checks the prediction by hashing the sample. Writes advice.json and
s_curve.png (the recommendation's S-curve with the threshold and the sample's
similarity histogram) under --output.

Example:
  spark-submit jobs/advise.py --input corpus.jsonl --threshold 0.8 --target-recall 0.99
"""

import json
import sys

from lsh_spark.cli import build_parser, parse, run_job

PROG = "advise.py"


def write_advice(spark, args, cfg) -> dict:
    """Advise on the sample and write advice.json and the plot under --output."""
    from lsh_spark.advise import advise, s_curve_png, simhash_png
    from lsh_spark.io import StagedOutput

    out = StagedOutput(spark, args.output, overwrite=args.overwrite)
    advice = advise(spark, args.input, cfg, args.sample)
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


def main(argv=None) -> int:
    args, cfg = parse(build_parser(PROG, __doc__.split("\n\n")[1].replace("\n", " ")), argv)
    advice = run_job(PROG, lambda spark: write_advice(spark, args, cfg), remote=args.remote)
    rec = advice["recommended"]
    keys = (
        ("max_hamming", "blocks", "tables", "jaccard_recall")
        if cfg.method == "simhash"
        else ("num_perm", "bands", "rows", "predicted_recall")
    )
    print(json.dumps({k: rec[k] for k in (*keys, "predicted_candidates_per_document", "flags")}))
    print(f"advice in {args.output}/ (advice.json, s_curve.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
