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

import sys

from lsh_spark.commands import advise as main

if __name__ == "__main__":
    sys.exit(main())
