"""Shingles: word or character k-grams, hashed to seeded 64-bit integers.

Everything here is native Spark (higher-order array functions and XXH64 in the
JVM), so no shingle string ever crosses into Python.  Spark's ``xxhash64(seed,
v_1, ..., v_n)`` starts from XXH64 of the 8-byte little-endian seed with seed
42 and chains each value in with the previous result as its seed (golden values
in tests/test_shingle.py).  A character shingle's hash is ``xxhash64(seed,
window)``; a word k-gram's is ``xxhash64(seed, t_1, ..., t_k)`` over the token
hashes ``t_i = xxhash64(seed, token_i)``, so each token is hashed once and no
k-gram string is built.

A document with fewer tokens (or characters) than ``k`` gets one shingle, the
whole normalized text, so two short documents match only when their texts are
identical and short documents never pile up into one false cluster.

The signature pass of a MinHash run with word shingles computes the same
values in the Python worker that normalizes the text
(:func:`word_shingles_arrow`, :func:`text_hash_arrow`), so the normalized text
never travels back to the JVM: the tokens are found as byte spans of the
batch's text buffer (:func:`split_spans`), hashed by XXH64 and chained into
k-gram hashes by Spark's ``XXH64.hashLong``, either by compiled loops
(:func:`_xxh64_loop`, :func:`_kgram_loop`, where numba is installed; see
:mod:`lsh_spark.kernels`) or by the same arithmetic vectorized in numpy
(:func:`xxh64_spans`, :func:`_kgram_chain`; tokens of 32 bytes or more go to
the ``xxhash`` package).  All paths give bit-identical values (tested); stored
signatures and crawl indexes do not depend on which one ran.

Example
-------
>>> spark = getfixture("spark")
>>> docs = spark.createDataFrame([("a", "one two three"), ("b", "hi")], "id string, norm string")
>>> shingled = add_shingles(docs, "word", 2, seed=1)
>>> shingled.columns
['id', 'norm', 'shingles']
>>> [(row.id, len(row.shingles)) for row in shingled.orderBy("id").collect()]
[('a', 2), ('b', 1)]
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lsh_spark.kernels import compiled, use_compiled
from lsh_spark.normalize import TEXT_CHAR, normalize_col, string_buffers


def _hash(seed: int, value: Column) -> Column:
    return F.xxhash64(F.lit(seed).cast("bigint"), value)


def token_hashes(norm: Column, seed: int) -> Column:
    """``array<bigint>``: the hash of every space-separated token."""
    return F.transform(F.split(norm, " "), lambda t: _hash(seed, t))


def kgram_hashes(units: Column, k: int, seed: int) -> Column:
    """One hash per run of ``k`` consecutive token hashes.

    The ``k`` shifted slices are zipped once per row, so the work is linear in
    the document (a lambda that indexed the array by position would re-evaluate
    its argument per element and go quadratic on a 5 MB document).  ``units``
    must be a column reference, not an expression, or each slice re-evaluates it.
    """
    m = F.greatest(F.size(units) - k + 1, F.lit(0))
    zipped = F.arrays_zip(*[F.slice(units, i + 1, m).alias(str(i)) for i in range(k)])
    return F.transform(
        zipped, lambda z: F.xxhash64(F.lit(seed).cast("bigint"), *[z[str(i)] for i in range(k)])
    )


def _char_windows(norm: Column, k: int, seed: int) -> Column:
    # Every k-character window, found by one regex pass (a zero-width match with
    # a capturing look-ahead at each position that does not split a UTF-16
    # surrogate pair); no per-position substring scans.
    pattern = r"(?s)(?![\uDC00-\uDFFF])(?=(.{" + str(k) + r"}))"
    return F.transform(F.regexp_extract_all(norm, F.lit(pattern), 1), lambda w: _hash(seed, w))


def text_shingles(
    df: DataFrame, text_col: str, kind: str, k: int, seed: int, tokens: str, out: str = "shingles"
) -> DataFrame:
    """``df`` with ``out``: the shingle set of the normalized ``text_col`` (null where
    the text has no letter or digit), as the pipeline shingles an accepted record."""
    norm = normalize_col(F.make_valid_utf8(F.col(text_col).cast("string")), tokens)
    with_norm = df.withColumn("_norm", F.when(norm.rlike(TEXT_CHAR), norm))
    return add_shingles(with_norm, kind, k, seed, "_norm", out).drop("_norm")


def add_shingles(
    df: DataFrame,
    kind: str,
    k: int,
    seed: int,
    norm: str = "norm",
    out: str = "shingles",
    all_out: str | None = None,
) -> DataFrame:
    """Add ``out``: the sorted, distinct ``array<bigint>`` of shingle hashes of ``norm``.

    ``norm`` must be the output of :func:`lsh_spark.normalize.normalize_col`:
    tokens separated by single spaces, no leading or trailing space, not empty;
    where it is null, ``out`` is null.

    * ``word``: each token is hashed once, and a k-gram's hash is Spark's
      ``xxhash64(seed, t_1, ..., t_k)`` of its ``k`` token hashes (no k-gram
      string is ever built).  Two different k-grams collide only if two 64-bit
      hashes do, about ``2**-64`` per pair.
    * ``char``: ``xxhash64(seed, window)`` of every ``k``-code-point window (a
      CJK character outside the BMP is one character, not two UTF-16 halves).

    A text with fewer than ``k`` units gets one shingle, ``xxhash64(seed, text)``.
    With ``all_out``, that column also gets every shingle occurrence (sorted, with
    repeats: the term frequencies SimHash weighs by).
    """
    if kind not in ("word", "char"):
        raise ValueError(f"--shingle: got {kind!r}; allowed: word | char")
    units = "_shingle_units"
    text = F.col(norm)
    staged = df.withColumn(
        units, token_hashes(text, seed) if kind == "word" else _char_windows(text, k, seed)
    )
    u = F.col(units)
    grams = kgram_hashes(u, k, seed) if kind == "word" else u
    whole = F.array(_hash(seed, text))
    shingles = (
        F.when(text.isNull(), F.lit(None))
        .when(F.size(u) < (k if kind == "word" else 1), whole)
        .otherwise(grams)
    )
    if all_out is None:
        return staged.withColumn(out, F.sort_array(F.array_distinct(shingles))).drop(units)
    staged = staged.withColumn(all_out, F.sort_array(shingles)).drop(units)
    return staged.withColumn(out, F.array_distinct(F.col(all_out)))


def text_hash(norm: Column, seed: int) -> Column:
    """128-bit fingerprint (16 bytes) of the normalized text, for exact-duplicate grouping.

    Two independent XXH64 values make an accidental collision among a billion
    documents vanishingly unlikely (about n**2 / 2**129).
    """

    def hex64(s: int) -> Column:
        return F.lpad(F.hex(_hash(s, norm)), 16, "0")

    return F.unhex(F.concat(hex64(seed * 2 + 101), hex64(seed * 2 + 102)))


# XXH64 primes (Collet, xxHash specification) and the shifts of Spark's hashLong.
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5_PLUS_8 = np.uint64((0x27D4EB2F165667C5 + 8) & ((1 << 64) - 1))
_S = {r: np.uint64(r) for r in (8, 11, 23, 27, 29, 31, 32, 33, 37, 41, 53)}
# k-grams per chunk of the chain (a chunk and its scratch array stay in L2).
_CHUNK = 1 << 15


def _seed_hash(seed: int) -> int:
    """Spark's ``xxhash64`` state after its first argument, the seed as a long."""
    return xxhash.xxh64_intdigest(struct.pack("<q", seed), seed=42)


