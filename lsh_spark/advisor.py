"""Parameter advisor: measure a sample, predict recall and cost, recommend (num_perm, b, r).

1. Sample up to ``sample`` accepted documents (or vectors) uniformly (seeded).
2. Measure the **exact** similarity of every pair of the sample: Jaccard of the
   shingle sets (BLAS over the sample's 0/1 matrix, as block verification does),
   cosine or Euclidean distance of the vectors.
3. For each candidate ``num_perm`` (and the user's ``bands``/``rows`` if given),
   take the recall-biased ``(b, r)`` and predict from the measured
   distribution:

   * **recall**: the mean candidate probability ``P(s) = 1 - (1 - p(s)^r)^b`` over
     the sample's pairs at or above the threshold (``p`` is the per-hash
     agreement: ``s`` for MinHash, ``1 - arccos(s)/pi`` for hyperplanes, the
     p-stable formula for distances);
   * **candidate pairs per document**: ``(N - 1)`` times the mean ``P`` over all
     sample pairs, for a corpus of ``N`` documents.

4. Check the prediction on the sample itself: hash the sample with the chosen
   parameters and count the pairs that really share a band (measured candidates
   and recall among the sample's pairs).

The recommendation is the smallest ``num_perm`` whose predicted recall reaches
``target_recall`` and, when the sample holds at least ``MIN_TRUE_PAIRS`` true
pairs, whose recall measured on the sample does too (the prediction assumes
ideal hash functions; the measurement uses the real ones).  The S-curve of the recommendation
is plotted (matplotlib, PNG) with the threshold and the sample's similarity
histogram.
"""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
from pyspark import StorageLevel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lsh_spark.block_matrix import block_pairs
from lsh_spark.caching import cached
from lsh_spark.config import VECTOR_METHODS, DedupConfig, candidate_probability
from lsh_spark.normalize import prepare
from lsh_spark.readers import InputError, read_corpus
from lsh_spark.shingle import add_shingles

NUM_PERM_GRID = (32, 64, 128, 256)
# Sample true pairs needed before the measured sample recall may veto a choice.
MIN_TRUE_PAIRS = 100
# The sample fraction draws this many times the rows wanted, so that a
# Bernoulli sample rarely falls short of them (the surplus is cut by a limit).
SAMPLE_OVERDRAW = 1.5


def collect_sample(
    spark: SparkSession, input_path: str, cfg: DedupConfig, size: int, seed: int = 7
) -> tuple[list, int]:
    """Up to ``size`` accepted items (shingle arrays or vectors) and the corpus size."""
    raw, _ = read_corpus(spark, input_path, cfg)
    if cfg.method in VECTOR_METHODS:
        from lsh_spark.vectors import as_double_array

        v = as_double_array(
            F.col(cfg.vectors.vector_col), raw.schema[cfg.vectors.vector_col].dataType
        )
        items = (
            raw.filter(F.col("reject_reason").isNull())
            .select(v.alias("x"))
            .filter(F.col("x").isNotNull() & (F.size("x") > 0))
        )
    else:
        prepared = prepare(raw, cfg.text_col, cfg.max_text_chars, cfg.token_mode)
        tf = cfg.method == "simhash" and cfg.simhash.simhash_weight == "tf"
        feats = add_shingles(
            prepared.filter(F.col("reason").isNull()).select("norm"),
            cfg.shingle,
            cfg.shingle_k,
            cfg.seed,
            all_out="all" if tf else None,
        )
        items = feats.select(
            F.struct(
                F.col("shingles").alias("distinct"),
                F.col("all" if tf else "shingles").alias("weighted"),
            ).alias("x")
        )
    with cached(items, StorageLevel.MEMORY_AND_DISK_DESER) as items:
        n = items.count()
        fraction = min(1.0, SAMPLE_OVERDRAW * size / max(n, 1))
        rows = items.sample(fraction=fraction, seed=seed).limit(size).collect()
    if cfg.method in VECTOR_METHODS:
        return [r["x"] for r in rows], n
    if cfg.method == "simhash":
        return [(r["x"]["distinct"], r["x"]["weighted"]) for r in rows], n
    return [r["x"]["distinct"] for r in rows], n


