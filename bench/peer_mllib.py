"""Peer: Spark MLlib MinHashLSH + approxSimilarityJoin on the same word 5-grams.

    spark-submit --master 'local[2]' bench/peer_mllib.py --corpus C.jsonl --out DIR \\
        [--threshold 0.8] [--tables 3] [--id-col id] [--text-col text]

RegexTokenizer (lowercase, split on runs of non-letters/digits) -> NGram(5) ->
HashingTF(2^24, binary) -> MinHashLSH(numHashTables) -> approxSimilarityJoin of the
corpus with itself at Jaccard distance 1 - threshold.  MLlib has no AND-amplification
(one MinHash per table), so a pair of similarity s is a candidate with probability
1 - (1 - s)^tables: 3 tables give 0.992 at s = 0.8 (the fewest reaching 0.99, the
criterion lsh-spark's banding uses), 5 give 0.9997.  Documents with fewer than 5
tokens have no 5-grams and are left out (MLlib refuses empty vectors).
Writes ``pairs/`` (id_a, id_b, jaccard) as Parquet and prints a JSON line.
"""

import argparse
import json
import os
import sys
import time

from pyspark.ml import Pipeline
from pyspark.ml.feature import HashingTF, MinHashLSH, NGram, RegexTokenizer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import corpus_arguments  # noqa: E402


def mllib_pairs(
    spark: SparkSession,
    corpus: str,
    threshold: float = 0.8,
    tables: int = 3,
    id_col: str = "id",
    text_col: str = "text",
) -> DataFrame:
    """The pairs (id_a < id_b, jaccard) MLlib's join finds at ``threshold`` among the
    JSON Lines records of ``corpus`` (ids in ``id_col``, texts in ``text_col``)."""
    docs = (
        spark.read.option("recursiveFileLookup", "true")
        .json(corpus)
        .select(F.col(id_col).alias("id"), F.col(text_col).alias("text"))
        .filter(F.col("id").isNotNull() & F.col("text").isNotNull())
    )
    pipe = Pipeline(
        stages=[
            RegexTokenizer(
                inputCol="text", outputCol="tokens", pattern=r"[^\p{L}\p{N}]+", toLowercase=True
            ),
            NGram(n=5, inputCol="tokens", outputCol="grams"),
            HashingTF(inputCol="grams", outputCol="features", numFeatures=1 << 24, binary=True),
        ]
    )
    feats = pipe.fit(docs).transform(docs)
    feats = feats.filter(F.size("grams") > 0).select("id", "features").cache()
    lsh = MinHashLSH(inputCol="features", outputCol="hashes", numHashTables=tables, seed=1).fit(
        feats
    )
    hashed = lsh.transform(feats).cache()
    joined = lsh.approxSimilarityJoin(hashed, hashed, 1.0 - threshold, distCol="dist")
    return joined.select(
        F.col("datasetA.id").alias("id_a"),
        F.col("datasetB.id").alias("id_b"),
        (1.0 - F.col("dist")).alias("jaccard"),
    ).filter(F.col("id_a") < F.col("id_b"))


def main() -> None:
    p = corpus_arguments(argparse.ArgumentParser())
    p.add_argument("--out", required=True)
    p.add_argument("--tables", type=int, default=3)
    args = p.parse_args()
    spark = SparkSession.builder.appName("peer-mllib").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    start = time.perf_counter()
    pairs = mllib_pairs(spark, args.corpus, args.threshold, args.tables, args.id_col, args.text_col)
    pairs.write.mode("overwrite").parquet(args.out + "/pairs")
    n = spark.read.parquet(args.out + "/pairs").count()
    print(
        json.dumps(
            {
                "system": "mllib",
                "tables": args.tables,
                "verified_pairs": n,
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