def _hash_long(v: np.ndarray, h: np.ndarray, t: np.ndarray) -> None:
    """``h = XXH64.hashLong(v, seed=h)`` in place, as Spark computes it for a long.

    ``v`` is overwritten (pass a scratch copy) and ``t`` is scratch; uint64
    arithmetic wraps exactly like Java's long arithmetic.
    """
    h += _P5_PLUS_8
    v *= _P2
    np.left_shift(v, _S[31], out=t)
    np.right_shift(v, _S[33], out=v)
    v |= t
    v *= _P1
    h ^= v
    np.left_shift(h, _S[27], out=t)
    np.right_shift(h, _S[37], out=h)
    h |= t
    h *= _P1
    h += _P4
    _avalanche(h, t)


def _avalanche(h: np.ndarray, t: np.ndarray) -> None:
    """XXH64's final mix of ``h`` in place (uint64); ``t`` is scratch."""
    for shift, prime in ((33, _P2), (29, _P3)):
        np.right_shift(h, _S[shift], out=t)
        h ^= t
        h *= prime
    np.right_shift(h, _S[32], out=t)
    h ^= t


_P5 = 0x27D4EB2F165667C5
_P5_U64 = np.uint64(_P5)
_MASK64 = (1 << 64) - 1
# XXH64 reads a string of 32 bytes or more in 32-byte stripes (four lanes); such
# tokens are rare in text, and the numpy path gives them to the xxhash package
# one by one (the compiled one hashes them itself).
_STRIPE = 32


