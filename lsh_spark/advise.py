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
from typing import Any

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from lsh_spark.banding import candidate_probability
from lsh_spark.config import VECTOR_METHODS, DedupConfig
from lsh_spark.io import read_corpus
from lsh_spark.normalize import prepare
from lsh_spark.shingle import add_shingles
from lsh_spark.verify import block_pairs

NUM_PERM_GRID = (32, 64, 128, 256)
# Sample true pairs needed before the measured sample recall may veto a choice.
MIN_TRUE_PAIRS = 100


def collect_sample(spark: SparkSession, input_path: str, cfg: DedupConfig, size: int,
                   seed: int = 7) -> tuple[list, int]:
    """Up to ``size`` accepted items (shingle arrays or vectors) and the corpus size."""
    raw, _ = read_corpus(spark, input_path, cfg)
    if cfg.method in VECTOR_METHODS:
        from lsh_spark.vectors import as_double_array

        v = as_double_array(F.col(cfg.vector_col), raw.schema[cfg.vector_col].dataType)
        items = raw.filter(F.col("reject_reason").isNull()).select(v.alias("x")).filter(
            F.col("x").isNotNull() & (F.size("x") > 0))
    else:
        prepared = prepare(raw, cfg.text_col, cfg.max_text_chars)
        items = add_shingles(prepared.filter(F.col("reason").isNull()).select("norm"),
                             cfg.shingle, cfg.shingle_k, cfg.seed).select(F.col("shingles")
                                                                          .alias("x"))
    items = items.persist()
    try:
        n = items.count()
        fraction = min(1.0, 1.5 * size / max(n, 1))
        rows = items.sample(fraction=fraction, seed=seed).limit(size).collect()
    finally:
        items.unpersist()
    return [r["x"] for r in rows], n


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
        return measures <= cfg.max_distance
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
        "num_perm": cfg.num_perm, "bands": b, "rows": r,
        "candidate_probability_at_threshold": round(float(at_t), 4),
        "predicted_recall": round(float(p[true].mean()), 4) if true.any() else round(at_t, 4),
        "recall_basis": (f"{int(true.sum())} sample pairs at the threshold or closer"
                         if true.any() else "no sample pair at the threshold: P(threshold)"),
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
        a, off = projections(dim, cfg.num_perm, cfg.seed, cfg.method, cfg.width)
        sig = (hyperplane_bits(x, a) if cfg.method == "hyperplane"
               else pstable_hashes(x, a, off, cfg.width))
        n = len(x)
    else:
        from lsh_spark.minhash import minhash_flat, permutation_params

        a, c = permutation_params(cfg.num_perm, cfg.seed)
        values = np.concatenate([np.asarray(s, dtype=np.int64) for s in items]).view(np.uint64)
        offsets = np.concatenate([[0], np.cumsum([len(s) for s in items])])
        sig = minhash_flat(values, offsets, a, c)
    hit = np.zeros(n * (n - 1) // 2, dtype=bool)
    for band in range(b):
        _, keys = np.unique(sig[:, band * r:(band + 1) * r], axis=0, return_inverse=True)
        order = np.argsort(keys, kind="stable")
        bounds = np.flatnonzero(np.diff(keys[order])) + 1
        for group in np.split(order, bounds):
            if len(group) > 1:
                g = np.sort(group)
                i, j = np.triu_indices(len(g), 1)
                gi, gj = g[i], g[j]
                hit[gi * n - gi * (gi + 1) // 2 + (gj - gi - 1)] = True
    true = _is_true(measures, cfg)
    return {"sample_pairs": int(len(measures)), "candidate_pairs": int(hit.sum()),
            "true_pairs": int(true.sum()),
            "recall": round(float(hit[true].mean()), 4) if true.any() else None}


def advise(spark: SparkSession, input_path: str, cfg: DedupConfig, sample: int = 2000,
           grid: tuple[int, ...] = NUM_PERM_GRID) -> dict[str, Any]:
    """The advice (a JSON-able dict); see the module docstring."""
    items, n_docs = collect_sample(spark, input_path, cfg, sample)
    if len(items) < 2:
        raise ValueError(f"--input: {len(items)} usable documents in the sample; the advisor "
                         "needs at least 2")
    measures = pair_measures(items, cfg.method)
    options = []
    for num_perm in grid:
        option = DedupConfig.from_mapping(dict(_base(cfg), num_perm=num_perm))
        options.append(dict(predict(measures, option, n_docs),
                            measured_on_sample=measured_on_sample(items, measures, option)))

    def meets(o: dict[str, Any]) -> bool:
        # The prediction assumes ideal hash functions; where the sample holds
        # enough true pairs, the recall measured by hashing it must agree.
        m = o["measured_on_sample"]
        measured_ok = m["true_pairs"] < MIN_TRUE_PAIRS or m["recall"] >= cfg.target_recall
        return o["predicted_recall"] >= cfg.target_recall and measured_ok

    ok = [o for o in options if meets(o)]
    best = min(ok, key=lambda o: (o["num_perm"], o["predicted_candidates_per_document"])) \
        if ok else max(options, key=lambda o: o["predicted_recall"])
    chosen = DedupConfig.from_mapping(dict(_base(cfg), num_perm=best["num_perm"]))
    advice: dict[str, Any] = {
        "method": cfg.method, "corpus_documents": n_docs, "sample_documents": len(items),
        "threshold": cfg.max_distance if cfg.method == "pstable" else cfg.threshold,
        "target_recall": cfg.target_recall,
        "similarity_histogram": _histogram(measures, cfg),
        "options": options,
        "recommended": dict(best, flags=_flags(chosen), meets_target=bool(ok)),
    }
    if cfg.bands or cfg.rows:  # the user's own (b, r), evaluated the same way
        mine = DedupConfig.from_mapping(dict(_base(cfg), bands=cfg.bands, rows=cfg.rows,
                                             num_perm=cfg.num_perm))
        advice["given"] = dict(predict(measures, mine, n_docs),
                               measured_on_sample=measured_on_sample(items, measures, mine))
    advice["_curve"] = (chosen, measures)
    return advice


def _base(cfg: DedupConfig) -> dict[str, Any]:
    d = {k: getattr(cfg, k) for k in DedupConfig.keys()}
    d["bands"] = d["rows"] = None
    return d


def _flags(cfg: DedupConfig) -> str:
    b, r = cfg.band_params()
    return f"--num-perm {cfg.num_perm} --bands {b} --rows {r}"


def _histogram(measures: np.ndarray, cfg: DedupConfig) -> list[dict[str, Any]]:
    if cfg.method == "pstable":
        top = 3 * float(cfg.max_distance)
        edges = np.linspace(0, top, 21)
        counts, _ = np.histogram(np.minimum(measures, top), bins=edges)
    else:
        edges = np.linspace(-1 if cfg.method == "hyperplane" else 0, 1, 21)
        counts, _ = np.histogram(measures, bins=edges)
    return [{"from": round(float(e), 4), "pairs": int(c)} for e, c in zip(edges, counts)]


def s_curve_png(cfg: DedupConfig, measures: np.ndarray | None = None, title: str = "") -> bytes:
    """PNG of the candidate probability by similarity (or distance) for ``cfg``,
    the threshold marked, and the histogram of ``measures`` on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b, r = cfg.band_params()
    if cfg.method == "pstable":
        xs = np.linspace(1e-6, 3 * float(cfg.max_distance), 300)
        label, t = "Euclidean distance", float(cfg.max_distance)
    else:
        xs = np.linspace(-1 if cfg.method == "hyperplane" else 0, 1, 300)
        label = "cosine similarity" if cfg.method == "hyperplane" else "Jaccard similarity"
        t = cfg.threshold
    ps = [candidate_probability(cfg.row_probability(float(x)) if cfg.method != "minhash"
                                else float(x), b, r) for x in xs]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    if measures is not None and len(measures):
        ax2 = ax.twinx()
        ax2.hist(measures, bins=40, range=(xs[0], xs[-1]), color="#cccccc")
        ax2.set_yscale("log")
        ax2.set_ylabel("sample pairs (log)")
        ax.set_zorder(ax2.get_zorder() + 1)
        ax.patch.set_visible(False)
    ax.plot(xs, ps, color="#1f5fbf", lw=2, label=f"b={b}, r={r} ({cfg.num_perm} hashes)")
    ax.axvline(t, color="#c03030", ls="--", label=f"threshold {t:g}: P = "
               f"{candidate_probability(cfg.row_probability(), b, r):.3f}")
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
