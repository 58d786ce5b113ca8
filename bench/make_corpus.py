"""Build a benchmark corpus with planted near-duplicate families from real text.

    python bench/make_corpus.py --source ../shared/data/pan13 --n 40000 --out bench/out/c40k

Any folder of UTF-8 text files works as ``--source`` (searched recursively for
``*.txt``).  The texts are cut into base documents of 50-200 words at
paragraph boundaries; then

* ``--family-share`` of the output are mutated copies of base documents
  (families of 2-``--max-family`` members, word-level edits at rates drawn so
  the copies' Jaccard spreads over 0.5-1.0),
* ``--exact-share`` are exact copies up to case, white space and punctuation,
* ``--template-share`` are one skewed family: a shared boilerplate template of
  ~400 words with a short unique insert, the way a site template repeats,
* ``--big-families`` large families of near-identical copies (word edit rates
  of 0-3%, sizes drawn from ``--big-family-size``), the shape of mirrored or
  syndicated pages in a crawl.

``--words LO,HI`` sets the length of base documents (default 50-200 words).

``--shape web`` builds the shape of a crawl instead: ``--copy-share`` of the
documents are copies, in groups whose numbers of copies follow a power law
(density ~ k^-``--exponent``, largest group ``--largest`` copies, which is always
drawn once); half of the copies are exact up to case, white space and
punctuation, half are near copies (word edit rates of 0.5-2%).  ``--shape flat``
plants the same number of copies of the same two kinds, one copy per original.
Both fill the rest with singletons; ids are ``w<group>-<member>`` and ``s<n>``,
so a document's group is its id before the dash.  The original takes a member
number chosen by a hash of its group (not always 0, so it is not always its
group's smallest id) and carries ``"original": true``.

When the source's own chunks run out (PAN13's 1,949 sources give about 28,000),
further base documents are *mosaics*: 50-200 words made of random 8-25-word
spans of the source text, still real sentences, each combination new, so 100k
and 1M-document corpora come from the same source.  ``meta.json`` says how many
base documents are mosaics.

Writes ``corpus.jsonl`` (``id``, ``text``, ``family``) and ``meta.json``.  The
``family`` column is ground truth for where to look; true pairs are measured by
``bench/quality.py`` with exact Jaccard, never assumed.

Memory grows with ``--n`` by 12 bytes a document, not by the documents: each record
goes to disk as it is made, into ``.corpus.jsonl.unshuffled`` in ``--out`` (deleted at
the end), and ``corpus.jsonl`` is that file's lines in the order of a shuffled array of
line numbers, read back one line at a time.  The random stream is the one an in-memory
build would use (the shuffle comes after every record is made), so a corpus is the same
bytes as before for the same options and ``--seed``.  Disk: the corpus twice while it is
written.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import subprocess
import sys
import zlib
from array import array

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from lsh_spark.synth import mutate  # noqa: E402


def read_texts(source: str) -> list[str]:
    paths = []
    for root, _, files in os.walk(source):
        paths += [os.path.join(root, f) for f in files if f.endswith(".txt")]
    texts = []
    for p in sorted(paths):
        with open(p, encoding="utf-8", errors="replace") as fh:
            texts.append(fh.read())
    if not texts:
        raise SystemExit(f"no .txt files under {source}")
    return texts


def chunks(text: str, lo: int, hi: int) -> list[str]:
    paras = [p.split() for p in re.split(r"\n\s*\n", text) if p.strip()]
    out, cur = [], []
    for words in paras:
        cur += words
        while len(cur) >= hi:
            out.append(" ".join(cur[:hi]))
            cur = cur[hi:]
        if len(cur) >= lo:
            out.append(" ".join(cur))
            cur = []
    return out


class BasePool:
    """Real chunks first, then mosaics of random source spans, never repeated."""

    def __init__(self, chunks: list[str], rng: random.Random, lo: int, hi: int) -> None:
        self.chunks = chunks
        self.lo, self.hi = lo, hi
        self.rng = rng
        self.words = " ".join(chunks).split()
        self.mosaics = 0

    def __len__(self) -> int:
        return len(self.chunks)

    def pop(self) -> str:
        if self.chunks:
            return self.chunks.pop()
        self.mosaics += 1
        target = self.rng.randint(self.lo, self.hi)
        out: list[str] = []
        while len(out) < target:
            start = self.rng.randrange(len(self.words) - 25)
            out += self.words[start : start + self.rng.randint(8, 25)]
        return " ".join(out[:target])

    def sample(self) -> str:
        return self.rng.choice(self.chunks) if self.chunks else self.pop()


def perturb_surface(text: str, rng: random.Random) -> str:
    """Same normalized text: change case, spacing and punctuation only."""
    choice = rng.randrange(3)
    if choice == 0:
        return text.upper()
    if choice == 1:
        return "  ".join(text.split(" ")) + " !!"
    return text.replace(". ", " ... ")


class Spool:
    """The corpus's records in the order they are made, on disk: the file's lines and
    where each ends, 8 bytes a record in memory instead of the record."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fh = open(path, "wb", buffering=1 << 20)  # noqa: SIM115 (closed by write)
        self.ends = array("q")
        self.size = 0

    def __len__(self) -> int:
        return len(self.ends)

    def add(self, doc: dict) -> None:
        line = (json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8")
        self.fh.write(line)
        self.size += len(line)
        self.ends.append(self.size)

    def discard(self) -> None:
        self.fh.close()
        if os.path.exists(self.path):
            os.remove(self.path)


def copy_group_sizes(n_copies: int, exponent: float, largest: int, rng: random.Random):
    """Numbers of copies per group adding up to ``n_copies``: the largest group first,
    then draws from a discrete power law P(k) ~ k^-exponent, k >= 1, cut at ``largest``."""
    sizes = [min(largest, n_copies)]
    total = sizes[0]
    while total < n_copies:
        k = int((1.0 - rng.random()) ** (-1.0 / (exponent - 1.0)))
        k = min(k, largest, n_copies - total)
        sizes.append(k)
        total += k
    return sizes


def copy_docs(
    args: argparse.Namespace, base: BasePool, rng: random.Random, vocab, docs: Spool
) -> None:
    """The web or flat shape: groups of copies of one original each, then singletons."""
    n_copies = int(args.n * args.copy_share)
    if args.shape == "web":
        sizes = copy_group_sizes(n_copies, args.exponent, args.largest, rng)
    else:
        sizes = itertools.repeat(1, n_copies)
    for g, size in enumerate(sizes):
        orig = base.pop()
        family = f"w{g:07d}"
        # The original takes any member number, marked by "original": a crawl's ids
        # (URLs, record ids, content hashes) say nothing of which copy came first,
        # and an original that always had its family's smallest id would favour
        # every smallest-id rule (a bounded bucket's star centre, a representative).
        first = zlib.crc32(family.encode()) % (size + 1)
        numbers = [first] + [m for m in range(size + 1) if m != first]
        docs.add({"id": f"{family}-{first}", "text": orig, "family": family, "original": True})
        for m in numbers[1:]:
            if rng.random() < 0.5:
                text = perturb_surface(orig, rng)
            else:
                text = mutate(orig, rng.choice([0.005, 0.01, 0.02]), rng, vocab)
            docs.add({"id": f"{family}-{m}", "text": text, "family": family})
    s = 0
    while len(docs) < args.n:
        docs.add({"id": f"s{s:07d}", "text": base.pop(), "family": f"s{s:07d}"})
        s += 1


def build(args: argparse.Namespace) -> dict:
    os.makedirs(args.out, exist_ok=True)
    docs = Spool(os.path.join(args.out, ".corpus.jsonl.unshuffled"))
    try:
        return make(args, docs)
    finally:
        docs.discard()


def make(args: argparse.Namespace, docs: Spool) -> dict:
    rng = random.Random(args.seed)
    lo, hi = args.words
    base = []
    for t in read_texts(args.source):
        base += chunks(t, lo, hi)
    # Drop chunks repeated in the source (PAN reuses passages) so that the
    # planted families are the near-duplicates we know about.
    seen, unique = set(), []
    for c in base:
        key = c[:200]
        if key not in seen:
            seen.add(key)
            unique.append(c)
    rng.shuffle(unique)
    vocab = sorted({w for c in unique[:2000] for w in c.split()})
    base = BasePool(unique, rng, lo, hi)
    if args.shape != "planted":
        copy_docs(args, base, rng, vocab, docs)
        return write(args, docs, base, {"shape": args.shape})

    n = args.n
    n_template = int(n * args.template_share)
    n_exact = int(n * args.exact_share)
    n_family = int(n * args.family_share)
    # Large families of near-identical copies.
    for b in range(args.big_families):
        orig = base.pop()
        size = rng.randint(*args.big_family_size)
        for m in range(size):
            rate = rng.choice([0.0, 0.005, 0.01, 0.02, 0.03]) if m else 0.0
            docs.add(
                {
                    "id": f"b{b:03d}-{m:05d}",
                    "text": mutate(orig, rate, rng, vocab),
                    "family": f"b{b:03d}",
                }
            )
    # Families: originals plus copies.
    fam = 0
    n_family += len(docs)
    while len(docs) < n_family:
        orig = base.pop()
        size = rng.randint(2, args.max_family)
        docs.add({"id": f"f{fam:06d}-0", "text": orig, "family": f"f{fam:06d}"})
        for m in range(1, size):
            rate = rng.choice([0.0, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12])
            docs.add(
                {
                    "id": f"f{fam:06d}-{m}",
                    "text": mutate(orig, rate, rng, vocab),
                    "family": f"f{fam:06d}",
                }
            )
        fam += 1
    # Exact copies of existing family originals or singletons.
    for e in range(n_exact):
        orig = base.pop()
        docs.add({"id": f"e{e:06d}-0", "text": orig, "family": f"e{e:06d}"})
        docs.add({"id": f"e{e:06d}-1", "text": perturb_surface(orig, rng), "family": f"e{e:06d}"})
    # The skewed template family.
    template = " ".join(base.pop().split()[:200] + base.pop().split()[:200])
    for t in range(n_template):
        words = template.split()
        insert = base.sample().split()[: rng.randint(5, 25)]
        pos = rng.randrange(len(words))
        words[pos:pos] = insert
        docs.add({"id": f"t{t:06d}", "text": " ".join(words), "family": "template"})
    # Singletons fill the rest.
    s = 0
    while len(docs) < n:
        docs.add({"id": f"s{s:07d}", "text": base.pop(), "family": f"s{s:07d}"})
        s += 1
    meta = {
        "families": fam,
        "big_families": args.big_families,
        "exact_pairs": n_exact,
        "template_documents": n_template,
    }
    return write(args, docs, base, meta)


def write(args: argparse.Namespace, docs: Spool, base: BasePool, meta: dict) -> dict:
    """``corpus.jsonl``: the spooled records shuffled.  The order is that of shuffling a
    list of the records with ``base.rng`` (``shuffle`` draws the same numbers for any
    sequence of that length), one line read at a time."""
    docs.fh.close()
    order = array("I" if len(docs) < 2**32 else "q", range(len(docs)))
    base.rng.shuffle(order)
    ends = docs.ends
    fd = os.open(docs.path, os.O_RDONLY)
    try:
        with open(os.path.join(args.out, "corpus.jsonl"), "wb", buffering=1 << 20) as fh:
            for i in order:
                start = ends[i - 1] if i else 0
                fh.write(os.pread(fd, ends[i] - start, start))
    finally:
        os.close(fd)
    meta = {
        "documents": len(docs),
        **meta,
        "mosaic_base_documents": base.mosaics,
        "seed": args.seed,
        "bytes": os.path.getsize(os.path.join(args.out, "corpus.jsonl")),
    }
    with open(os.path.join(args.out, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=2)
    return meta


def build_once(folder: str, *options: str) -> str:
    """``corpus.jsonl`` in ``folder``, built by this script with ``options`` unless a
    finished build (its ``meta.json``) is there already."""
    if not os.path.exists(os.path.join(folder, "meta.json")):
        here = os.path.abspath(__file__)
        subprocess.run([sys.executable, here, "--out", folder, *options], check=True)
    return os.path.join(folder, "corpus.jsonl")


def _range(text: str) -> tuple[int, int]:
    try:
        lo, hi = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO,HI (two integers), got {text!r}") from None
    if not 1 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"expected 1 <= LO <= HI, got {text!r}")
    return lo, hi


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    p.add_argument("--source", required=True, help="folder of .txt files (e.g. pan13)")
    p.add_argument("--n", type=int, default=10000, help="documents to generate")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--family-share", type=float, default=0.3)
    p.add_argument("--max-family", type=int, default=6)
    p.add_argument("--exact-share", type=float, default=0.02)
    p.add_argument("--template-share", type=float, default=0.05)
    p.add_argument(
        "--big-families",
        type=int,
        default=0,
        help="large families of near-identical copies (default none)",
    )
    p.add_argument("--big-family-size", type=_range, default=(500, 2000), metavar="LO,HI")
    p.add_argument(
        "--words", type=_range, default=(50, 200), metavar="LO,HI", help="words per base document"
    )
    p.add_argument(
        "--shape",
        choices=("planted", "web", "flat"),
        default="planted",
        help="planted families (default), power-law copy groups (web) or one copy each (flat)",
    )
    p.add_argument("--copy-share", type=float, default=0.3, help="web/flat: share of copies")
    p.add_argument("--exponent", type=float, default=1.8, help="web: power-law exponent")
    p.add_argument("--largest", type=int, default=50000, help="web: copies in the largest group")
    p.add_argument("--seed", type=int, default=1)
    print(json.dumps(build(p.parse_args())))


if __name__ == "__main__":
    main()
