"""Builds data/reference/passages.jsonl, the bundled reference collection of
jobs/decontaminate.py's demo, from the bundled sample corpus:

    python data/reference/build_reference.py

24 passages of 8 to 150 words cut from sample documents (with light edits the
job's normalization undoes: upper case, straight quotes, extra punctuation) and
12 short texts written for this file that occur nowhere in the sample.
"""

from __future__ import annotations

import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "..", "sample", "corpus.jsonl")
LENGTHS = (8, 12, 20, 40, 80, 150)
UNRELATED = [
    "What is the boiling point of water at sea level in degrees Celsius?",
    "Name the largest planet of the solar system and the number of its known moons.",
    "A train leaves the station at nine and travels sixty miles an hour; when does it "
    "arrive at a town one hundred and fifty miles away?",
    "Which element has the chemical symbol Fe, and in which period of the table is it?",
    "Translate the sentence 'the cat sleeps on the warm windowsill' into French.",
    "If a rectangle has a perimeter of thirty metres and one side of six metres, what is its area?",
    "Who wrote the novel in which a whale hunt ends with the loss of the ship and all "
    "but one of its crew?",
    "Explain in one paragraph why the sky appears blue during the day and red at sunset.",
    "List three prime numbers between forty and sixty and give their sum.",
    "Summarize the causes of the seasons on Earth for a ten-year-old reader.",
    "Write a function that returns the second largest value of a list of integers.",
    "What is the capital of the country whose flag shows a red maple leaf?",
]


def light_edits(words: list[str], rng: random.Random) -> str:
    """Edits that normalization (NFKC, casefold, punctuation) undoes."""
    text = " ".join(words)
    text = text.replace("\u2019", "'").replace("\u201c", '"').replace("\u201d", '"')
    if rng.random() < 0.5:
        text = text.upper()
    return f"\u201c{text}\u201d ..." if rng.random() < 0.5 else text


def main() -> None:
    rng = random.Random(45)
    with open(SAMPLE, encoding="utf-8") as fh:
        docs = [json.loads(line) for line in fh]
    docs = [d for d in docs if "~" not in d["id"] and len(d["text"].split()) >= 200]
    rows = []
    for i, doc in enumerate(rng.sample(docs, 24)):
        n = LENGTHS[i % len(LENGTHS)]
        words = doc["text"].split()
        start = rng.randrange(0, len(words) - n)
        rows.append(
            {
                "id": f"cut-{i:02d}",
                "text": light_edits(words[start : start + n], rng),
                "cut_from": doc["id"],
            }
        )
    rows += [{"id": f"other-{i:02d}", "text": t, "cut_from": None} for i, t in enumerate(UNRELATED)]
    with open(os.path.join(HERE, "passages.jsonl"), "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
