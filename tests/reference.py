"""Pure-Python reference (test oracle) for normalization, shingles and Jaccard.

Written independently of the Spark code with the standard library only, so the
end-to-end tests compare the pipeline against a second implementation.
"""

from __future__ import annotations

import unicodedata


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    # Keep letters, digits and combining marks; everything else separates words.
    kept = "".join(ch if unicodedata.category(ch)[0] in "LNM" else " " for ch in text)
    tokens = [
        tok.lstrip("".join(c for c in tok if unicodedata.category(c)[0] == "M"))
        for tok in kept.split(" ")
    ]
    return " ".join(t for t in tokens if t)


def word_shingles(text: str, k: int = 5) -> set[str]:
    tokens = normalize(text).split(" ")
    if len(tokens) < k:
        return {" ".join(tokens)}
    return {" ".join(tokens[i : i + k]) for i in range(len(tokens) - k + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def reference_components(vertices, edges):
    """``{vertex: (smallest vertex of its component, component size)}`` by union-find."""
    parent = {v: v for v in vertices}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    comp = {}
    for v in vertices:
        comp.setdefault(find(v), []).append(v)
    return {v: (min(m), len(m)) for m in comp.values() for v in m}