def pair_measures(items: list, method: str) -> np.ndarray:
    """The exact measure of every pair ``i < j`` of the sample (row-major order)."""
    n = len(items)
    if method in VECTOR_METHODS:
        dims = {len(x) for x in items}
        dim = max(dims, key=lambda d: sum(len(x) == d for x in items))
        x = np.array([v for v in items if len(v) == dim], dtype=np.float64)
        iu = np.triu_indices(len(x), 1)
        if method == "hyperplane":
            norms = np.linalg.norm(x, axis=1)
            x = x[norms > 0] / norms[norms > 0, None]
            iu = np.triu_indices(len(x), 1)
            return (x @ x.T)[iu]
        sq = (x * x).sum(axis=1)
        d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * x @ x.T, 0.0)
        return np.sqrt(d2[iu])
    values = np.concatenate([np.asarray(s, dtype=np.int64) for s in items])
    lengths = np.array([len(s) for s in items], dtype=np.int64)
    i, j, s = block_pairs(values, lengths, threshold=0.0)
    out = np.zeros(n * (n - 1) // 2)
    out[i * n - i * (i + 1) // 2 + (j - i - 1)] = s
    return out


def _is_true(measures: np.ndarray, cfg: DedupConfig) -> np.ndarray:
    if cfg.method == "pstable":
        return measures <= cfg.vectors.max_distance
    return measures >= cfg.threshold


def _row_p(measures: np.ndarray, cfg: DedupConfig) -> np.ndarray:
    if cfg.method == "minhash":
        return measures
    return np.array([cfg.row_probability(float(m)) for m in measures])


def predict(measures: np.ndarray, cfg: DedupConfig, n_docs: int) -> dict[str, Any]:
    """Predicted recall and candidate pairs per document for ``cfg``'s (b, r)."""
    b, r = cfg.band_params()
    p = candidate_probability(_row_p(measures, cfg), b, r)
    true = _is_true(measures, cfg)
    at_t = candidate_probability(cfg.row_probability(), b, r)
    return {
        "num_perm": cfg.num_perm,
        "bands": b,
        "rows": r,
        "candidate_probability_at_threshold": round(float(at_t), 4),
        "predicted_recall": round(float(p[true].mean()), 4) if true.any() else round(at_t, 4),
        "recall_basis": (
            f"{int(true.sum())} sample pairs at the threshold or closer"
            if true.any()
            else "no sample pair at the threshold: P(threshold)"
        ),
        "predicted_candidates_per_document": round(float(p.mean()) * (n_docs - 1), 3),
    }


def measured_on_sample(items: list, measures: np.ndarray, cfg: DedupConfig) -> dict[str, Any]:
    """Hash the sample with ``cfg`` and count the pairs that really share a band."""
    n = len(items)
    b, r = cfg.band_params()
    if cfg.method in VECTOR_METHODS:
        from lsh_spark.vectors import hyperplane_bits, projections, pstable_hashes

        dim = max({len(x) for x in items}, key=lambda d: sum(len(x) == d for x in items))
        x = np.array([v for v in items if len(v) == dim], dtype=np.float64)
        if cfg.method == "hyperplane":
            x = x[np.linalg.norm(x, axis=1) > 0]
        a, off = projections(dim, cfg.num_perm, cfg.seed, cfg.method, cfg.vectors.width)
        sig = (
            hyperplane_bits(x, a)
            if cfg.method == "hyperplane"
            else pstable_hashes(x, a, off, cfg.vectors.width)
        )
        n = len(x)
    else:
        from lsh_spark.signature import minhash_flat, permutation_params

        a, c = permutation_params(cfg.num_perm, cfg.seed)
        values = np.concatenate([np.asarray(s, dtype=np.int64) for s in items]).view(np.uint64)
        offsets = np.concatenate([[0], np.cumsum([len(s) for s in items])])
        sig = minhash_flat(values, offsets, a, c)
    hit = np.zeros(n * (n - 1) // 2, dtype=bool)
    for band in range(b):
        _, keys = np.unique(sig[:, band * r : (band + 1) * r], axis=0, return_inverse=True)
        order = np.argsort(keys, kind="stable")
        bounds = np.flatnonzero(np.diff(keys[order])) + 1
        for group in np.split(order, bounds):
            if len(group) > 1:
                g = np.sort(group)
                i, j = np.triu_indices(len(g), 1)
                gi, gj = g[i], g[j]
                hit[gi * n - gi * (gi + 1) // 2 + (gj - gi - 1)] = True
    true = _is_true(measures, cfg)
    return {
        "sample_pairs": int(len(measures)),
        "candidate_pairs": int(hit.sum()),
        "true_pairs": int(true.sum()),
        "recall": round(float(hit[true].mean()), 4) if true.any() else None,
        "candidate_similarity_histogram": [h for h in _histogram(measures[hit], cfg) if h["pairs"]],
    }


def _popcount(x: np.ndarray) -> np.ndarray:
    return np.unpackbits(x.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1)


def _hamming_by_k(ham: np.ndarray, true: np.ndarray) -> list[dict[str, Any]]:
    """For each k in 0..16: the share of true pairs (Jaccard >= threshold) within k
    bits (recall), and the share of pairs within k bits that are true."""
    by_k = []
    for k in range(0, 17):
        within = ham <= k
        recall = float(within[true].mean()) if true.any() else None
        precision = float(true[within].mean()) if within.any() else None
        by_k.append(
            {
                "max_hamming": k,
                "jaccard_recall": None if recall is None else round(recall, 4),
                "share_within_k_at_jaccard_threshold": None
                if precision is None
                else round(precision, 4),
            }
        )
    return by_k


def _simhash_blocks(xor: np.ndarray, k: int, n_docs: int) -> list[dict[str, Any]]:
    """For B = k+1 .. k+7 blocks: the C(B, k) tables and the candidates per document
    they would give, predicted from the sample pairs' XORs."""
    from lsh_spark.simhash import table_masks

    blocks = []
    for b in range(k + 1, min(64, k + 7) + 1):
        hit = np.zeros(len(xor), dtype=bool)
        for m in table_masks(k, b):
            hit |= (xor & np.uint64(m & ((1 << 64) - 1))) == 0
        per_doc = float(hit.mean()) * (n_docs - 1)
        tables = math.comb(b, k)
        blocks.append(
            {
                "blocks": b,
                "tables": tables,
                "predicted_candidates_per_document": round(per_doc, 3),
                "rows_plus_candidates_per_document": round(tables + per_doc, 3),
            }
        )
    return blocks


def advise_simhash(items: list, cfg: DedupConfig, n_docs: int) -> dict[str, Any]:
    """SimHash has no recall to trade inside ``--max-hamming`` (the block tables
    find every pair within it); what the data decides is ``--max-hamming``
    itself (how many of the sample's pairs at Jaccard >= threshold lie within k
    bits, and how many pairs within k bits are below it) and the blocks B (C(B, k)
    tables against the candidates per document, both measured on the sample)."""
    from lsh_spark.simhash import simhash_flat

    jac = pair_measures([d for d, _ in items], "minhash")
    weighted = [np.asarray(w, dtype=np.int64) for _, w in items]
    fps = simhash_flat(
        np.concatenate(weighted).view(np.uint64),
        np.concatenate([[0], np.cumsum([len(w) for w in weighted])]),
    ).view(np.uint64)
    iu = np.triu_indices(len(fps), 1)
    xor = fps[iu[0]] ^ fps[iu[1]]
    ham = _popcount(xor)
    by_k = _hamming_by_k(ham, jac >= cfg.threshold)
    reach = [
        o
        for o in by_k
        if o["jaccard_recall"] is not None and o["jaccard_recall"] >= cfg.target_recall
    ]
    k = reach[0]["max_hamming"] if reach else cfg.simhash.max_hamming
    blocks = _simhash_blocks(xor, k, n_docs)
    best = min(blocks, key=lambda o: o["rows_plus_candidates_per_document"])
    return {
        "method": "simhash",
        "corpus_documents": n_docs,
        "sample_documents": len(items),
        "threshold": cfg.threshold,
        "target_recall": cfg.target_recall,
        "hamming_histogram": [
            {"from": int(d), "pairs": int(c)}
            for d, c in zip(*np.unique(np.minimum(ham, 33), return_counts=True), strict=False)
        ],
        "by_max_hamming": by_k,
        "blocks_for_recommended_k": blocks,
        "recommended": {
            "max_hamming": k,
            "blocks": best["blocks"],
            "tables": best["tables"],
            "predicted_candidates_per_document": best["predicted_candidates_per_document"],
            "jaccard_recall": by_k[k]["jaccard_recall"],
            "meets_target": bool(reach),
            "flags": f"--method simhash --max-hamming {k} --simhash-blocks {best['blocks']}",
        },
        "_curve": None,
        "_by_k": by_k,
    }


def simhash_png(advice: dict[str, Any]) -> bytes:
    """PNG: share of the sample's Jaccard >= threshold pairs within k bits, by k."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [o for o in advice["_by_k"] if o["jaccard_recall"] is not None]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.plot(
        [o["max_hamming"] for o in rows],
        [o["jaccard_recall"] for o in rows],
        "o-",
        color="#1f5fbf",
        label=f"pairs at Jaccard >= {advice['threshold']:g} within k bits",
    )
    ax.plot(
        [o["max_hamming"] for o in rows],
        [o["share_within_k_at_jaccard_threshold"] or 0 for o in rows],
        "s--",
        color="#808080",
        label="pairs within k bits at that Jaccard",
    )
    ax.axhline(advice["target_recall"], color="#c03030", ls=":", label="target recall")
    ax.axvline(
        advice["recommended"]["max_hamming"],
        color="#c03030",
        ls="--",
        label=f"recommended k = {advice['recommended']['max_hamming']}",
    )
    ax.set_xlabel("--max-hamming k")
    ax.set_ylabel("share of sample pairs")
    ax.set_ylim(0, 1.02)
    ax.set_title("lsh-spark SimHash advice")
    ax.legend(loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def advise(
    spark: SparkSession,
    input_path: str,
    cfg: DedupConfig,
    sample: int = 2000,
    grid: tuple[int, ...] = NUM_PERM_GRID,
) -> dict[str, Any]:
    """The advice (a JSON-able dict); see the module docstring."""
    items, n_docs = collect_sample(spark, input_path, cfg, sample)
    if len(items) < 2:
        raise InputError(
            f"--input: {len(items)} usable documents in the sample; the advisor needs at least 2"
        )
    if cfg.method == "simhash":
        return advise_simhash(items, cfg, n_docs)
    measures = pair_measures(items, cfg.method)
    options = []
    for num_perm in grid:
        option = DedupConfig.from_mapping(dict(_base(cfg), num_perm=num_perm))
        options.append(
            dict(
                predict(measures, option, n_docs),
                measured_on_sample=measured_on_sample(items, measures, option),
            )
        )

    def meets(o: dict[str, Any]) -> bool:
        # The prediction assumes ideal hash functions; where the sample holds
        # enough true pairs, the recall measured by hashing it must agree.
        m = o["measured_on_sample"]
        measured_ok = m["true_pairs"] < MIN_TRUE_PAIRS or m["recall"] >= cfg.target_recall
        return o["predicted_recall"] >= cfg.target_recall and measured_ok

    ok = [o for o in options if meets(o)]
    best = (
        min(ok, key=lambda o: (o["num_perm"], o["predicted_candidates_per_document"]))
        if ok
        else max(options, key=lambda o: o["predicted_recall"])
    )
    chosen = DedupConfig.from_mapping(dict(_base(cfg), num_perm=best["num_perm"]))
    advice: dict[str, Any] = {
        "method": cfg.method,
        "corpus_documents": n_docs,
        "sample_documents": len(items),
        "threshold": cfg.vectors.max_distance if cfg.method == "pstable" else cfg.threshold,
        "target_recall": cfg.target_recall,
        "similarity_histogram": _histogram(measures, cfg),
        "options": options,
        "recommended": dict(best, flags=_flags(chosen), meets_target=bool(ok)),
    }
    if cfg.bands or cfg.rows:  # the user's own (b, r), evaluated the same way
        mine = DedupConfig.from_mapping(
            dict(_base(cfg), bands=cfg.bands, rows=cfg.rows, num_perm=cfg.num_perm)
        )
        advice["given"] = dict(
            predict(measures, mine, n_docs),
            measured_on_sample=measured_on_sample(items, measures, mine),
        )
    advice["_curve"] = (chosen, measures)
    return advice


def _base(cfg: DedupConfig) -> dict[str, Any]:
    d = cfg.flat()
    d["bands"] = d["rows"] = None
    return d


def _flags(cfg: DedupConfig) -> str:
    b, r = cfg.band_params()
    return f"--num-perm {cfg.num_perm} --bands {b} --rows {r}"


def _histogram(measures: np.ndarray, cfg: DedupConfig) -> list[dict[str, Any]]:
    if cfg.method == "pstable":
        top = 3 * float(cfg.vectors.max_distance)
        edges = np.linspace(0, top, 21)
        counts, _ = np.histogram(np.minimum(measures, top), bins=edges)
    else:
        edges = np.linspace(-1 if cfg.method == "hyperplane" else 0, 1, 21)
        counts, _ = np.histogram(measures, bins=edges)
    pairs = zip(edges, counts, strict=False)  # one edge more than counts
    return [{"from": round(float(e), 4), "pairs": int(c)} for e, c in pairs]


def s_curve_png(cfg: DedupConfig, measures: np.ndarray | None = None, title: str = "") -> bytes:
    """PNG of the candidate probability by similarity (or distance) for ``cfg``,
    the threshold marked, and the histogram of ``measures`` on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b, r = cfg.band_params()
    if cfg.method == "pstable":
        xs = np.linspace(1e-6, 3 * float(cfg.vectors.max_distance), 300)
        label, t = "Euclidean distance", float(cfg.vectors.max_distance)
    else:
        xs = np.linspace(-1 if cfg.method == "hyperplane" else 0, 1, 300)
        label = "cosine similarity" if cfg.method == "hyperplane" else "Jaccard similarity"
        t = cfg.threshold
    ps = [
        candidate_probability(
            cfg.row_probability(float(x)) if cfg.method != "minhash" else float(x), b, r
        )
        for x in xs
    ]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    if measures is not None and len(measures):
        ax2 = ax.twinx()
        ax2.hist(measures, bins=40, range=(xs[0], xs[-1]), color="#cccccc")
        ax2.set_yscale("log")
        ax2.set_ylabel("sample pairs (log)")
        ax.set_zorder(ax2.get_zorder() + 1)
        ax.patch.set_visible(False)
    ax.plot(xs, ps, color="#1f5fbf", lw=2, label=f"b={b}, r={r} ({cfg.num_perm} hashes)")
    ax.axvline(
        t,
        color="#c03030",
        ls="--",
        label=f"threshold {t:g}: P = {candidate_probability(cfg.row_probability(), b, r):.3f}",
    )
    ax.set_xlabel(label)
    ax.set_ylabel("probability of becoming a candidate")
    ax.set_ylim(0, 1.02)
    ax.set_title(title or f"lsh-spark S-curve ({cfg.method})")
    ax.legend(loc="center left" if cfg.method != "pstable" else "center right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
