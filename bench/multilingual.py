"""Near copies in many languages and scripts: recall, wrong links and cost by language.

    python bench/multilingual.py [--work bench/out/multilingual] \\
        [--english-source ../shared/data/pan13] [--datatrove-python DT_VENV/bin/python]

Run it in the project's environment (``source scripts/setup-env.sh``) with the
``bench`` extra's ``psutil`` importable (bench/compare.py measures the runs).  The
text comes from Debian packages (about 125 MiB installed):

    apt-get install -y manpages manpages-dev manpages-de manpages-de-dev \\
        manpages-fr manpages-fr-dev manpages-es manpages-es-dev manpages-it \\
        manpages-it-dev manpages-pl manpages-pl-dev manpages-ru manpages-ru-dev \\
        manpages-uk manpages-uk-dev manpages-ja manpages-ja-dev manpages-zh \\
        debconf-i18n libgtk-3-common evolution-data-server-common \\
        gnome-control-center-data gnome-desktop3-data tasksel-data libgweather-4-common

and datatrove, when wanted, from a virtualenv of its own:
``python3 -m venv DT_VENV && DT_VENV/bin/pip install
'datatrove[io,processing]==0.10.1' spacy``.

The corpus is real text nobody on the project wrote, read from Debian packages
installed on this machine (the script installs nothing; it names the ``apt-get
install`` line when a source is missing):

* translated manual pages (``manpages``, ``manpages-dev`` for English,
  ``manpages-LANG`` and ``manpages-LANG-dev`` for the others, ``manpages-zh`` for
  simplified and traditional Chinese; the Korean pages of whichever packages ship
  one), one document per page, rendered by ``man -l`` at 80 columns as plain text;
  ``.so`` stubs and symbolic links are left out, and so is a page troff does not
  finish in 30 s (it loops on four pages of manpages-zh);
* translation catalogs (``.mo`` under ``--locale-root``) for the languages the
  manual pages lack, scripts without spaces among them (Thai, Khmer, Lao, Myanmar,
  Dzongkha in Tibetan script) and Korean: the translated strings of each catalog,
  cut at message boundaries into documents of about ``--catalog-chars`` characters.

Texts repeated word for word are kept once.  In every language ``--copy-share`` of
the documents get one near copy, made by token edits (a token is one character of
a script written without spaces, a word elsewhere; each edit replaces, deletes or
inserts one token) at the rates of ``--rates``, deterministic with ``--seed``.
Every document's id is a hash, so an original is not its copy's smaller id more
often than by chance.  The reference word-5-gram Jaccard of each copy with its
original comes from tests/reference.py (the project's independent oracle), never
from lsh-spark's code.  The corpus is built once under ``--work`` (``corpus/``,
with ``meta.json`` naming each language's packages and licences) and reused.

Then, in one run: lsh-spark (``spark-submit jobs/dedup.py`` as the README runs it,
``--master local[2]``) on the whole corpus with the default options, with
``--tokens space`` (the tokenization of 0.2.0) and with ``--shingle char``; the
same three on each language of ``--per-language-runs`` alone, for its seconds; an
English corpus of about the same size made by bench/make_corpus.py, with the
default options, for the cost per input byte; datatrove with its defaults when
``--datatrove-python`` is given; and normalization alone
(``lsh_spark.normalize.normalize_array``) on each language's texts, on one core.

Scores, per language and in total:

* recall: the share of planted copies with reference J >= 0.85 that share a
  cluster with their original (datatrove: whose copy or original it removed);
* links below 0.5: edges of ``pairs/`` whose two documents have reference
  J < 0.5 (datatrove: its candidate pairs); and removed documents whose reference
  J with the kept document of their cluster is below 0.5;
* seconds (wall, including Spark's start) and MB/s per core (input bytes of
  corpus.jsonl / seconds / cores of the master).

Prints the tables and writes ``results.json`` under ``--work``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import gzip
import hashlib
import inspect
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import unicodedata
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import reference  # noqa: E402
from compare import cores, datatrove_outcome  # noqa: E402
from planted import Shingles  # noqa: E402 (reference word 5-shingles, kept as hashes)

# -- sources ---------------------------------------------------------------

# Manual pages: language -> (folder under --man-root, packages).  None: every
# package that installs pages there.
MAN_SOURCES: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "en": ("", ("manpages", "manpages-dev")),
    "de": ("de", ("manpages-de", "manpages-de-dev")),
    "fr": ("fr", ("manpages-fr", "manpages-fr-dev")),
    "es": ("es", ("manpages-es", "manpages-es-dev")),
    "it": ("it", ("manpages-it", "manpages-it-dev")),
    "pl": ("pl", ("manpages-pl", "manpages-pl-dev")),
    "ru": ("ru", ("manpages-ru", "manpages-ru-dev")),
    "uk": ("uk", ("manpages-uk", "manpages-uk-dev")),
    "ja": ("ja", ("manpages-ja", "manpages-ja-dev")),
    "zh_CN": ("zh_CN", ("manpages-zh",)),
    "zh_TW": ("zh_TW", ("manpages-zh",)),
    "ko": ("ko", None),
}
# Translation catalogs: the languages whose manual pages Debian lacks.
CATALOG_LANGUAGES = ("ko", "th", "km", "lo", "my", "dz")
# Packages that add catalogs in those languages (beyond the base system's).
CATALOG_PACKAGES = (
    "debconf-i18n",
    "libgtk-3-common",
    "evolution-data-server-common",
    "gnome-control-center-data",
    "gnome-desktop3-data",
    "tasksel-data",
    "libgweather-4-common",
)
SCRIPTS = {
    "en": "Latin",
    "de": "Latin",
    "fr": "Latin",
    "es": "Latin",
    "it": "Latin",
    "pl": "Latin",
    "ru": "Cyrillic",
    "uk": "Cyrillic",
    "ja": "Han + kana",
    "zh_CN": "Han (simplified)",
    "zh_TW": "Han (traditional)",
    "ko": "Hangul",
    "th": "Thai",
    "km": "Khmer",
    "lo": "Lao",
    "my": "Myanmar",
    "dz": "Tibetan",
}


def unspaced(ch: str) -> bool:
    """Whether ``ch`` belongs to a script written without spaces (the oracle's
    ranges, tests/reference.py)."""
    return reference.splits(ch)


def apt_line(packages) -> str:
    return "apt-get install -y " + " ".join(sorted(packages))


def dpkg_owners(info_dir: str = "/var/lib/dpkg/info") -> dict[str, str]:
    """``{installed file: package}`` from dpkg's file lists (no dpkg call)."""
    owners = {}
    for name in sorted(os.listdir(info_dir)):
        if name.endswith(".list"):
            pkg = name[: -len(".list")].split(":")[0]
            with open(os.path.join(info_dir, name), encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    owners.setdefault(line.rstrip("\n"), pkg)
    return owners


def licences(package: str, doc_root: str = "/usr/share/doc") -> list[str]:
    """The ``License:`` names of a package's machine-readable copyright file, most
    frequent first; ``["see <file>"]`` when it has none."""
    path = os.path.join(doc_root, package, "copyright")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return ["(no copyright file)"]
    names = Counter(m.strip() for m in re.findall(r"^License:[ \t]*(\S[^\n]*)$", text, re.M))
    return [n for n, _ in names.most_common()] or [f"see {path}"]


# -- manual pages ----------------------------------------------------------


def man_pages(man_root: str, owners: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    """``{language: [(path, package)]}`` of the installed pages of :data:`MAN_SOURCES`,
    without symbolic links and ``.so`` stubs (each repeats another page)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for lang, (sub, packages) in MAN_SOURCES.items():
        base = os.path.join(man_root, sub)
        pages = []
        for path, pkg in owners.items():
            if not path.startswith(base.rstrip("/") + "/"):
                continue
            rel = path[len(base.rstrip("/")) + 1 :]
            if not re.fullmatch(r"man[1-9][^/]*/[^/]+", rel):
                continue
            if packages is not None and pkg not in packages:
                continue
            if os.path.islink(path) or not os.path.isfile(path) or so_stub(path):
                continue
            pages.append((path, pkg))
        out[lang] = sorted(pages)
    return out


def so_stub(path: str) -> bool:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as fh:
        head = fh.read(512)
    return head.lstrip().startswith(b".so ") and head.count(b"\n") <= 2


# Seconds and bytes of output after which a page is given up: troff loops forever
# on a few pages (manpages-zh's zh_CN df.1 and smb.conf.5 in Debian 12).
RENDER_SECONDS = 30
RENDER_BYTES = 2 << 20


def render_page(path: str) -> str | None:
    """A page as ``man -l`` shows it at 80 columns, without bold or underline; None
    when it takes more than :data:`RENDER_SECONDS` or prints more than
    :data:`RENDER_BYTES` (the whole pipeline of man is then killed)."""
    env = {**os.environ, "MANWIDTH": "80", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    env.pop("MAN_KEEP_FORMATTING", None)
    proc = subprocess.Popen(
        ["man", "-l", "-E", "UTF-8", path],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # its own process group: troff and grotty die with it
    )
    timer = threading.Timer(RENDER_SECONDS, os.killpg, (proc.pid, signal.SIGKILL))
    timer.start()
    try:
        raw = proc.stdout.read(RENDER_BYTES + 1)
    finally:
        timer.cancel()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.stdout.close()
        proc.wait()
    if len(raw) > RENDER_BYTES or proc.returncode != 0:
        return None
    out = raw.decode("utf-8", "replace")
    # col -b's work, in case man-db left any overstrike in place.
    out = re.sub(r".\x08", "", out)
    return "\n".join(line.rstrip() for line in out.splitlines()).strip()


# -- translation catalogs --------------------------------------------------


def mo_messages(data: bytes) -> list[str]:
    """The translated strings of a GNU ``.mo`` catalog (plural forms apart), in the
    catalog's order, without the header entry (empty msgid)."""
    if len(data) < 20:
        return []
    for end in "<>":
        magic, _rev, n, orig, trans = struct.unpack(end + "5I", data[:20])
        if magic == 0x950412DE:
            break
    else:
        raise ValueError("not a GNU .mo catalog")
    out = []
    for i in range(n):
        olen, ooff = struct.unpack(end + "2I", data[orig + 8 * i : orig + 8 * i + 8])
        tlen, toff = struct.unpack(end + "2I", data[trans + 8 * i : trans + 8 * i + 8])
        if olen == 0:
            continue  # the header
        for s in data[toff : toff + tlen].split(b"\0"):
            text = s.decode("utf-8", "replace").strip()
            if text:
                out.append(text)
    return out


def catalog_parts(messages: list[str], chars: int) -> list[str]:
    """``messages`` joined by newlines into parts of at most about ``chars``
    characters, cut between messages (all in one part when ``chars`` is 0)."""
    parts, cur, size = [], [], 0
    for m in messages:
        if cur and chars and size + len(m) > chars:
            parts.append("\n".join(cur))
            cur, size = [], 0
        cur.append(m)
        size += len(m) + 1
    if cur:
        parts.append("\n".join(cur))
    return parts


def catalogs(locale_root: str, owners: dict[str, str]) -> dict[str, list[tuple[str, str]]]:
    """``{language: [(path, package)]}`` of the ``.mo`` catalogs of
    :data:`CATALOG_LANGUAGES`, symbolic links left out."""
    out = {}
    for lang in CATALOG_LANGUAGES:
        folder = os.path.join(locale_root, lang, "LC_MESSAGES")
        found = []
        if os.path.isdir(folder):
            for name in sorted(os.listdir(folder)):
                path = os.path.join(folder, name)
                if name.endswith(".mo") and not os.path.islink(path):
                    found.append((path, owners.get(path, "?")))
        out[lang] = found
    return out


# Copyright files that are not machine-readable, in their own words.
LICENCE_NOTES = {
    "manpages-ja": "each page under the licence of its English original (DFSG-free; "
    "/usr/share/doc/manpages-ja/copyright)",
}


# -- planting near copies --------------------------------------------------


def _text_char(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LNM"


def token_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every token of a raw text: one character (with the
    combining marks after it) of a script written without spaces, or a run of
    letters, digits and marks of other scripts."""
    spans, i, n = [], 0, len(text)
    while i < n:
        if not _text_char(text[i]):
            i += 1
            continue
        j = i + 1
        if unspaced(text[i]):
            while j < n and unicodedata.category(text[j])[0] == "M":
                j += 1
        else:
            while j < n and _text_char(text[j]) and not unspaced(text[j]):
                j += 1
        spans.append((i, j))
        i = j
    return spans


EDITS = ("replace", "delete", "insert")


def plant(text: str, rate: float, rng: random.Random) -> tuple[str, int]:
    """A near copy of ``text`` with ``max(1, round(rate * tokens))`` token edits at
    distinct tokens, each a replacement, deletion or insertion of one token (a token
    of the same kind drawn from the text itself), and the number of edits."""
    spans = token_spans(text)
    if not spans:
        return text + " x", 1
    kinds = [_kind(text[s]) for s, _ in spans]
    pool = {
        kind: [text[s:e] for (s, e), k in zip(spans, kinds, strict=True) if k == kind]
        for kind in set(kinds)
    }
    n = min(len(spans), max(1, round(rate * len(spans))))
    at = sorted(rng.sample(range(len(spans)), n), reverse=True)
    out = text
    for i in at:  # from the end, so the earlier offsets stay valid
        (s, e), kind = spans[i], kinds[i]
        op = rng.choice(EDITS)
        if op == "delete":
            out = out[:s] + out[e:]
            continue
        new = rng.choice(pool[kind])
        if op == "replace":
            out = out[:s] + new + out[e:]
        else:
            out = out[:s] + new + ("" if kind else " ") + out[s:]
    return out, n


def _kind(ch: str) -> str:
    """What may stand in for a token starting with ``ch``: a word (``""``) or a
    character of the same script (``THAI``, ``HIRAGANA``, ``CJK``, ...)."""
    if not unspaced(ch):
        return ""
    return unicodedata.name(ch, "UNSPACED").split()[0]


def doc_id(lang: str, key: str, seed: int) -> str:
    """An id that says the language and nothing of which document is the original."""
    return f"{lang}-{hashlib.sha1(f'{seed}|{key}'.encode()).hexdigest()[:12]}"


# -- reference Jaccard (tests/reference.py, never lsh-spark's code) ---------


def reference_shingles(text: str, k: int = 5) -> set[str]:
    """Word k-shingles of the oracle, every character of a script written without
    spaces a token (lsh-spark's default, ``--tokens script``)."""
    return reference.word_shingles(text, k, split_scripts=True)


def space_shingles(text: str, k: int = 5) -> set[str]:
    """Word k-shingles of the oracle with 0.2.0's tokens (``--tokens space``)."""
    return reference.word_shingles(text, k, split_scripts=False)


def jaccard(a: set, b: set) -> float:
    return reference.jaccard(a, b)


# -- building the corpus ---------------------------------------------------


def installed(package: str, info_dir: str = "/var/lib/dpkg/info") -> bool:
    return any(
        os.path.exists(os.path.join(info_dir, f"{package}{arch}.list"))
        for arch in ("", ":amd64", ":arm64", ":all")
    )


def missing_packages() -> list[str]:
    wanted = {p for _, pkgs in MAN_SOURCES.values() for p in pkgs or ()}
    return sorted(p for p in wanted | set(CATALOG_PACKAGES) if not installed(p))


def read_sources(args: argparse.Namespace) -> list[dict]:
    """Every source document (``lang``, ``package``, ``name``, ``text``): the rendered
    manual pages (rendered once, kept in ``--work``/pages.jsonl.gz) and the catalogs."""
    missing = missing_packages()
    if missing:
        print(
            f"note: not installed, their languages are smaller or absent: {', '.join(missing)}"
            f"\n  to add them: {apt_line(missing)}",
            file=sys.stderr,
        )
    owners = dpkg_owners()
    docs = rendered_pages(args, owners) + catalog_documents(args, owners)
    if len({d["lang"] for d in docs if d["text"]}) < 6:
        raise SystemExit(
            "fewer than six languages installed; run\n  "
            + apt_line({p for _, pkgs in MAN_SOURCES.values() for p in pkgs or ()})
        )
    return docs


def rendered_pages(args: argparse.Namespace, owners: dict[str, str]) -> list[dict]:
    """The manual pages of :func:`man_pages` as plain text, rendered once."""
    cache = os.path.join(args.work, "pages.jsonl.gz")
    if os.path.exists(cache):
        with gzip.open(cache, "rt", encoding="utf-8") as fh:
            return [json.loads(line) for line in fh]
    todo = [
        (lang, page, pkg)
        for lang, found in man_pages(args.man_root, owners).items()
        for page, pkg in found
    ]
    print(f"rendering {len(todo)} manual pages with man -l ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    docs, failed = [], []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        texts = pool.map(render_page, [page for _, page, _ in todo])
        for (lang, page, pkg), text in zip(todo, texts, strict=True):
            name = os.path.relpath(page, args.man_root)
            if text is None:
                failed.append(name)
            else:
                docs.append({"lang": lang, "package": pkg, "name": name, "text": text})
    print(
        f"  {time.perf_counter() - start:.0f} s; given up (troff loops or fails): "
        f"{', '.join(failed) or 'none'}",
        file=sys.stderr,
    )
    os.makedirs(args.work, exist_ok=True)
    with gzip.open(cache + ".tmp", "wt", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps(d, ensure_ascii=False) + "\n")
    os.replace(cache + ".tmp", cache)
    return docs


def catalog_documents(args: argparse.Namespace, owners: dict[str, str]) -> list[dict]:
    """The catalogs of :func:`catalogs`, each cut by :func:`catalog_parts`; a file
    that is not a GNU .mo catalog is named and left out."""
    docs = []
    for lang, found in catalogs(args.locale_root, owners).items():
        for catalog, pkg in found:
            with open(catalog, "rb") as fh:
                try:
                    messages = mo_messages(fh.read())
                except ValueError:
                    print(f"note: {catalog} is not a .mo catalog, left out", file=sys.stderr)
                    continue
            name = os.path.relpath(catalog, args.locale_root)
            for i, text in enumerate(catalog_parts(messages, args.catalog_chars)):
                docs.append({"lang": lang, "package": pkg, "name": f"{name}#{i}", "text": text})
    return docs


def unique_sources(docs: list[dict], min_tokens: int) -> list[dict]:
    """``docs`` without empty or short texts (fewer than ``min_tokens`` tokens) and
    without texts that repeat an earlier one up to white space (the same page
    installed twice, a catalog shipped by two packages), in a stable order."""
    seen, out = set(), []
    for d in sorted(docs, key=lambda d: (d["lang"], d["name"])):
        key = hashlib.sha1(" ".join(d["text"].split()).encode()).digest()
        if key in seen or len(token_spans(d["text"])) < min_tokens:
            continue
        seen.add(key)
        out.append(d)
    return out


def plant_copies(
    sources: list[dict], copy_share: float, rates: list[float], seed: int
) -> list[dict]:
    """The corpus: every source document, and for ``copy_share`` of each language's
    documents (drawn with ``seed``) one near copy at a rate of ``rates`` (in turn),
    marked with its original's id, the rate and the number of edits."""
    by_lang = defaultdict(list)
    for d in sources:
        by_lang[d["lang"]].append(d)
    out = []
    for lang, docs in sorted(by_lang.items()):
        rng = random.Random(f"{seed}|{lang}")
        for d in docs:
            d["id"] = doc_id(lang, d["name"], seed)
            out.append({"id": d["id"], "text": d["text"], "lang": lang, "name": d["name"]})
        chosen = sorted(rng.sample(range(len(docs)), round(copy_share * len(docs))))
        for n, i in enumerate(chosen):
            rate = rates[n % len(rates)]
            text, edits = plant(docs[i]["text"], rate, rng)
            out.append(
                {
                    "id": doc_id(lang, docs[i]["name"] + "|copy", seed),
                    "text": text,
                    "lang": lang,
                    "name": docs[i]["name"],
                    "original": docs[i]["id"],
                    "rate": rate,
                    "edits": edits,
                }
            )
    random.Random(seed).shuffle(out)
    return out


def corpus_key(args: argparse.Namespace) -> str:
    return json.dumps(
        [args.copy_share, args.rates, args.seed, args.catalog_chars, args.min_tokens, args.shards]
    )


def build_corpus(args: argparse.Namespace) -> str:
    """``--work``/corpus: corpus.jsonl, one file per language under langs/, truth.jsonl
    (each copy's reference Jaccard with its original) and meta.json; built once
    for the same options."""
    folder = os.path.join(args.work, "corpus")
    meta_path = os.path.join(folder, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as fh:
            if json.load(fh).get("key") == corpus_key(args):
                return folder
    shutil.rmtree(folder, ignore_errors=True)
    sources = unique_sources(read_sources(args), args.min_tokens)
    docs = plant_copies(sources, args.copy_share, args.rates, args.seed)
    os.makedirs(os.path.join(folder, "langs"))
    by_lang = defaultdict(list)
    for d in docs:
        by_lang[d["lang"]].append(d)
    # The systems read ids and texts only; what the scores need is in docs.jsonl.
    write_jsonl(os.path.join(folder, "corpus.jsonl"), [id_text(d) for d in docs])
    for lang, ds in by_lang.items():
        write_jsonl(os.path.join(folder, "langs", f"{lang}.jsonl"), [id_text(d) for d in ds])
    write_jsonl(
        os.path.join(folder, "docs.jsonl"),
        [{k: v for k, v in d.items() if k != "text"} for d in docs],
    )
    # datatrove reads one shard per task of its first and last stage.
    os.makedirs(os.path.join(folder, "shards"))
    for i in range(args.shards):
        write_jsonl(
            os.path.join(folder, "shards", f"part-{i:05d}.jsonl"),
            [id_text(d) for d in docs[i :: args.shards]],
        )
    print("computing the reference Jaccard of every copy ...", file=sys.stderr, flush=True)
    texts = {d["id"]: d["text"] for d in docs}
    truth = [
        {
            "copy": d["id"],
            "original": d["original"],
            "lang": d["lang"],
            "rate": d["rate"],
            "j": round(
                jaccard(reference_shingles(d["text"]), reference_shingles(texts[d["original"]])), 6
            ),
            "j_space": round(
                jaccard(space_shingles(d["text"]), space_shingles(texts[d["original"]])), 6
            ),
        }
        for d in docs
        if d.get("original")
    ]
    write_jsonl(os.path.join(folder, "truth.jsonl"), truth)
    meta = {
        "key": corpus_key(args),
        "documents": len(docs),
        "bytes": os.path.getsize(os.path.join(folder, "corpus.jsonl")),
        "languages": describe_languages(docs, sources),
    }
    with open(meta_path, "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=2, ensure_ascii=False)
    return folder


def describe_languages(docs: list[dict], sources: list[dict]) -> dict:
    """Per language: documents, copies, bytes of the JSON lines, and the packages
    the texts came from with their licences."""
    out = {}
    pkgs = defaultdict(Counter)
    for s in sources:
        pkgs[s["lang"]][s["package"]] += 1
    for lang in sorted({d["lang"] for d in docs}):
        mine = [d for d in docs if d["lang"] == lang]
        out[lang] = {
            "script": SCRIPTS.get(lang, "?"),
            "documents": len(mine),
            "copies": sum(1 for d in mine if d.get("original")),
            "bytes": sum(
                len(json.dumps(id_text(d), ensure_ascii=False).encode()) + 1 for d in mine
            ),
            "packages": {
                p: {
                    "documents": n,
                    "licences": [LICENCE_NOTES[p]] if p in LICENCE_NOTES else licences(p)[:6],
                }
                for p, n in pkgs[lang].most_common()
            },
        }
    return out


def id_text(d: dict) -> dict:
    return {"id": d["id"], "text": d["text"]}


def write_jsonl(path: str, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")


# -- scoring ---------------------------------------------------------------

RECALL_J = 0.85
LOW_J = 0.5
TOTAL = "total"


def score(
    truth: list[dict],
    lang_of: dict[str, str],
    found: set[str],
    links: list[tuple[str, str]],
    removals: list[tuple[str, str]],
    jac,
) -> dict[str, dict]:
    """Per language and in total (:data:`TOTAL`): planted copies with reference
    J >= :data:`RECALL_J`, how many of them are in ``found`` (copy ids) and the
    recall; ``links`` (pairs of ids) and ``removals`` (removed id, kept id) whose
    reference Jaccard ``jac(a, b)`` is below :data:`LOW_J`.  A link or removal
    across two languages counts in the total and under ``a+b``."""
    out: dict[str, Counter] = defaultdict(Counter)
    for t in truth:
        if t["j"] >= RECALL_J:
            for key in (t["lang"], TOTAL):
                out[key]["planted"] += 1
                out[key]["found"] += t["copy"] in found
    for field, pairs in (("links_below", links), ("removed_below", removals)):
        for a, b in pairs:
            if jac(a, b) < LOW_J:
                la, lb = lang_of[a], lang_of[b]
                for key in (la if la == lb else "+".join(sorted((la, lb))), TOTAL):
                    out[key][field] += 1
    return {
        key: {
            "planted": c["planted"],
            "found": c["found"],
            "recall": round(c["found"] / c["planted"], 4) if c["planted"] else None,
            "links_below": c["links_below"],
            "removed_below": c["removed_below"],
        }
        for key, c in out.items()
    }


def lsh_spark_outcome(run: str, truth: list[dict]):
    """Found copies (in one cluster with their original), the edges of ``pairs/`` and
    the removals (removed id, its cluster's kept id) of a jobs/dedup.py output."""
    import pyarrow.dataset as ds

    clusters = ds.dataset(os.path.join(run, "clusters"), format="parquet").to_table(
        columns=["id", "cluster_id", "keep"]
    )
    ids, cids, keeps = (clusters.column(n).to_pylist() for n in ("id", "cluster_id", "keep"))
    cluster_of = dict(zip(ids, cids, strict=True))
    kept = {c: i for i, c, k in zip(ids, cids, keeps, strict=True) if k}
    found = {
        t["copy"]
        for t in truth
        if t["copy"] in cluster_of and cluster_of[t["copy"]] == cluster_of.get(t["original"])
    }
    pairs = ds.dataset(os.path.join(run, "pairs"), format="parquet").to_table(
        columns=["id_a", "id_b"]
    )
    links = list(
        zip(pairs.column("id_a").to_pylist(), pairs.column("id_b").to_pylist(), strict=True)
    )
    removals = [(i, kept[c]) for i, c, k in zip(ids, cids, keeps, strict=True) if not k]
    return found, links, removals


# -- runs ------------------------------------------------------------------


def has_tokens_option() -> bool:
    """Whether this lsh-spark has ``--tokens`` (script-aware tokens)."""
    import dataclasses

    from lsh_spark.config import DedupConfig

    return "tokens" in {f.name for f in dataclasses.fields(DedupConfig)}


def modes(tokens: bool) -> dict[str, list[str]]:
    """The lsh-spark runs side by side: name -> jobs/dedup.py flags."""
    out = {"default": []}
    if tokens:
        out["space"] = ["--tokens", "space"]
    out["char"] = ["--shingle", "char"]
    return out


def mb_per_s_per_core(n_bytes: int, seconds: float, n_cores: int) -> float:
    return round(n_bytes / 1e6 / seconds / n_cores, 3)


def run_lsh_spark(args, corpus: str, out: str, flags: list[str]) -> dict:
    from compare import measured_dedup

    print(
        f"  lsh-spark {' '.join(flags) or '(default)'} on {corpus} ...", file=sys.stderr, flush=True
    )
    m, report = measured_dedup(args, corpus, out, *flags)
    return {
        "seconds": m["seconds"],
        "cpu_seconds": m["cpu_seconds"],
        "peak_mem_mib": m["peak_mem_mib"],
        "stage_seconds": report.get("seconds", {}),
        "candidate_pairs": report["counts"].get("candidate_pairs"),
        "verified_pairs": report["counts"].get("verified_pairs"),
        "bytes": os.path.getsize(corpus),
    }


def run_datatrove(args, folder: str, out: str) -> dict:
    from compare import run_measured

    shards = sorted(
        os.path.join(folder, "shards", f)
        for f in os.listdir(os.path.join(folder, "shards"))
        if f.endswith(".jsonl")
    )
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        args.datatrove_python,
        os.path.join(HERE, "peer_datatrove.py"),
        *("--input", os.path.join(folder, "shards"), "--out", out),
        *("--workers", str(cores(args.master))),
    ]
    print("  datatrove (FineWeb recipe, 14x8) ...", file=sys.stderr, flush=True)
    m = run_measured(cmd)
    if m["exit"] != 0:
        return {"error": "\n".join(m["tail"]), "exit": m["exit"]}
    own = json.loads(m["tail"][-1]) if m["tail"] and m["tail"][-1].startswith("{") else {}
    return {
        "seconds": own.get("seconds", m["seconds"]),
        "version": own.get("datatrove"),
        "process_seconds": m["seconds"],
        "cpu_seconds": m["cpu_seconds"],
        "peak_mem_mib": m["peak_mem_mib"],
        "bytes": os.path.getsize(os.path.join(folder, "corpus.jsonl")),
        "shards": shards,
    }


def english_corpus(args, n_bytes: int) -> str:
    """A PAN 2013 corpus of bench/make_corpus.py with about ``n_bytes`` bytes
    (``--english-docs`` documents; by default as many as make that size)."""
    from make_corpus import build_once

    n = args.english_docs or max(1000, round(n_bytes / ENGLISH_BYTES_PER_DOC))
    return build_once(
        os.path.join(args.work, f"english-{n}"), "--source", args.english_source, "--n", str(n)
    )


# Mean bytes of a bench/make_corpus.py record (default options, PAN 2013), to size
# the English corpus like the multilingual one; the sizes used are printed.
ENGLISH_BYTES_PER_DOC = 1230


def normalization_cost(texts_by_lang: dict[str, list[str]], repeat: int) -> dict[str, dict]:
    """ms per MB (UTF-8 input) of ``normalize_array`` on each language's texts as
    one Arrow array, one thread, best of ``repeat``, with each of its ``tokens``
    modes when it has them; and the share of ASCII texts."""
    import pyarrow as pa

    from lsh_spark.normalize import normalize_array

    token_modes = [None]
    if "tokens" in inspect.signature(normalize_array).parameters:
        token_modes = ["script", "space"]
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    normalize_array(pa.array(["warm-up Straße 日本語"], pa.large_string()))
    out = {}
    for lang, texts in texts_by_lang.items():
        arr = pa.array(texts, pa.large_string())
        n_bytes = sum(len(t.encode()) for t in texts)
        row = {
            "mb": round(n_bytes / 1e6, 2),
            "ascii_share": round(sum(t.isascii() for t in texts) / max(1, len(texts)), 3),
        }
        for mode in token_modes:
            kwargs = {} if mode is None else {"tokens": mode}
            best = float("inf")
            for _ in range(repeat):
                start = time.perf_counter()
                normalize_array(arr, **kwargs)
                best = min(best, time.perf_counter() - start)
            row[f"ms_per_mb_{mode or 'default'}"] = round(1000 * best / (n_bytes / 1e6), 1)
        out[lang] = row
    return out


# -- tables ----------------------------------------------------------------


def table(header: list[str], rows: list[list]) -> str:
    def cell(v):
        if v is None:
            return "—"
        if isinstance(v, float):
            return f"{v:g}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def short_list(items: list[str], shown: int = 3) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def shown_path(path: str) -> str:
    rel = os.path.relpath(path, ROOT)
    return path if rel.startswith("..") else rel


def order(langs) -> list[str]:
    known = [lang for lang in SCRIPTS if lang in langs]
    return known + sorted(set(langs) - set(known) - {TOTAL}) + ([TOTAL] if TOTAL in langs else [])


def n_cores_of(res: dict) -> int:
    return cores(res["options"]["master"])


def print_tables(res: dict) -> None:
    systems = list(res["quality"])
    meta = res["corpus"]["languages"]
    print(
        f"corpus: {res['corpus']['documents']:,} documents, {res['corpus']['bytes'] / 1e6:.1f} MB, "
        f"{len(meta)} languages; copies planted at rates {res['options']['rates']}"
    )
    print(
        table(
            [
                "language",
                "script",
                "documents",
                "copies",
                "MB",
                "copies with ref J >= 0.85",
                "packages",
            ],
            [
                [
                    lang,
                    m["script"],
                    m["documents"],
                    m["copies"],
                    round(m["bytes"] / 1e6, 2),
                    res["quality"][systems[0]].get(lang, {}).get("planted", 0),
                    short_list(list(m["packages"])),
                ]
                for lang, m in ((lang, meta[lang]) for lang in order(meta))
            ],
        )
    )
    print()
    print(
        "recall of planted copies with reference J >= 0.85 | links below reference J 0.5 "
        "| removed documents below reference J 0.5 (with their cluster's kept document)"
    )
    langs = order({k for q in res["quality"].values() for k in q})
    header = ["language", "planted"]
    for what in ("recall", "links < 0.5", "removed < 0.5"):
        header += [f"{what} {s}" for s in systems]
    rows = []
    for lang in langs:
        q = {s: res["quality"][s].get(lang, {}) for s in systems}
        row = [lang, next((q[s]["planted"] for s in systems if q[s].get("planted")), 0)]
        row += [q[s].get("recall") for s in systems]
        row += [q[s].get("links_below", 0) for s in systems]
        row += [q[s].get("removed_below", 0) for s in systems]
        rows.append(row)
    print(table(header, rows))
    print()
    cost = res["cost"]
    names = list(next(iter(cost.values()))["runs"]) if cost else []
    print(f"seconds (wall, Spark's start included) and MB/s per core ({res['options']['master']})")
    print(
        table(
            ["corpus", "MB"] + [f"s {n}" for n in names] + [f"MB/s/core {n}" for n in names],
            [
                [c, round(v["bytes"] / 1e6, 2)]
                + [v["runs"].get(n, {}).get("seconds") for n in names]
                + [v["runs"].get(n, {}).get("mb_per_s_per_core") for n in names]
                for c, v in cost.items()
            ],
        )
    )
    if res.get("english"):
        e = res["english"]
        print()
        print(
            table(
                ["corpus (default options)", "documents", "MB", "seconds", "s per MB"],
                [
                    [
                        r["name"],
                        r["documents"],
                        round(r["bytes"] / 1e6, 2),
                        r["seconds"],
                        r["s_per_mb"],
                    ]
                    for r in e["rows"]
                ],
            )
        )
        print(f"multilingual cost per input byte / English: {e['ratio']} (target <= 1.2)")
    print()
    norm = res["normalization"]
    cols = [c for c in next(iter(norm.values())) if c.startswith("ms_per_mb_")]
    print(
        "normalization alone (lsh_spark.normalize.normalize_array), one core, best of "
        f"{res['options']['norm_repeat']}"
    )
    print(
        table(
            ["texts", "script", "MB", "ASCII texts"]
            + [f"ms per MB, tokens={c.removeprefix('ms_per_mb_')}" for c in cols],
            [
                [lang, SCRIPTS.get(lang.split()[0], "?"), n["mb"], n["ascii_share"]]
                + [n[c] for c in cols]
                for lang, n in norm.items()
            ],
        )
    )
    if res.get("by_rate"):
        print()
        print("by edit rate, all languages: copies, those with reference J >= 0.85, their recall")
        rates = sorted({r for s in res["by_rate"].values() for r in s})
        print(
            table(
                ["rate", "copies", "ref J >= 0.85", "mean ref J", "mean J (0.2.0 tokens)"]
                + [f"recall {s}" for s in systems],
                [
                    [
                        r,
                        res["by_rate_truth"][r]["copies"],
                        res["by_rate_truth"][r]["planted"],
                        res["by_rate_truth"][r]["mean_j"],
                        res["by_rate_truth"][r]["mean_j_space"],
                    ]
                    + [res["by_rate"][s].get(r) for s in systems]
                    for r in rates
                ],
            )
        )
    for s, missed in res.get("missed", {}).items():
        for lang, rows in missed.items():
            shown = "; ".join(f"{m['name']} (rate {m['rate']}, J {m['j']:.3f})" for m in rows[:5])
            print(f"{s}: {lang} misses {len(rows)}: {shown}")
    dt = res["cost"][TOTAL]["runs"].get("datatrove")
    if dt:
        print(
            f"datatrove {dt['version']}: its defaults (MinhashConfig(): 5-grams, 14 buckets x 8 "
            f"hashes, English word tokenizer), {n_cores_of(res)} workers; its links are its "
            "candidate pairs (unverified), a copy is found when it or its original is removed"
        )
    if res.get("datatrove_error"):
        print(f"datatrove did not run: {res['datatrove_error']}")


# -- main ------------------------------------------------------------------


def read_jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def by_rate(truth: list[dict], found: dict[str, set[str]]) -> tuple[dict, dict]:
    """Per edit rate: copies, those with reference J >= 0.85, mean reference J and
    mean J with 0.2.0's tokens; and each system's recall of those copies."""
    groups = defaultdict(list)
    for t in truth:
        groups[t["rate"]].append(t)
    stats = {
        r: {
            "copies": len(ts),
            "planted": sum(t["j"] >= RECALL_J for t in ts),
            "mean_j": round(sum(t["j"] for t in ts) / len(ts), 3),
            "mean_j_space": round(sum(t["j_space"] for t in ts) / len(ts), 3),
        }
        for r, ts in sorted(groups.items())
    }
    recall = {}
    for system, got in found.items():
        recall[system] = {}
        for r, ts in sorted(groups.items()):
            strong = [t for t in ts if t["j"] >= RECALL_J]
            if strong:
                recall[system][r] = round(sum(t["copy"] in got for t in strong) / len(strong), 4)
    return stats, recall


def missed_copies(truth: list[dict], found: set[str], names: dict[str, str]) -> dict[str, list]:
    """Per language, the planted copies with reference J >= 0.85 not found (worst
    language first), with their page or catalog, rate and reference J."""
    out = defaultdict(list)
    for t in truth:
        if t["j"] >= RECALL_J and t["copy"] not in found:
            out[t["lang"]].append(
                {"copy": t["copy"], "name": names[t["copy"]], "rate": t["rate"], "j": t["j"]}
            )
    return dict(sorted(out.items(), key=lambda kv: -len(kv[1])))


def per_language_selection(spec: str, meta: dict) -> list[str]:
    if spec == "none":
        return []
    if spec == "all":
        return order(meta)
    chosen = spec.split(",")
    unknown = [lang for lang in chosen if lang not in meta]
    if unknown:
        raise SystemExit(
            f"--per-language-runs: {', '.join(unknown)} not in the corpus; allowed: "
            f"all, none or a list of {', '.join(order(meta))}"
        )
    return chosen


def _rates(text: str) -> list[float]:
    try:
        rates = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected rates like 0.005,0.01, got {text!r}") from None
    if not rates or not all(0 < r < 1 for r in rates):
        raise argparse.ArgumentTypeError(f"rates must lie between 0 and 1, got {text!r}")
    return rates


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default=os.path.join(ROOT, "bench", "out", "multilingual"))
    p.add_argument("--man-root", default="/usr/share/man", help="installed manual pages")
    p.add_argument("--locale-root", default="/usr/share/locale", help="installed .mo catalogs")
    p.add_argument(
        "--catalog-chars",
        type=int,
        default=2000,
        help="characters per document cut from a catalog, between messages (0: one "
        "document per catalog)",
    )
    p.add_argument(
        "--min-tokens", type=int, default=50, help="source documents with fewer tokens are left out"
    )
    p.add_argument("--copy-share", type=float, default=0.3, help="share of documents copied")
    p.add_argument("--rates", type=_rates, default=[0.005, 0.01, 0.02, 0.04])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="pages rendered at once")
    p.add_argument("--shards", type=int, default=2, help="input files of the datatrove run")
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument(
        "--per-language-runs",
        default="en,de,ru,ja,zh_CN,ko",
        help="languages also run alone, with every lsh-spark mode, for their own seconds "
        "('all', 'none' or a comma list)",
    )
    p.add_argument(
        "--english-source", default=os.path.join(os.path.dirname(ROOT), "shared", "data", "pan13")
    )
    p.add_argument(
        "--english-docs",
        type=int,
        default=0,
        help="documents of the English corpus (default: about as many bytes as the "
        "multilingual one; 0 with --english-source '' for none)",
    )
    p.add_argument("--datatrove-python", help="a Python with datatrove, to run it as a peer")
    p.add_argument("--norm-repeat", type=int, default=3)
    p.add_argument(
        "--warmup",
        default=os.path.join(ROOT, "data", "sample", "corpus.jsonl"),
        help="a small corpus lsh-spark runs once, untimed, first ('' for none)",
    )
    p.add_argument("--corpus-only", action="store_true", help="build the corpus and stop")
    args = p.parse_args()

    folder = build_corpus(args)
    with open(os.path.join(folder, "meta.json"), encoding="utf-8") as fh:
        meta = json.load(fh)
    if args.corpus_only:
        print(json.dumps(meta, indent=2, ensure_ascii=False))
        return
    docs = read_jsonl(os.path.join(folder, "docs.jsonl"))
    truth = read_jsonl(os.path.join(folder, "truth.jsonl"))
    texts = {d["id"]: d["text"] for d in read_jsonl(os.path.join(folder, "corpus.jsonl"))}
    lang_of = {d["id"]: d["lang"] for d in docs}
    names = {d["id"]: d["name"] for d in docs}
    run_modes = modes(has_tokens_option())
    per_lang = per_language_selection(args.per_language_runs, meta["languages"])
    n_cores = cores(args.master)
    runs = os.path.join(args.work, "runs")
    os.makedirs(runs, exist_ok=True)
    if args.warmup:
        print("warming up lsh-spark (not timed) ...", file=sys.stderr, flush=True)
        run_lsh_spark(args, args.warmup, os.path.join(runs, "warmup"), [])

    corpus = os.path.join(folder, "corpus.jsonl")
    cost = {TOTAL: {"bytes": os.path.getsize(corpus), "runs": {}}}
    for name, flags in run_modes.items():
        cost[TOTAL]["runs"][name] = run_lsh_spark(
            args, corpus, os.path.join(runs, f"total-{name}"), flags
        )

    english = None
    if args.english_source:
        path = english_corpus(args, cost[TOTAL]["bytes"])
        en = run_lsh_spark(args, path, os.path.join(runs, "english-default"), [])
        with open(path, encoding="utf-8") as fh:
            en_docs = sum(1 for _ in fh)
        ml = cost[TOTAL]["runs"]["default"]
        rows = [
            {
                "name": "multilingual",
                "documents": len(docs),
                "bytes": ml["bytes"],
                "seconds": ml["seconds"],
            },
            {
                "name": f"English (PAN 2013, {shown_path(path)})",
                "documents": en_docs,
                "bytes": en["bytes"],
                "seconds": en["seconds"],
            },
        ]
        for r in rows:
            r["s_per_mb"] = round(r["seconds"] / (r["bytes"] / 1e6), 3)
        english = {"rows": rows, "ratio": round(rows[0]["s_per_mb"] / rows[1]["s_per_mb"], 2)}

    for lang in per_lang:
        path = os.path.join(folder, "langs", f"{lang}.jsonl")
        cost[lang] = {"bytes": os.path.getsize(path), "runs": {}}
        for name, flags in run_modes.items():
            cost[lang]["runs"][name] = run_lsh_spark(
                args, path, os.path.join(runs, f"{lang}-{name}"), flags
            )

    outcomes = {}
    dt_error = None
    if args.datatrove_python:
        dt = run_datatrove(args, folder, os.path.join(runs, "total-datatrove"))
        if "error" in dt:
            dt_error = dt["error"]
        else:
            cost[TOTAL]["runs"]["datatrove"] = dt
            outcomes["datatrove"] = datatrove_outcome(
                os.path.join(runs, "total-datatrove"), dt["shards"], truth
            )
    for c in cost.values():
        for r in c["runs"].values():
            r["mb_per_s_per_core"] = mb_per_s_per_core(c["bytes"], r["seconds"], n_cores)

    print("scoring against the reference Jaccard ...", file=sys.stderr, flush=True)
    ref = Shingles(texts)
    for name in run_modes:
        outcomes[name] = lsh_spark_outcome(os.path.join(runs, f"total-{name}"), truth)
    ordered = {name: outcomes[name] for name in [*run_modes, "datatrove"] if name in outcomes}
    quality = {
        name: score(truth, lang_of, found, links, removals, ref.jaccard)
        for name, (found, links, removals) in ordered.items()
    }
    rate_stats, rate_recall = by_rate(truth, {n: o[0] for n, o in ordered.items()})
    missed = {}
    for name, (found, _, _) in ordered.items():
        m = missed_copies(truth, found, names)
        bad = {lang: rows for lang, rows in m.items() if quality[name][lang]["recall"] < 0.99}
        if bad:
            missed[name] = bad

    print("normalization alone ...", file=sys.stderr, flush=True)
    by_lang = defaultdict(list)
    for i, t in texts.items():
        by_lang[lang_of[i]].append(t)
    norm_input = {lang: by_lang[lang] for lang in order(by_lang)}
    if english:
        with open(english_corpus(args, cost[TOTAL]["bytes"]), encoding="utf-8") as fh:
            norm_input["en (PAN 2013)"] = [json.loads(line)["text"] for line in fh]
    normalization = normalization_cost(norm_input, args.norm_repeat)

    res = {
        "options": {k: v for k, v in vars(args).items()},
        "lsh_spark_modes": run_modes,
        "corpus": {k: meta[k] for k in ("documents", "bytes", "languages")},
        "quality": quality,
        "cost": cost,
        "english": english,
        "normalization": normalization,
        "by_rate_truth": rate_stats,
        "by_rate": rate_recall,
        "missed": missed,
        "datatrove_error": dt_error,
    }
    with open(os.path.join(args.work, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(res, fh, indent=2, ensure_ascii=False)
    print_tables(res)


if __name__ == "__main__":
    main()