_LOW32 = np.uint64(0xFFFFFFFF)
_LOW8 = np.uint64(0xFF)


def _rotl_in_place(x: np.ndarray, r: int, t: np.ndarray) -> None:
    """``x`` rotated left by ``r`` bits in place (uint64); ``t`` is scratch."""
    np.left_shift(x, _S[r], out=t)
    np.right_shift(x, _S[64 - r], out=x)
    x |= t


def _read64(words: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The little-endian uint64 at each byte offset ``at`` of the bytes of ``words``
    (padded by at least one word past the last offset read), from two aligned words."""
    q = at >> 3
    r = ((at & 7) << 3).astype(np.uint64)
    lo, hi = words[q], words[q + 1]
    # (hi << 1) << (63 - r) is hi << (64 - r) without a shift by 64 when r is 0.
    return (lo >> r) | ((hi << np.uint64(1)) << (np.uint64(63) - r))


def _xxh64_of_length(words: np.ndarray, at: np.ndarray, length: int, seed: int) -> np.ndarray:
    """XXH64 with ``seed`` of the ``length``-byte strings (``length`` < 32) at the
    byte offsets ``at`` of ``words``: the specification's steps for that length
    (its 8-byte words, a 4-byte word, single bytes, the avalanche), in place."""
    h = np.full(len(at), (seed + _P5 + length) & _MASK64, dtype=np.uint64)
    t = np.empty_like(h)
    for w in range(length // 8):
        k = _read64(words, at + 8 * w)
        k *= _P2
        _rotl_in_place(k, 31, t)
        k *= _P1
        h ^= k
        _rotl_in_place(h, 27, t)
        h *= _P1
        h += _P4
    rest = length & 7
    if rest:
        # The last 1-7 bytes, read as one word: a 4-byte word, then single bytes.
        k = _read64(words, at + (length - rest))
        if rest >= 4:
            np.bitwise_and(k, _LOW32, out=t)
            t *= _P1
            h ^= t
            _rotl_in_place(h, 23, t)
            h *= _P2
            h += _P3
            k >>= _S[32]
        u = np.empty_like(h)
        for j in range(rest & 3):
            if j:
                k >>= _S[8]
            np.bitwise_and(k, _LOW8, out=u)
            u *= np.uint64(_P5)
            h ^= u
            _rotl_in_place(h, 11, t)
            h *= _P1
    _avalanche(h, t)
    return h


def xxh64_spans(
    data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, seed: int, kernel: str | None = None
) -> np.ndarray:
    """XXH64 with ``seed`` of each byte string ``data[starts[i]:starts[i] + lengths[i]]``
    (uint64; ``data`` a uint8 array), equal to ``xxhash.xxh64_intdigest``.

    ``kernel`` chooses the implementation (:func:`lsh_spark.kernels.use_compiled`).
    The compiled one (:func:`_xxh64_loop`) hashes each string in one pass, in
    registers.  The numpy one hashes strings shorter than 32 bytes, nearly every word
    token, together, in the specification's steps (Collet, xxHash, "XXH64
    algorithm description"), one group per length: the strings of one length
    take the same steps, so each step runs over a whole group without a mask
    or a scatter (faster than running each step over the strings that still
    have that much left); longer ones go to the ``xxhash`` package.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    out = np.empty(len(starts), dtype=np.uint64)
    if not len(starts):
        return out
    if use_compiled(kernel):
        compiled(_xxh64_loop)(
            np.ascontiguousarray(data, dtype=np.uint8),
            np.ascontiguousarray(starts),
            np.ascontiguousarray(lengths),
            np.uint64(seed & _MASK64),
            out,
        )
        return out
    lo = int(starts.min())
    hi = int((starts + lengths).max())
    # The bytes as aligned words, one spare word past the end for _read64.
    words = np.zeros((hi - lo) // 8 + 2, dtype=np.uint64)
    b = words.view(np.uint8)
    b[: hi - lo] = data[lo:hi]
    for i in np.flatnonzero(lengths >= _STRIPE).tolist():
        s = int(starts[i]) - lo
        out[i] = xxhash.xxh64_intdigest(b[s : s + int(lengths[i])], seed=seed)
    # Strings ordered by length (a stable sort of small integers), one slice per length.
    clipped = np.minimum(lengths, _STRIPE).astype(np.int8)
    order = np.argsort(clipped, kind="stable")
    bounds = np.searchsorted(clipped[order], np.arange(_STRIPE + 1))
    for length in range(_STRIPE):
        group = order[bounds[length] : bounds[length + 1]]
        if len(group):
            out[group] = _xxh64_of_length(words, starts[group] - lo, length, seed)
    return out


def _xxh64_loop(data, starts, lengths, seed, out):
    """The compiled kernel of :func:`xxh64_spans` (:func:`lsh_spark.kernels.compiled`):
    ``out[i]`` is XXH64 with ``seed`` of ``data[starts[i]:starts[i] + lengths[i]]``,
    the specification's steps for one string: 32-byte stripes in four lanes,
    then 8-byte words, a 4-byte word and single bytes, then the avalanche."""
    p1, p2, p3, p4, p5 = _P1, _P2, _P3, _P4, _P5_U64
    for i in range(starts.shape[0]):
        q = starts[i]
        n = lengths[i]
        end = q + n
        if n >= 32:
            v = np.empty(4, dtype=np.uint64)
            v[0] = seed + p1 + p2
            v[1] = seed + p2
            v[2] = seed
            v[3] = seed - p1
            while q + 32 <= end:
                for lane in range(4):
                    k = np.uint64(0)
                    for j in range(8):
                        k |= np.uint64(data[q + j]) << np.uint64(8 * j)
                    x = v[lane] + k * p2
                    v[lane] = ((x << np.uint64(31)) | (x >> np.uint64(33))) * p1
                    q += 8
            h = (
                ((v[0] << np.uint64(1)) | (v[0] >> np.uint64(63)))
                + ((v[1] << np.uint64(7)) | (v[1] >> np.uint64(57)))
                + ((v[2] << np.uint64(12)) | (v[2] >> np.uint64(52)))
                + ((v[3] << np.uint64(18)) | (v[3] >> np.uint64(46)))
            )
            for lane in range(4):
                x = v[lane] * p2
                h ^= ((x << np.uint64(31)) | (x >> np.uint64(33))) * p1
                h = h * p1 + p4
        else:
            h = seed + p5
        h += np.uint64(n)
        while q + 8 <= end:
            k = np.uint64(0)
            for j in range(8):
                k |= np.uint64(data[q + j]) << np.uint64(8 * j)
            x = k * p2
            h ^= ((x << np.uint64(31)) | (x >> np.uint64(33))) * p1
            h = ((h << np.uint64(27)) | (h >> np.uint64(37))) * p1 + p4
            q += 8
        if q + 4 <= end:
            k = np.uint64(0)
            for j in range(4):
                k |= np.uint64(data[q + j]) << np.uint64(8 * j)
            h ^= k * p1
            h = ((h << np.uint64(23)) | (h >> np.uint64(41))) * p2 + p3
            q += 4
        while q < end:
            h ^= np.uint64(data[q]) * p5
            h = ((h << np.uint64(11)) | (h >> np.uint64(53))) * p1
            q += 1
        h ^= h >> np.uint64(33)
        h *= p2
        h ^= h >> np.uint64(29)
        h *= p3
        h ^= h >> np.uint64(32)
        out[i] = h


def _kgram_loop(tokens, counts, k, h1, out):
    """The compiled k-gram chain of :func:`word_shingles_arrow`: for text ``i`` of
    ``counts[i]`` consecutive token hashes in ``tokens``, Spark's
    ``XXH64.hashLong`` chained from ``h1`` over each run of ``k`` of them,
    written after the previous text's values into ``out`` (uint64).  A text of
    fewer than ``k`` tokens (but at least one) keeps one slot, not written here
    (the hash of its whole text goes there); a text of none keeps none."""
    p1, p2, p3, p4 = _P1, _P2, _P3, _P4
    p5_8 = _P5_PLUS_8
    at = 0  # the text's first token
    w = 0  # its first value's slot
    for i in range(counts.shape[0]):
        c = counts[i]
        if c < k:
            at += c
            w += min(c, 1)
            continue
        grams = c - k + 1
        # Round by round over all the text's k-grams: independent chains, which
        # the processor overlaps (one k-gram at a time waits on each multiply).
        chain = out[w : w + grams]
        chain[:] = h1
        for j in range(k):
            for g in range(grams):
                x = tokens[at + g + j] * p2
                h = chain[g] + p5_8
                h ^= ((x << np.uint64(31)) | (x >> np.uint64(33))) * p1
                h = ((h << np.uint64(27)) | (h >> np.uint64(37))) * p1 + p4
                h ^= h >> np.uint64(33)
                h *= p2
                h ^= h >> np.uint64(29)
                h *= p3
                chain[g] = h ^ (h >> np.uint64(32))
        at += c
        w += grams


def split_spans(
    texts: pa.Array, sep: int = ord(" ")
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tokens of ``pc.split_pattern(texts, " ")`` as byte spans, without
    building them: ``(data, starts, lengths, counts)``, ``data`` the uint8 bytes of
    ``texts``, each token's start and length in it, and each text's number of
    tokens (a null text has none, an empty one a single empty token, and two
    separators in a row make an empty token between them, as in Arrow's split).
    """
    n = len(texts)
    valid = ~np.asarray(texts.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    off, data = string_buffers(texts)
    lo = int(off[0])
    seps = np.flatnonzero(data[lo : int(off[-1])] == sep) + lo
    per = np.diff(np.searchsorted(seps, off))
    if not valid.all():  # a null slot's bytes (if any) hold no tokens
        seps = seps[np.repeat(valid, per)]
        per = np.where(valid, per, 0)
    counts = np.where(valid, per + 1, 0).astype(np.int64)
    first = np.zeros(n, dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    first, last = first[valid], first[valid] + counts[valid] - 1
    total = int(counts.sum())
    starts = np.empty(total, dtype=np.int64)
    ends = np.empty(total, dtype=np.int64)
    # A text's first token starts where the text does, every other one after a
    # separator; its last one ends where the text does, every other one at one.
    inner = np.ones(total, dtype=bool)
    inner[first] = False
    starts[inner] = seps + 1
    starts[first] = off[:-1][valid]
    inner[:] = True
    inner[last] = False
    ends[inner] = seps
    ends[last] = off[1:][valid]
    return data, starts, ends - starts, counts


def _hash_strings(values: pa.Array, *seeds: int) -> list[np.ndarray]:
    """Spark's ``xxhash64(seed, s)`` (as uint64) of every string of ``values``, per seed.

    One ``xxhash`` call per string: for whole texts the package's vectorized
    code beats :func:`_xxh64_loop` on long strings."""
    raw = values.cast(pa.large_binary()).to_pylist()
    return [
        np.fromiter(
            (xxhash.xxh64_intdigest(b, seed=h1) for b in raw), dtype=np.uint64, count=len(raw)
        )
        for h1 in map(_seed_hash, seeds)
    ]


def _kgram_chain(
    token_hash: np.ndarray,
    counts: np.ndarray,
    grams: np.ndarray,
    sizes: np.ndarray,
    short: np.ndarray,
    k: int,
    h1: np.uint64,
) -> np.ndarray:
    """The numpy version of :func:`_kgram_loop`: ``sizes[i]`` slots per text, those of
    the texts not ``short`` (fewer than ``k`` tokens) holding their k-gram hashes."""
    n = len(counts)
    # The chain runs over every token position of the batch, reading k
    # shifted contiguous slices (no gathers); the positions where a k-gram of
    # the same text starts are then picked in order, which is slot order.
    total = len(token_hash)
    padded = np.zeros(total + k - 1, dtype=np.uint64)
    padded[:total] = token_hash
    starts_gram = np.repeat(
        np.tile([True, False], n), np.column_stack([grams, counts - grams]).ravel()
    )
    chained = np.empty(total, dtype=np.uint64)
    v = np.empty(min(_CHUNK, total), dtype=np.uint64)
    t = np.empty_like(v)
    for c0 in range(0, total, _CHUNK):
        hc = chained[c0 : c0 + _CHUNK]
        vc, tc = v[: len(hc)], t[: len(hc)]
        hc.fill(h1)
        for j in range(k):
            np.copyto(vc, padded[c0 + j : c0 + j + len(hc)])
            _hash_long(vc, hc, tc)
    values = np.empty(int(sizes.sum()), dtype=np.uint64)
    values[np.repeat(~short, sizes)] = chained[starts_gram]
    return values


def word_shingles_arrow(
    norm: pa.Array, k: int, seed: int, kernel: str | None = None
) -> pa.ListArray:
    """:func:`add_shingles` with ``kind="word"`` over an Arrow array of normalized texts.

    Returns ``list<int64>``: the sorted distinct shingle hashes of each text,
    null where ``norm`` is null, identical to the Spark path's values.  The
    tokens are hashed in place in the text buffer (:func:`split_spans`,
    :func:`xxh64_spans`), faster than Arrow's split, a dictionary of the
    distinct tokens and one ``xxhash`` call per distinct token.  ``kernel`` chooses how
    the tokens and k-grams are hashed (:func:`lsh_spark.kernels.use_compiled`):
    the compiled kernels hash one token, then one round of the k-gram chain
    over a text's k-grams, at a time (:func:`_xxh64_loop`, :func:`_kgram_loop`);
    the numpy path runs each step over a whole batch (:func:`_kgram_chain`).
    Either way each text's hashes are then sorted by numpy's sort (numba's
    sort is much slower).  The compiled path is about twice as fast as numpy
    (``bench/shingle_throughput.py`` times both).
    """
    norm = pa.array(norm) if not isinstance(norm, pa.Array) else norm
    n = len(norm)
    data, starts, lengths, counts = split_spans(norm)
    valid = counts > 0  # a text, even an empty one, has at least one token
    token_hash = xxh64_spans(data, starts, lengths, _seed_hash(seed), kernel)
    grams = np.where(counts >= k, counts - k + 1, 0)
    short = valid & (counts < k)
    sizes = np.where(short, 1, grams)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    h1 = np.uint64(_seed_hash(seed))
    if use_compiled(kernel):
        values = np.empty(int(offsets[-1]), dtype=np.uint64)
        compiled(_kgram_loop)(token_hash, counts, k, h1, values)
    else:
        values = _kgram_chain(token_hash, counts, grams, sizes, short, k, h1)
    # A text of fewer than k tokens: one shingle, the hash of the whole text.
    if short.any():
        values[offsets[:-1][short]] = _hash_strings(norm.filter(pa.array(short)), seed)[0]
    # Sorted (as signed longs, Spark's order) and distinct within each text.
    signed = values.view(np.int64)
    for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=False):
        if hi - lo > 1:
            signed[lo:hi].sort()
    first = np.ones(len(signed), dtype=bool)
    first[1:] = signed[1:] != signed[:-1]
    first[offsets[:-1][sizes > 0]] = True
    # A text's distinct hashes start where the first-occurrence count reached
    # at its first slot: one cumulative sum, no per-slot text index.
    seen = np.zeros(len(first) + 1, dtype=np.int64)
    np.cumsum(first, out=seen[1:])
    kept = seen[offsets]
    return pa.ListArray.from_arrays(
        pa.array(kept.astype(np.int32)), pa.array(signed[first]), mask=pa.array(~valid)
    )


# A packed shingle set is its sorted int64 hashes as one binary value of
# little-endian bytes (see pack_shingles); Arrow's binary offsets are int32.
PACKED_BYTES_LIMIT = (1 << 31) - 1


def packed_slices(sets: pa.ListArray, limit: int = PACKED_BYTES_LIMIT) -> list[tuple[int, int]]:
    """Row ranges ``(start, stop)`` of ``sets`` (``list<int64>``) whose packed
    bytes (:func:`pack_shingles`) each stay within ``limit``; one range for any
    batch of ordinary size.  A single set larger than ``limit`` cannot be packed
    (at 8 bytes a hash, 268 million shingles; ``--max-text-chars`` keeps texts
    far below that)."""
    offsets = np.asarray(sets.offsets.to_numpy(zero_copy_only=False), dtype=np.int64) * 8
    bounds, start = [], 0
    while start < len(sets):
        stop = int(np.searchsorted(offsets, offsets[start] + limit, side="right")) - 1
        if stop <= start:
            raise ValueError(
                f"a shingle set of {(offsets[start + 1] - offsets[start]) // 8} "
                f"hashes exceeds {limit} bytes packed"
            )
        bounds.append((start, min(stop, len(sets))))
        start = bounds[-1][1]
    return bounds


def pack_shingles(sets: pa.ListArray) -> pa.BinaryArray:
    """``list<int64>`` shingle sets -> ``binary``: each set's hashes as
    consecutive little-endian int64 bytes, null where the set is null.

    The packed form crosses the JVM and Parquet as one value per document
    instead of one element per hash (see :func:`shingle_parts` for the way
    back); the caller keeps a batch within :data:`PACKED_BYTES_LIMIT`
    (:func:`packed_slices`)."""
    offsets = np.asarray(sets.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    if (offsets[-1] - offsets[0]) * 8 > PACKED_BYTES_LIMIT:
        raise ValueError(
            "packed shingle sets exceed Arrow's 2 GiB binary limit; "
            "split the batch with packed_slices"
        )
    values = np.ascontiguousarray(
        sets.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]], dtype="<i8"
    )
    byte_offsets = ((offsets - offsets[0]) * 8).astype(np.int32)
    validity = None
    if sets.null_count:
        validity = sets.is_valid().buffers()[1]
    return pa.BinaryArray.from_buffers(
        pa.binary(),
        len(sets),
        [validity, pa.py_buffer(byte_offsets), pa.py_buffer(values)],
        null_count=sets.null_count,
    )


def shingle_parts(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """Shingle sets, ``list<int64>`` or packed ``binary`` (:func:`pack_shingles`)
    -> (all hashes set after set as int64, each set's length); a null set has
    length 0.  Any other ``list<int64>`` column (block keys, say) unpacks the
    same way."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        offsets, data = string_buffers(arr)
        values = data[int(offsets[0]) : int(offsets[-1])].view("<i8")
        return values.astype(np.int64, copy=False), np.diff(offsets) // 8
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False)
    values = pc.list_flatten(arr).to_numpy(zero_copy_only=False)
    return values, lengths.astype(np.int64)


def text_hash_arrow(norm: pa.Array, seed: int) -> pa.Array:
    """:func:`text_hash` over an Arrow array: 16 bytes per text, null where ``norm`` is."""
    valid = ~np.asarray(norm.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    present = norm.filter(pa.array(valid))
    hi, lo = _hash_strings(present, seed * 2 + 101, seed * 2 + 102)
    # Spark's value: the two hashes as 16 hex digits each, unhexed: big-endian bytes.
    digest = np.empty((len(present), 2), dtype=">u8")
    digest[:, 0], digest[:, 1] = hi, lo
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), len(present), [None, pa.py_buffer(digest.tobytes())]
    )
    rows = np.zeros(len(norm), dtype=np.int64)
    rows[valid] = np.arange(len(present))
    return fixed.take(pa.array(rows, mask=~valid)).cast(pa.binary())
