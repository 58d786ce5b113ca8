"""Pure-Python reference (test oracle) for normalization, shingles and Jaccard.

Written independently of the Spark code with the standard library only, so the
end-to-end tests compare the pipeline against a second implementation.
"""

from __future__ import annotations

import bisect
import unicodedata

# Code points of the scripts written without spaces between words, from Unicode's
# Scripts.txt (Unicode 15): Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar,
# Tibetan.  Written out here, not taken from the regex engine the code uses.
_SPLIT_RANGES = sorted(
    [
        # Han
        (0x2E80, 0x2E99), (0x2E9B, 0x2EF3), (0x2F00, 0x2FD5), (0x3005, 0x3005),
        (0x3007, 0x3007), (0x3021, 0x3029), (0x3038, 0x303B), (0x3400, 0x4DBF),
        (0x4E00, 0x9FFF), (0xF900, 0xFA6D), (0xFA70, 0xFAD9), (0x16FE2, 0x16FE3),
        (0x16FF0, 0x16FF1), (0x20000, 0x2A6DF), (0x2A700, 0x2B739), (0x2B740, 0x2B81D),
        (0x2B820, 0x2CEA1), (0x2CEB0, 0x2EBE0), (0x2F800, 0x2FA1D), (0x30000, 0x3134A),
        (0x31350, 0x323AF),
        # Hiragana
        (0x3041, 0x3096), (0x309D, 0x309F), (0x1B001, 0x1B11F), (0x1B132, 0x1B132),
        (0x1B150, 0x1B152), (0x1F200, 0x1F200),
        # Katakana
        (0x30A1, 0x30FA), (0x30FD, 0x30FF), (0x31F0, 0x31FF), (0x32D0, 0x32FE),
        (0x3300, 0x3357), (0xFF66, 0xFF6F), (0xFF71, 0xFF9D), (0x1AFF0, 0x1AFFE),
        (0x1B000, 0x1B000), (0x1B120, 0x1B122), (0x1B155, 0x1B155), (0x1B164, 0x1B167),
        # Thai
        (0x0E01, 0x0E3A), (0x0E40, 0x0E5B),
        # Lao
        (0x0E81, 0x0EDF),
        # Tibetan
        (0x0F00, 0x0FD4), (0x0FD9, 0x0FDA),
        # Myanmar
        (0x1000, 0x109F), (0xA9E0, 0xA9FE), (0xAA60, 0xAA7F),
        # Khmer
        (0x1780, 0x17DD), (0x17E0, 0x17E9), (0x17F0, 0x17F9), (0x19E0, 0x19FF),
    ]
)  # fmt: skip
_SPLIT_STARTS = [lo for lo, _ in _SPLIT_RANGES]


def splits(ch: str) -> bool:
    """Whether ``ch`` belongs to a script written without spaces."""
    cp = ord(ch)
    i = bisect.bisect_right(_SPLIT_STARTS, cp) - 1
    return i >= 0 and cp <= _SPLIT_RANGES[i][1]


def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "M"


def tokens(text: str, split_scripts: bool = True) -> list[str]:
    """The word tokens of ``text``: the words of :func:`normalize`, each character
    of a script without spaces (with the marks after it) a token of its own when
    ``split_scripts`` (lsh-spark's ``--tokens script``; False is ``space``)."""
    words = normalize(text).split(" ") if text else []
    if not split_scripts:
        return [w for w in words if w]
    out: list[str] = []
    for word in words:
        current, in_split = "", False
        for ch in word:
            if splits(ch) and not (in_split and _is_mark(ch)):
                out.append(current)
                current, in_split = ch, True
            elif _is_mark(ch):
                current += ch
            elif in_split:
                out.append(current)
                current, in_split = ch, False
            else:
                current += ch
        out.append(current)
    # A token that starts with a mark (one of these scripts after another letter)
    # loses it, as every token of normalize does.
    stripped = ("".join(_drop_leading_marks(t)) for t in out)
    return [t for t in stripped if t]


def _drop_leading_marks(token: str) -> str:
    i = 0
    while i < len(token) and _is_mark(token[i]):
        i += 1
    return token[i:]


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    # Keep letters, digits and combining marks; everything else separates words.
    kept = "".join(ch if unicodedata.category(ch)[0] in "LNM" else " " for ch in text)
    tokens = [
        tok.lstrip("".join(c for c in tok if unicodedata.category(c)[0] == "M"))
        for tok in kept.split(" ")
    ]
    return " ".join(t for t in tokens if t)


def word_shingles(text: str, k: int = 5, split_scripts: bool = True) -> set[str]:
    words = tokens(text, split_scripts)
    if len(words) < k:
        return {" ".join(words)}
    return {" ".join(words[i : i + k]) for i in range(len(words) - k + 1)}


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
