"""Scoring a run against the copies planted by ``bench/make_corpus.py --shape
web|flat``: which copies must be removed, and whether every edge and removal
is right.  Used by bench/web_shape.py and bench/compare.py (which also scores a
peer's output rewritten as ``clusters/`` and ``pairs/``), and, for its shingles,
by bench/multilingual.py.
"""

from __future__ import annotations

import json
import os
import sys
import zlib

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from reference import word_shingles  # noqa: E402 (tests/ is put on sys.path above)


def sampled(key: str, share: float) -> bool:
    """Whether ``key`` (a group or an edge's first id) is in a sample of ``share``
    of all keys, the same on every run (CRC-32 of the key)."""
    return share >= 1.0 or zlib.crc32(key.encode()) < share * (1 << 32)


def read_texts(
    path: str, share: float = 1.0, also: set[str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """Each document's text by id, and each group's original (its id) by group.

    ``share`` below 1: only the documents of a sample of ``share`` of the groups
    (:func:`sampled`) and those in ``also``, so that a 10M corpus's scoring holds a
    few hundred MB of text, not 9 GB."""
    texts, originals = {}, {}
    also = also or set()
    with open(path, encoding="utf-8") as fh:
        for d in map(json.loads, fh):
            if share < 1.0 and not sampled(group(d["id"]), share) and d["id"] not in also:
                continue
            texts[d["id"]] = d["text"]
            if d.get("original"):
                originals[group(d["id"])] = d["id"]
    if not originals:
        raise SystemExit(
            f'{path}: no document is marked "original"; it was built by an earlier '
            "bench/make_corpus.py: delete its folder to build it again"
        )
    return texts, originals


def group(doc_id: str) -> str:
    return doc_id.partition("-")[0]


class Shingles:
    """Each document's word 5-shingles (tests/reference.py), computed once, kept as a
    sorted array of their hashes: about 1 KB a document instead of a set of strings."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts
        self.sets: dict[str, np.ndarray] = {}

    def __getitem__(self, doc_id: str) -> np.ndarray:
        got = self.sets.get(doc_id)
        if got is None:
            hashes = [hash(s) for s in word_shingles(self.texts[doc_id])]
            got = self.sets[doc_id] = np.unique(np.array(hashes, dtype=np.int64))
        return got

    def jaccard(self, a: str, b: str) -> float:
        x, y = self[a], self[b]
        inter = len(np.intersect1d(x, y, assume_unique=True))
        return inter / (len(x) + len(y) - inter)


def planted_copies(
    shingles: Shingles, originals: dict[str, str], threshold: float, share: float = 1.0
) -> set[str]:
    """Ids of the copies whose exact Jaccard with their group's original is >= threshold
    (of the sampled groups, with ``share`` below 1)."""
    return {
        i
        for i in shingles.texts
        if group(i) in originals
        and sampled(group(i), share)
        and i != originals[group(i)]
        and shingles.jaccard(i, originals[group(i)]) >= threshold
    }


def sampled_edges(run: str, share: float) -> list[tuple[str, str]]:
    """The rows of ``pairs/`` whose first id is in a sample of ``share`` (all at 1)."""
    pairs = ds.dataset(os.path.join(run, "pairs"), format="parquet").to_table(
        columns=["id_a", "id_b"]
    )
    edges = zip(pairs.column("id_a").to_pylist(), pairs.column("id_b").to_pylist(), strict=True)
    return [(a, b) for a, b in edges if sampled(a, share)]


def quality(
    run: str,
    texts: dict[str, str],
    originals: dict[str, str],
    threshold: float,
    share: float = 1.0,
    edges: list[tuple[str, str]] | None = None,
) -> dict:
    """Recall of the planted copies (the share in one cluster with their original),
    and the checks that make every removal right.

    ``share`` below 1: recall over the copies of the sampled groups and false
    edges among ``edges`` (:func:`sampled_edges`), whose texts ``texts`` must
    hold (:func:`read_texts` with ``also``); removals across groups are then not
    counted (None).

    The source texts repeat passages (PAN13 is a text-reuse corpus), so documents of
    different groups can be true near-duplicates: a removal across groups is counted,
    not assumed wrong.  What would make a removal wrong is an edge of ``pairs/`` whose
    exact Jaccard (reference shingling) is below the threshold: ``false_edges``.
    """
    shingles = Shingles(texts)
    planted = planted_copies(shingles, originals, threshold, share)
    clusters = ds.dataset(os.path.join(run, "clusters"), format="parquet").to_table(
        columns=["id", "cluster_id", "keep"]
    )
    ids, cluster_ids, keeps = (clusters.column(n).to_pylist() for n in clusters.column_names)
    kept = {c: i for i, c, k in zip(ids, cluster_ids, keeps, strict=True) if k}
    # A planted copy is found when it shares a cluster with its original: one of the
    # two is then removed (whichever --keep keeps).
    cluster_of = dict(zip(ids, cluster_ids, strict=True))
    found = sum(cluster_of[i] == cluster_of[originals[group(i)]] for i in planted)
    removed = clusters.filter(~pc.field("keep"))
    removed_ids = removed.column("id").to_pylist()
    across = sum(
        group(i) != group(kept[c])
        for i, c in zip(removed_ids, removed.column("cluster_id").to_pylist(), strict=True)
    )
    if edges is None:
        edges = sampled_edges(run, share)
    false_edges = sum(shingles.jaccard(a, b) < threshold - 1e-9 for a, b in edges)
    row = {
        "planted_copies": len(planted),
        "removed": len(removed_ids),
        "recall": round(found / max(1, len(planted)), 4),
        "removals_across_groups": across if share >= 1.0 else None,
        "false_edges": false_edges,
    }
    if share < 1.0:
        row.update(quality_share=share, edges_checked=len(edges))
    return row
