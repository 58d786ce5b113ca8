"""Planted near-duplicates: mutated copies of real text, for tests and benchmarks.

The edits are word-level (substitution, deletion, insertion) in short runs, so
a copy's word-shingle Jaccard with its original falls as the edit rate grows;
``mutate`` is deterministic for a given ``random.Random``.

Example
-------
>>> import random
>>> mutate("a b c d e f g h i j", 0.1, random.Random(0), vocab=["x"])
'a b c d e f x x i j'
"""

from __future__ import annotations

import random
from collections.abc import Sequence


def mutate(
    text: str, rate: float, rng: random.Random, vocab: Sequence[str], max_run: int = 3
) -> str:
    """Edit about ``rate`` of the words of ``text`` in runs of 1..``max_run`` words."""
    words = text.split()
    if not words:
        return text
    n_edits = max(1, round(rate * len(words) / ((1 + max_run) / 2)))
    for _ in range(n_edits):
        if not words:
            break
        pos = rng.randrange(len(words))
        run = rng.randint(1, max_run)
        op = rng.random()
        if op < 0.5:
            for j in range(pos, min(pos + run, len(words))):
                words[j] = rng.choice(vocab)
        elif op < 0.75 and len(words) > run + 1:
            del words[pos : pos + run]
        else:
            words[pos:pos] = [rng.choice(vocab) for _ in range(run)]
    return " ".join(words)
