"""datatrove's MinHash deduplication with its default settings, as a peer in bench/.

    VENV/bin/python bench/peer_datatrove.py --input SHARDS --out DIR [--workers 2]

Runs under a Python that has ``datatrove`` (0.10.1 measured; with ``spacy`` for its
default English word tokenizer and ``xxhash``), never lsh-spark's: a virtualenv of its
own, made with ``python3 -m venv VENV && VENV/bin/pip install
'datatrove[io,processing]==0.10.1' spacy``, whose Python bench/compare.py and
bench/multilingual.py take as ``--datatrove-python``.  It runs the four stages of
its FineWeb recipe (``MinhashConfig()``: 5-grams, 14 buckets x 8 hashes, 64-bit
xxhash; ``Languages.english``'s tokenizer) with a ``LocalPipelineExecutor`` of
``--workers`` processes.  Stage 1 and 4 run one task per ``*.jsonl`` file of
``--input`` (records ``id``, ``text``), stage 2 one task per bucket, stage 3 one.
Cluster ids are saved and loaded (``save_cluster_id``, ``load_cluster_ids``), which
changes no decision, so that each removed document can be scored against the
document its cluster keeps.

Writes under ``--out``: ``removed/`` and ``kept/`` (JSON Lines with the cluster id
in ``metadata``), ``buckets/*.dups`` (the candidate pairs as datatrove writes them:
file index and document index of each side) and prints one JSON line with
``seconds``, the wall time from this script's start to the end of stage 4.
"""

from __future__ import annotations

import time

START = time.perf_counter()

import argparse  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", required=True, help="folder of *.jsonl shards (id, text)")
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()

    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    shards = sorted(f for f in os.listdir(args.input) if f.endswith(".jsonl"))
    if not shards:
        raise SystemExit(f"--input: no *.jsonl file in {args.input}")
    config = MinhashConfig()
    out = args.out

    def reader():
        return JsonlReader(args.input, glob_pattern="*.jsonl", text_key="text", id_key="id")

    def executor(pipeline, tasks, name):
        return LocalPipelineExecutor(
            pipeline=pipeline,
            tasks=tasks,
            workers=min(args.workers, tasks),
            logging_dir=os.path.join(out, "logs", name),
            skip_completed=False,
        )

    stages = [
        executor(
            [reader(), MinhashDedupSignature(os.path.join(out, "signatures"), config=config)],
            len(shards),
            "signatures",
        ),
        executor(
            [
                MinhashDedupBuckets(
                    os.path.join(out, "signatures"), os.path.join(out, "buckets"), config=config
                )
            ],
            config.num_buckets,
            "buckets",
        ),
        executor(
            [
                MinhashDedupCluster(
                    os.path.join(out, "buckets"),
                    os.path.join(out, "remove"),
                    config=config,
                    save_cluster_id=True,
                )
            ],
            1,
            "cluster",
        ),
        executor(
            [
                reader(),
                MinhashDedupFilter(
                    os.path.join(out, "remove"),
                    exclusion_writer=JsonlWriter(os.path.join(out, "removed"), compression=None),
                    load_cluster_ids=True,
                ),
                JsonlWriter(os.path.join(out, "kept"), compression=None),
            ],
            len(shards),
            "filter",
        ),
    ]
    for stage in stages:
        stage.run()
    seconds = round(time.perf_counter() - START, 1)
    version = importlib.metadata.version("datatrove")
    print(json.dumps({"seconds": seconds, "datatrove": version, "shards": shards}))


if __name__ == "__main__":
    main()
