#!/usr/bin/env python3
"""Build the bundled sample corpus for the lsh-spark demo.

Deterministic: inputs are read in sorted order and every random choice comes
from one ``random.Random(SEED)``.  Run from the repository root:

    python data/sample/build_sample.py \
        --pages ../shared/data/readability/pages --out data/sample/corpus.jsonl

Input: ``<pages>/<name>/expected.html`` (Mozilla Readability test fixtures,
Apache-2.0).  HTML is turned into plain text with resiliparse's
``extract_plain_text``.  Output: JSONL rows ``{"id", "source", "text"}``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path

from resiliparse.extract.html2text import extract_plain_text

SEED = 20240607

MIN_ARTICLE_WORDS = 80  # skip articles shorter than this
SPLIT_ABOVE_WORDS = 600  # articles longer than this are chunked
CHUNK_MIN, CHUNK_MAX = 250, 450
UNIT_MAX = 200  # paragraphs longer than this are cut at sentences
MAX_CHUNKS_PER_PAGE = 6  # keeps a few very long pages from dominating
MAX_CJK_SHARE = 0.2  # skip unsegmented-script pages (word counts meaningless)

# Base docs that already resemble a kept one (duplicated fixtures, shared
# boilerplate) are dropped so that the only near-duplicates are planted ones.
DEDUP_JACCARD = 0.2
DEDUP_CONTAINMENT = 0.4

NEAR_FRACTION = 0.20  # share of base docs that get near copies
NEAR_COPIES = (1, 3)  # copies per chosen base doc
EDIT_RATE = (0.01, 0.15)  # share of words touched by edits
EDIT_SPAN = (1, 5)  # each edit touches a run of 1-5 consecutive words
SWAP_PROB = 0.5  # chance a near copy also swaps two adjacent sentences
N_EXACT = 10  # case/whitespace/punctuation-only copies

MAX_BYTES = 1_500_000

SHINGLE = 5
_TOKEN_SPLIT = re.compile(r"[\W_]+")
_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+")
_CJK = re.compile(r"[\u3000-\u30ff\u3400-\u9fff\uac00-\ud7af\uff00-\uffef]")


# --------------------------------------------------------------------------- text


def tokens(text: str) -> list[str]:
    """Normalised tokens: lowercase, split on non-alphanumerics."""
    return [t for t in _TOKEN_SPLIT.split(text.lower()) if t]


def shingles(text: str, k: int = SHINGLE) -> set[tuple[str, ...]]:
    t = tokens(text)
    if len(t) < k:
        return {tuple(t)} if t else set()
    return {tuple(t[i : i + k]) for i in range(len(t) - k + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if (a or b) else 1.0


def page_text(html_path: Path) -> str:
    html = html_path.read_text(encoding="utf-8", errors="replace")
    text = extract_plain_text(html)
    paras = []
    for block in re.split(r"\n\s*\n", text):
        block = " ".join(block.split())
        if block:
            paras.append(block)
    return "\n\n".join(paras)


def nwords(s: str) -> int:
    return len(s.split())


def units_of(paragraph: str) -> list[str]:
    """Cut a paragraph into pieces of at most UNIT_MAX words (sentences first)."""
    if nwords(paragraph) <= UNIT_MAX:
        return [paragraph]
    out, cur = [], []
    for sent in _SENT_SPLIT.split(paragraph):
        words = sent.split()
        while len(words) > UNIT_MAX:  # a run-on "sentence"
            if cur:
                out.append(" ".join(cur))
                cur = []
            out.append(" ".join(words[:UNIT_MAX]))
            words = words[UNIT_MAX:]
        if len(cur) + len(words) > UNIT_MAX and cur:
            out.append(" ".join(cur))
            cur = []
        cur.extend(words)
    if cur:
        out.append(" ".join(cur))
    return out


def chunk(text: str) -> list[str]:
    """Consecutive chunks of CHUNK_MIN..CHUNK_MAX words, cut at paragraph
    boundaries where possible (long paragraphs are cut at sentences)."""
    if nwords(text) <= SPLIT_ABOVE_WORDS:
        return [text]
    # (unit text, starts a new paragraph?)
    units: list[tuple[str, bool]] = []
    for para in text.split("\n\n"):
        for i, u in enumerate(units_of(para)):
            units.append((u, i == 0))
    chunks, cur, cur_n = [], "", 0
    for u, new_para in units:
        n = nwords(u)
        if cur and cur_n + n > CHUNK_MAX and cur_n >= CHUNK_MIN:
            chunks.append(cur)
            cur, cur_n = "", 0
        # units are <= UNIT_MAX words, so cur (< CHUNK_MIN) + u stays <= CHUNK_MAX
        cur = u if not cur else cur + ("\n\n" if new_para else " ") + u
        cur_n += n
    if cur:
        if cur_n >= CHUNK_MIN:
            chunks.append(cur)
        elif chunks and nwords(chunks[-1]) + cur_n <= CHUNK_MAX:
            chunks[-1] += "\n\n" + cur
        # else: a short tail is dropped
    return chunks


# ---------------------------------------------------------------------- mutation


def near_copy(text: str, vocab: list[str], rng: random.Random) -> tuple[str, float]:
    """Word-level edits: substitutions (vocab words), deletions, insertions in
    runs of 1-5 words, plus maybe one swap of two adjacent sentences."""
    rate = rng.uniform(*EDIT_RATE)
    # words kept as [paragraph][sentence][word] so layout survives the edits
    doc = [[s.split() for s in _SENT_SPLIT.split(p)] for p in text.split("\n\n")]
    total = sum(len(s) for p in doc for s in p)
    budget = max(1, round(rate * total))
    touched = 0
    while touched < budget:
        span = min(rng.randint(*EDIT_SPAN), budget - touched)
        sents = [s for p in doc for s in p if s]
        weights = [len(s) for s in sents]
        sent = rng.choices(sents, weights=weights)[0]
        pos = rng.randrange(len(sent))
        op = rng.choices(("sub", "del", "ins"), weights=(0.5, 0.25, 0.25))[0]
        if op == "sub":
            for j in range(pos, min(pos + span, len(sent))):
                sent[j] = rng.choice(vocab)
        elif op == "del" and len(sent) > span:
            del sent[pos : pos + span]
        else:
            sent[pos:pos] = [rng.choice(vocab) for _ in range(span)]
        touched += span
    if rng.random() < SWAP_PROB:
        pairs = [(p, i) for p in doc for i in range(len(p) - 1) if p[i] and p[i + 1]]
        if pairs:
            p, i = rng.choice(pairs)
            p[i], p[i + 1] = p[i + 1], p[i]
    out = "\n\n".join(" ".join(" ".join(s) for s in p if s) for p in doc)
    return out, rate


def _double_spaces(t: str, rng: random.Random) -> str:
    return re.sub(r" ", lambda m: "  " if rng.random() < 0.5 else " ", t)


def _shout(t: str, rng: random.Random) -> str:
    return re.sub(r"([.?])(\s|$)", lambda m: m.group(1) + "!!" + m.group(2), t)


def _strip_punct(t: str, rng: random.Random) -> str:
    # replace punctuation by a space so no two words are glued together
    return re.sub(r"[^\w\s]", " ", t)


def _one_line(t: str, rng: random.Random) -> str:
    return " ".join(t.split())


EXACT_VARIANTS = [
    lambda t, r: t.upper(),
    lambda t, r: t.lower(),
    lambda t, r: _double_spaces(t, r),
    lambda t, r: _shout(t, r),
    lambda t, r: _strip_punct(t, r).lower(),
    lambda t, r: _one_line(_shout(t, r), r).upper(),
    lambda t, r: "  " + _double_spaces(t.replace("\n\n", "\n \n\n"), r) + " \n",
]


def exact_copy(text: str, rng: random.Random) -> str:
    """Same normalised tokens, different case / whitespace / punctuation."""
    want = tokens(text)
    for _ in range(20):
        cand = rng.choice(EXACT_VARIANTS)(text, rng)
        if cand != text and tokens(cand) == want:  # e.g. 'ß'.upper() changes tokens
            return cand
    return _double_spaces(text, rng) + " !!"


# -------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--pages", required=True, type=Path, help="folder of <name>/expected.html fixture pages"
    )
    ap.add_argument("--out", required=True, type=Path, help="output JSONL path")
    args = ap.parse_args(argv)

    rng = random.Random(SEED)
    page_dirs = sorted(p for p in args.pages.iterdir() if (p / "expected.html").is_file())
    if not page_dirs:
        print(f"no <name>/expected.html under {args.pages}", file=sys.stderr)
        return 1

    skipped_short, skipped_cjk, skipped_lorem = [], [], []
    base: list[dict] = []
    for d in page_dirs:
        text = page_text(d / "expected.html")
        nonspace = [c for c in text if not c.isspace()]
        if nonspace and sum(bool(_CJK.match(c)) for c in nonspace) / len(nonspace) > MAX_CJK_SHARE:
            skipped_cjk.append(d.name)
            continue
        if "lorem ipsum" in text.lower():  # placeholder, not real text
            skipped_lorem.append(d.name)
            continue
        if nwords(text) < MIN_ARTICLE_WORDS:
            skipped_short.append(d.name)
            continue
        for i, c in enumerate(chunk(text)[:MAX_CHUNKS_PER_PAGE], start=1):
            base.append({"id": f"{d.name}-{i:02d}", "source": d.name, "text": c})

    # drop base docs resembling an earlier kept one (duplicated fixtures etc.)
    kept, kept_sh, dropped = [], [], []
    for doc in base:
        sh = shingles(doc["text"])
        dup = False
        for other, osh in zip(kept, kept_sh, strict=False):
            inter = len(sh & osh)
            if inter and (
                jaccard(sh, osh) >= DEDUP_JACCARD
                or inter / min(len(sh), len(osh)) >= DEDUP_CONTAINMENT
            ):
                dropped.append((doc["id"], other["id"]))
                dup = True
                break
        if not dup:
            kept.append(doc)
            kept_sh.append(sh)
    base = kept

    # corpus vocabulary with repeats, so replacement words follow corpus frequency
    vocab = [w for doc in base for w in doc["text"].split() if re.fullmatch(r"[^\W\d_]+", w)]

    rows = list(base)
    n_choose = round(NEAR_FRACTION * len(base))
    near_parents = rng.sample(base, n_choose)
    n_near = 0
    for doc in near_parents:
        for n in range(1, rng.randint(*NEAR_COPIES) + 1):
            text, _rate = near_copy(doc["text"], vocab, rng)
            rows.append({"id": f"{doc['id']}~near{n}", "source": doc["source"], "text": text})
            n_near += 1
    for doc in rng.sample(base, N_EXACT):
        rows.append(
            {
                "id": f"{doc['id']}~exact1",
                "source": doc["source"],
                "text": exact_copy(doc["text"], rng),
            }
        )

    rng.shuffle(rows)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "duplicate ids"

    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    data = payload.encode("utf-8")
    args.out.write_bytes(data)

    print(f"pages read:         {len(page_dirs)}")
    print(f"skipped (<{MIN_ARTICLE_WORDS} words): {len(skipped_short)}")
    print(f"skipped (CJK):      {len(skipped_cjk)} {skipped_cjk}")
    print(f"skipped (lorem):    {len(skipped_lorem)}")
    print(f"dropped similar:    {len(dropped)} base docs")
    for a, b in dropped:
        print(f"    {a}  ~  {b}")
    print(f"base docs:          {len(base)} from {len({d['source'] for d in base})} pages")
    print(f"near copies:        {n_near} (of {len(near_parents)} base docs)")
    print(f"exact copies:       {N_EXACT}")
    print(f"total rows:         {len(rows)}")
    print(f"bytes:              {len(data)}")
    if len(data) > MAX_BYTES:
        print(f"WARNING: output exceeds {MAX_BYTES} bytes", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
