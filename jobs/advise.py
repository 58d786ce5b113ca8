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

from lsh_spark.cli import build_parser, fail, parse
from lsh_spark.config import ConfigError
from lsh_spark.io import InputError, StagedOutput
from lsh_spark.session import build_session, stop_session


def main(argv=None) -> int:
    parser = build_parser("advise.py", __doc__.split("\n\n")[1].replace("\n", " "),
                          output_default="advice")
    parser.add_argument("--sample", type=int, default=2000,
                        help="documents sampled (all pairs are measured exactly; default 2000)")
    parser.add_argument("--overwrite", action="store_true", help="replace --output")
    args, cfg = parse(parser, argv)
    if not 2 <= args.sample <= 20000:
        parser.exit(2, f"advise.py: error: --sample: got {args.sample}; allowed: 2..20000\n")
    from lsh_spark.advise import advise, s_curve_png, simhash_png

    spark = build_session("lsh-spark advise")
    try:
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
    except (ConfigError, InputError, ValueError) as exc:
        fail("advise.py", exc)
    finally:
        stop_session(spark)
    rec = advice["recommended"]
    keys = ("max_hamming", "blocks", "tables", "jaccard_recall") if cfg.method == "simhash" \
        else ("num_perm", "bands", "rows", "predicted_recall")
    print(json.dumps({k: rec[k] for k in (*keys, "predicted_candidates_per_document",
                                          "flags")}))
    print(f"advice in {args.output}/ (advice.json, s_curve.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
