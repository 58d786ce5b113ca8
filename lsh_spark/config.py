"""Validated, frozen configuration for a dedup run.

Every option is defined once, by :func:`option`, next to its field: type,
default, help text and allowed values.  The jobs' flags (:mod:`lsh_spark.cli`),
the checks of a ``--config`` YAML file and ``docs/options.md`` (written by
``scripts/options_doc.py``) are all derived from these definitions.

An option can be given three ways, in increasing order of precedence: its
default, a YAML file (``--config conf/FILE.yaml``) whose keys are the
command-line flags without the leading dashes (``num-perm`` or ``num_perm``),
and the command-line flag itself.  Validation happens on construction and
raises :class:`ConfigError` with one line naming the flag and what is allowed,
so a bad run fails before Spark starts any work.

The settings of one LSH family live in a small config of their own,
:class:`SimHashConfig` (``cfg.simhash``) and :class:`VectorConfig`
(``cfg.vectors``); their flags, YAML keys and keyword arguments stay flat
(``--max-hamming``, ``max-hamming: 4``, ``DedupConfig(max_hamming=4)``).

The S-curve arithmetic that derives the banding ``(b, r)`` from the threshold
(:func:`choose_bands`, :func:`candidate_probability`, :func:`s_curve` and the
vector families' row probabilities) is defined here as well, so this module
imports nothing of lsh_spark but :mod:`lsh_spark.errors`.

Example
-------
>>> cfg = DedupConfig(threshold=0.7, num_perm=128)
>>> cfg.band_params()
(17, 4)
>>> DedupConfig(method="simhash", max_hamming=4).simhash.blocks
7
>>> DedupConfig(num_perm=0)
Traceback (most recent call last):
...
lsh_spark.config.ConfigError: --num-perm: got 0; allowed: an integer from 1 to 4096
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from lsh_spark.errors import LshSparkError

FORMATS = ("jsonl", "parquet", "csv", "text", "warc")
TEXT_UNITS = ("line", "file")
SHINGLE_KINDS = ("word", "char")
# How normalized text is cut into tokens (lsh_spark.normalize): "script" sets every
# character of a script written without spaces apart, "space" is lsh-spark 0.2.0's.
TOKEN_MODES = ("script", "space")
# What an output or crawl index that records no tokens was cut with: lsh-spark 0.2.0.
LEGACY_TOKENS = "space"
KEEP_POLICIES = ("min-id", "longest")
PAIRS_MODES = ("edges", "all")
METHODS = ("minhash", "simhash", "hyperplane", "pstable")
VECTOR_METHODS = ("hyperplane", "pstable")
SIMHASH_WEIGHTS = ("tf", "uniform")
CRAWL_KEEP_POLICIES = ("oldest", "newest")
# The exact measure each method writes into pairs/.
MEASURES = {
    "minhash": "jaccard",
    "simhash": "hamming",
    "hyperplane": "cosine",
    "pstable": "distance",
}
DEFAULT_K = {"word": 5, "char": 5}

# The groups of DedupConfig's options: one table each in docs/options.md.
GENERAL = "General"
MINHASH = "MinHash and banding"
LIMITS = "Limits"
SIMHASH = "SimHash (--method simhash)"
VECTORS = "Vectors (--method hyperplane, pstable)"
GROUPS = (GENERAL, MINHASH, LIMITS, SIMHASH, VECTORS)


class ConfigError(LshSparkError, ValueError):
    """A configuration value is invalid; the message names the flag."""


def flag(key: str) -> str:
    """The command-line flag of an option key: ``num_perm`` -> ``--num-perm``."""
    return "--" + key.replace("_", "-")


# -- defining options ------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """Allowed values of an option: a test and its wording (errors and docs)."""

    wording: str
    test: Callable[[Any], bool]


def integers(low: int, high: int | None = None) -> Rule:
    """Integers from ``low`` to ``high`` (no upper bound when ``high`` is None)."""
    if high is not None:
        wording = f"an integer from {low} to {high}"
    else:
        wording = "a positive integer" if low == 1 else f"an integer >= {low}"
    return Rule(wording, lambda v: _is_int(v) and v >= low and (high is None or v <= high))


def numbers(wording: str, test: Callable[[float], bool]) -> Rule:
    """Finite numbers (integers included) that pass ``test``."""
    return Rule(wording, lambda v: _is_number(v) and test(v))


def non_empty(wording: str) -> Rule:
    """Non-empty strings."""
    return Rule(wording, lambda v: isinstance(v, str) and v != "")


POSITIVE_NUMBER = numbers("a positive number", lambda v: v > 0)
COLUMN_NAME = non_empty("a non-empty column name")
PATH = non_empty("a path (local, hdfs://, s3a://, ...)")
PATHS = Rule(
    "one or more paths (local, hdfs://, s3a://, ...)",
    lambda v: isinstance(v, list) and bool(v) and all(isinstance(p, str) and p for p in v),
)


@dataclass(frozen=True)
class Option:
    """The one definition of an option, kept in its dataclass field's metadata.

    Attributes
    ----------
    type : type
        ``str``, ``int``, ``float`` or ``bool`` (a flag without a value).
    default : Any
        The value when the option is not given (None: unset).
    help : str
        What the option means, for ``--help`` and the docs.
    choices : tuple of str, optional
        The allowed values, when they are a list.
    rule : Rule, optional
        The allowed values otherwise (a range or a test, with its wording).
    group : str
        The table of docs/options.md holding it (one of :data:`GROUPS`).
    default_text : str, optional
        The default in words, when it is computed (``None`` as a value).
    required : bool
        The job cannot run without it (``--input``).
    yaml : bool
        Whether a ``--config`` file may set it (paths may not).
    """

    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    rule: Rule | None = None
    group: str = GENERAL
    default_text: str | None = None
    required: bool = False
    yaml: bool = True

    @property
    def allowed(self) -> str:
        """The allowed values in words, as error messages and the docs say them."""
        if self.choices is not None:
            return " | ".join(self.choices)
        if self.type is bool:
            return "true | false"
        return self.rule.wording if self.rule is not None else f"a {self.type.__name__}"

    @property
    def default_label(self) -> str:
        """The default in words, for ``--help`` and the docs."""
        if self.default_text is not None:
            return self.default_text
        if self.required:
            return "required"
        if self.type is bool:
            return "true" if self.default else "false"
        return "none" if self.default is None else str(self.default)

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is allowed (None is, for an optional option unset by default)."""
        if value is None:
            return self.default is None and not self.required
        if self.choices is not None:
            return value in self.choices
        if self.type is bool:
            return isinstance(value, bool)
        if self.rule is not None:
            return self.rule.test(value)
        return isinstance(value, self.type)

    def check(self, key: str, value: Any) -> None:
        """Raise a one-line :class:`ConfigError` naming the flag unless ``value`` is allowed."""
        if not self.accepts(value):
            raise ConfigError(f"{flag(key)}: got {value!r}; allowed: {self.allowed}")


def option(
    default: Any,
    help: str,
    *,
    type: type | None = None,
    choices: tuple[str, ...] | None = None,
    check: Rule | None = None,
    group: str = GENERAL,
    default_text: str | None = None,
    required: bool = False,
    yaml: bool = True,
) -> Any:
    """Define an option: a dataclass field whose metadata is its :class:`Option`.

    Parameters
    ----------
    default : Any
        The value when the option is not given; None means unset.
    help : str
        What the option means (``--help`` and docs/options.md).
    type : type, optional
        ``str``, ``int``, ``float`` or ``bool``; by default the type of
        ``default`` (``str`` with ``choices``).  Needed when ``default`` is None.
    choices : tuple of str, optional
        The allowed values, when they are a list.
    check : Rule, optional
        The allowed values otherwise, e.g. ``integers(1, 4096)``.
    group, default_text, required, yaml
        As the attributes of :class:`Option`.

    Returns
    -------
    dataclasses.Field
        The field, to assign in a frozen dataclass deriving from :class:`Checked`.

    Examples
    --------
    >>> @dataclass(frozen=True)
    ... class Sampling(Checked):
    ...     sample: int = option(2000, "documents sampled", check=integers(2, 20000))
    >>> options(Sampling)["sample"].allowed
    'an integer from 2 to 20000'
    >>> Sampling(sample=1)
    Traceback (most recent call last):
    ...
    lsh_spark.config.ConfigError: --sample: got 1; allowed: an integer from 2 to 20000
    """
    if type is None:
        if choices is None and default is None:
            raise TypeError(f"option(None, {help!r}): give its type")
        type = str if choices is not None else default.__class__
    spec = Option(type, default, help, choices, check, group, default_text, required, yaml)
    return field(default=default, metadata={"option": spec})


def section(cls: type) -> Any:
    """A field holding a method's own config; its options keep their flat keys."""
    return field(default_factory=cls, metadata={"section": cls})


def options(cls: type) -> dict[str, Option]:
    """The options of a config class by key, in field order, sections flattened."""
    out: dict[str, Option] = {}
    for f in dataclasses.fields(cls):
        if "section" in f.metadata:
            out.update(options(f.metadata["section"]))
        elif "option" in f.metadata:
            out[f.name] = f.metadata["option"]
    return out


def option_values(obj: Any) -> dict[str, Any]:
    """The option values of a config object by key, sections flattened."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        if "section" in f.metadata:
            out.update(option_values(getattr(obj, f.name)))
        elif "option" in f.metadata:
            out[f.name] = getattr(obj, f.name)
    return out


def check_options(obj: Any) -> None:
    """Check each option field of ``obj`` against its definition; the first bad one raises."""
    for f in dataclasses.fields(obj):
        if "option" in f.metadata:
            f.metadata["option"].check(f.name, getattr(obj, f.name))


def normalize_keys(
    values: Mapping[Any, Any], allowed: Collection[str], source: str
) -> dict[str, Any]:
    """Keys written as flags without dashes (``num-perm`` or ``num_perm``) -> option keys.

    An unknown key is a :class:`ConfigError` naming ``source``, the key and the
    allowed keys.
    """
    out: dict[str, Any] = {}
    for raw_key, value in values.items():
        key = str(raw_key).replace("-", "_")
        if key not in allowed:
            names = ", ".join(k.replace("_", "-") for k in allowed)
            raise ConfigError(f"{source}: unknown key {raw_key!r}; allowed keys: {names}")
        out[key] = value
    return out


class Checked:
    """Base of a frozen dataclass of options: each is checked on construction."""

    def __post_init__(self) -> None:
        check_options(self)


# -- the method configs -------------------------------------------------------
@dataclass(frozen=True)
class SimHashConfig(Checked):
    """Settings of ``--method simhash``: 64-bit fingerprints within a Hamming distance."""

    max_hamming: int = option(
        3,
        "simhash: pairs at most this many bits apart are duplicates",
        check=integers(0, 32),
        group=SIMHASH,
    )
    simhash_blocks: int | None = option(
        None,
        "simhash: blocks B of the permuted block tables, C(B, max-hamming) tables",
        type=int,
        group=SIMHASH,
        default_text="max-hamming + 3",
        check=Rule(
            "an integer from --max-hamming + 1 to 64", lambda v: _is_int(v) and 1 <= v <= 64
        ),
    )
    simhash_weight: str = option(
        "tf",
        "simhash: shingle weight 'tf' (term frequency) or 'uniform'",
        choices=SIMHASH_WEIGHTS,
        group=SIMHASH,
    )
    verify_jaccard: bool = option(
        False,
        "simhash: also compute the exact Jaccard of every pair within --max-hamming "
        "and keep only pairs at or above --threshold",
        group=SIMHASH,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.simhash_blocks is not None and self.simhash_blocks <= self.max_hamming:
            raise ConfigError(
                f"--simhash-blocks: got {self.simhash_blocks!r}; allowed: an integer from "
                f"--max-hamming + 1 ({self.max_hamming + 1}) to 64"
            )

    @property
    def blocks(self) -> int:
        """SimHash blocks B (``C(B, max_hamming)`` tables)."""
        return self.simhash_blocks or min(64, self.max_hamming + 3)


@dataclass(frozen=True)
class VectorConfig(Checked):
    """Settings of ``--method hyperplane`` (cosine) and ``pstable`` (Euclidean distance)."""

    vector_col: str = option(
        "vector",
        "hyperplane/pstable: column holding the vector (array of numbers or an MLlib vector)",
        check=COLUMN_NAME,
        group=VECTORS,
    )
    max_distance: float | None = option(
        None,
        "pstable: pairs at most this Euclidean distance apart are duplicates",
        type=float,
        check=POSITIVE_NUMBER,
        group=VECTORS,
        default_text="none (required with --method pstable)",
    )
    bucket_width: float | None = option(
        None,
        "pstable: bucket width w of floor((a.v + b) / w)",
        type=float,
        check=POSITIVE_NUMBER,
        group=VECTORS,
        default_text="4 x --max-distance",
    )

    @property
    def width(self) -> float:
        """p-stable bucket width w (default four times --max-distance)."""
        return float(self.bucket_width or 4.0 * (self.max_distance or 1.0))


@dataclass(frozen=True)
class CrawlConfig(Checked):
    """The own flags of ``jobs/crawl_dedup.py``: the batch, the index, which copy stays.

    Only ``keep`` may come from a ``--config`` file (there it replaces
    DedupConfig's ``keep``, which the crawl job does not take).
    """

    batch: str | None = option(
        None,
        "the batch: a crawl file or directory (local, hdfs://, s3a://)",
        type=str,
        check=PATH,
        required=True,
        yaml=False,
    )
    index: str | None = option(
        None,
        "index directory; created by the first batch",
        type=str,
        check=PATH,
        required=True,
        yaml=False,
    )
    batch_id: str | None = option(
        None,
        "id recorded in the index",
        type=str,
        check=non_empty("a non-empty id"),
        yaml=False,
        default_text="derived from the batch's directory name and its files' names and sizes",
    )
    keep: str = option(
        "oldest",
        "which copy stays when a batch page duplicates an indexed one: 'oldest' "
        "(by fetch time, then batch order) or 'newest'",
        choices=CRAWL_KEEP_POLICIES,
    )
    max_retries: int = option(
        3,
        "times a batch runs again from the new index version when another batch or "
        "a compaction committed first (0: fail with the conflict)",
        check=integers(0, 100),
    )


# Unnamed index segments and replaced manifests are deleted once this old (a
# batch that read an older version, or wrote a segment not yet committed, keeps
# its files meanwhile); index_compact.py's --retention-hours.
RETENTION_HOURS = 6.0

DECONTAM_MODES = ("containment", "jaccard", "both")


@dataclass(frozen=True)
class DecontamConfig(Checked):
    """The own options of ``jobs/decontaminate.py``: what counts as contamination
    and how the reference collections are read (the input is read as by dedup.py)."""

    mode: str = option(
        "both",
        "what to look for: 'containment' (a reference item's word n-grams found in a "
        "document), 'jaccard' (near-duplicate documents, MinHash/LSH verified by exact "
        "Jaccard >= --threshold) or 'both'",
        choices=DECONTAM_MODES,
    )
    ngram: int = option(13, "words per n-gram of the containment measure", check=integers(1, 64))
    min_containment: float = option(
        0.5,
        "share of a reference item's n-grams a document must contain to be a match",
        check=numbers("a number in (0, 1]", lambda v: 0 < v <= 1),
    )
    reference_id_col: str = option(
        "id", "column holding each reference item's id (unique per reference)", check=COLUMN_NAME
    )
    reference_text_col: str = option(
        "text", "column holding each reference item's text", check=COLUMN_NAME
    )
    reference_format: str | None = option(
        None,
        "format of the references",
        choices=FORMATS,
        default_text="from the file extensions",
    )


# -- the S-curve: (b, r) from the threshold --------------------------------------
# A pair whose hashes agree one by one with probability ``s`` (its Jaccard for
# MinHash; see the row probabilities below for the vector families) agrees on
# all ``r`` rows of a band with ``s**r`` and shares at least one of ``b`` bands
# with ``P(s) = 1 - (1 - s**r)**b`` (Leskovec, Rajaraman and Ullman, *Mining of
# Massive Datasets*, ch. 3.4).  Because every candidate is verified exactly,
# false positives cost only work while false negatives are lost for good, so the
# default choice puts ``P(threshold)`` at or above ``target_recall`` and, among
# such choices, takes the one with the least expected work on dissimilar pairs,
# ``integral_0^t P(s) ds``.  The band keys themselves are :mod:`lsh_spark.banding`'s.
def candidate_probability(s: float, b: int, r: int) -> float:
    """Probability that a pair whose rows agree with probability ``s`` shares at
    least one of ``b`` bands of ``r`` rows.

    >>> round(candidate_probability(0.8, 16, 6), 4)
    0.9923
    """
    return 1.0 - (1.0 - s**r) ** b


def _false_positive_area(t: float, b: int, r: int, steps: int = 400) -> float:
    """``integral_0^t P(s) ds`` by the midpoint rule (work spent below threshold)."""
    h = t / steps
    return sum(candidate_probability((i + 0.5) * h, b, r) for i in range(steps)) * h


def choose_bands(threshold: float, num_perm: int, target_recall: float = 0.99) -> tuple[int, int]:
    """Recall-biased ``(b, r)`` with ``b * r <= num_perm``.

    For every ``r`` the least ``b`` with ``P(threshold) >= target_recall`` is
    found; among those that fit in ``num_perm`` the one with the smallest
    below-threshold area wins (ties: fewer bands).  If no choice reaches the
    target, the one with the highest ``P(threshold)`` is returned.

    >>> choose_bands(0.8, 128, 0.99)
    (16, 6)
    """
    best: tuple[float, int, int] | None = None
    fallback: tuple[float, int, int] | None = None
    for r in range(1, num_perm + 1):
        max_b = num_perm // r
        p_row = threshold**r
        if p_row >= 1.0:
            need = 1
        elif math.log1p(-p_row) == 0.0:  # s**r underflows: no b can reach the target
            need = max_b + 1
        else:
            need = math.ceil(math.log1p(-target_recall) / math.log1p(-p_row))
        if need <= max_b:
            cost = _false_positive_area(threshold, need, r)
            key = (cost, need, r)
            if best is None or key < best:
                best = key
        p_at_t = candidate_probability(threshold, max_b, r)
        if fallback is None or (-p_at_t, max_b, r) < fallback:
            fallback = (-p_at_t, max_b, r)
    chosen = best if best is not None else fallback
    assert chosen is not None
    return chosen[1], chosen[2]


def s_curve(b: int, r: int, points: int = 21) -> list[dict[str, float]]:
    """``[{"s": s, "p": P(s)}, ...]`` on an even grid of ``points`` similarities."""
    return [
        {"s": round(i / (points - 1), 4), "p": candidate_probability(i / (points - 1), b, r)}
        for i in range(points)
    ]


def hyperplane_probability(cosine: float) -> float:
    """Probability that one hyperplane bit agrees for vectors at this cosine:
    ``1 - arccos(cosine) / pi`` (Charikar 2002; :mod:`lsh_spark.vectors`)."""
    return 1.0 - math.acos(max(-1.0, min(1.0, cosine))) / math.pi


def pstable_probability(distance: float, width: float) -> float:
    """Probability that one p-stable hash of bucket width ``width`` agrees for
    vectors at this Euclidean distance (Datar et al. 2004; :mod:`lsh_spark.vectors`)."""
    if distance <= 0:
        return 1.0
    x = width / distance
    phi = 0.5 * math.erfc(x / math.sqrt(2.0))  # Phi(-x)
    return 1.0 - 2.0 * phi - 2.0 / (math.sqrt(2.0 * math.pi) * x) * (1.0 - math.exp(-x * x / 2))


# -- the run's config ---------------------------------------------------------
@dataclass(frozen=True, init=False)
class DedupConfig:
    """Parameters of one dedup run (algorithm and input layout).

    Paths (``input``, ``output``) belong to the job, not to this object, so one
    config file can serve many inputs.  Keyword arguments are the flat keys of
    :meth:`keys` (``max_hamming=4`` goes to ``cfg.simhash``); a whole method
    config can be given too (``simhash=SimHashConfig(max_hamming=4)``).
    """

    format: str | None = option(
        None,
        "input format (.gz and other codecs are read transparently)",
        choices=FORMATS,
        default_text="from the file extensions",
    )
    id_col: str = option(
        "id",
        "column holding a unique document id (when the input has no such column a "
        "deterministic id is derived from file name and content)",
        check=COLUMN_NAME,
    )
    text_col: str = option("text", "column holding the document text", check=COLUMN_NAME)
    schema: str | None = option(
        None,
        "JSON Lines and CSV input: the input's columns as a Spark DDL string, e.g. "
        "'id STRING, text STRING, url STRING' (CSV: in the header's order); saves the pass "
        "over the whole input that infers them. A record that does not fit is rejected "
        "(invalid_record)",
        type=str,
        default_text="inferred from the input",
    )
    text_unit: str = option(
        "line", "for --format text: one document per 'line' or per 'file'", choices=TEXT_UNITS
    )
    threshold: float = option(
        0.8,
        "similarity at or above which two documents are duplicates (Jaccard; the cosine "
        "with --method hyperplane)",
        check=numbers("a number in (0, 1]", lambda v: 0 < v <= 1),
    )
    num_perm: int = option(
        128,
        "MinHash permutations per signature (hash functions with --method hyperplane or pstable)",
        check=integers(1, 4096),
        group=MINHASH,
    )
    bands: int | None = option(
        None,
        "LSH bands b",
        type=int,
        check=integers(1),
        group=MINHASH,
        default_text="chosen so a pair at the threshold becomes a candidate with probability "
        ">= --target-recall at the least cost; with --rows: num-perm // rows",
    )
    rows: int | None = option(
        None,
        "rows per band r; bands x rows must be <= --num-perm",
        type=int,
        check=integers(1),
        group=MINHASH,
        default_text="chosen with --bands",
    )
    target_recall: float = option(
        0.99,
        "candidate probability at the threshold used to choose b and r",
        check=numbers("a number in (0, 1)", lambda v: 0 < v < 1),
        group=MINHASH,
    )
    shingle: str = option(
        "word",
        "shingle kind: 'word' k-grams or 'char' k-grams (short texts, scripts without spaces)",
        choices=SHINGLE_KINDS,
    )
    tokens: str | None = option(
        None,
        "word tokens: 'script' (every character of Han, Hiragana, Katakana, Thai, Lao, "
        "Khmer, Myanmar and Tibetan is a token of its own; other words are runs of letters, "
        "digits and marks) or 'space' (lsh-spark 0.2.0: a run between separators is one "
        "token, a whole clause in those scripts); character shingles always read the text "
        "as 'space' does",
        choices=TOKEN_MODES,
        default_text="script; a crawl batch continues its index with the index's own",
    )
    k: int | None = option(
        None,
        "shingle length in words or characters",
        type=int,
        check=integers(1, 64),
        default_text=", ".join(f"{n} ({kind})" for kind, n in DEFAULT_K.items()),
    )
    seed: int = option(
        1,
        "seed of the shingle hashes and MinHash permutations; same seed, same signatures "
        "on every machine",
        check=integers(0, 2**31 - 1),
    )
    keep: str = option(
        "min-id",
        "which member of a duplicate cluster is kept: 'min-id' (smallest id) or "
        "'longest' (most characters, ties to the smallest id)",
        choices=KEEP_POLICIES,
    )
    keep_by: str | None = option(
        None,
        "input columns that choose the kept member of a duplicate cluster first, in order, "
        "each optionally followed by 'desc' (highest first) or 'asc' (the default), e.g. "
        "'quality desc, fetch_time'; nulls last; ties go to --keep. In YAML also a list",
        type=str,
        check=Rule(
            "comma-separated column names, each optionally followed by asc or desc",
            lambda v: _keep_order(v) is not None,
        ),
        default_text="none (--keep alone)",
    )
    max_bucket_size: int = option(
        5000,
        "buckets with more members get star edges to their smallest id instead of all pairs",
        check=integers(2),
        group=LIMITS,
    )
    block_min_size: int = option(
        32,
        "buckets with at least this many members (and at most --max-bucket-size) are "
        "verified as one block by a matrix product instead of pair by pair",
        check=integers(2),
        group=LIMITS,
    )
    max_family_size: int = option(
        3000,
        "with --pairs all: a family of large buckets (connected blocks) with more members "
        "writes only a spanning forest of its verified pairs to pairs/; the clusters are the "
        "same as when every pair is listed",
        check=integers(2),
        group=LIMITS,
    )
    pairs: str = option(
        "edges",
        "what pairs/ holds: 'edges' (a maximum-similarity spanning forest of each "
        "cluster's verified edges, one row per removed document) or 'all' (every "
        "verified pair, for small corpora; bounded by --max-all-pairs); clusters/ is the same",
        choices=PAIRS_MODES,
    )
    max_all_pairs: int = option(
        10_000_000,
        "with --pairs all: refuse to run when the estimated number of pairs (an upper bound "
        "counted before verification) exceeds this",
        check=integers(1),
        group=LIMITS,
    )
    max_text_chars: int = option(
        20_000_000,
        "documents longer than this many characters are rejected",
        check=integers(1),
        group=LIMITS,
    )
    max_record_bytes: int = option(
        64 << 20,
        "WARC input: a page whose record payload is larger than this many bytes is rejected "
        "(too_large) without being read; a task's memory is bounded by this, not by the file",
        check=integers(1),
        group=LIMITS,
    )
    max_cc_iterations: int = option(
        64,
        "rounds of the connected-components loop per run: on reaching it the run stops with "
        "an error (never a partial answer) and its last round stays saved (in "
        "--checkpoint-dir, or in a stage-by-stage output), so running again continues from it",
        check=integers(1),
        group=LIMITS,
    )
    checkpoint_dir: str | None = option(
        None,
        "reliable checkpoint directory for clustering (HDFS or an object store on a cluster)",
        type=str,
        check=PATH,
        default_text="a temporary folder inside --output, removed at the end",
    )
    method: str = option(
        "minhash",
        "LSH family: 'minhash' (Jaccard), 'simhash' (Hamming distance of 64-bit "
        "fingerprints), 'hyperplane' (cosine of --vector-col), 'pstable' (Euclidean distance "
        "of --vector-col)",
        choices=METHODS,
    )
    simhash: SimHashConfig = section(SimHashConfig)
    vectors: VectorConfig = section(VectorConfig)
    # Set on construction: the (b, r) actually used.
    _band_params: tuple[int, int] = field(default=(0, 0), init=False, repr=False, compare=False)

    def __init__(self, **values: Any) -> None:
        for f in dataclasses.fields(self):
            if "section" in f.metadata:
                cls = f.metadata["section"]
                own = {key: values.pop(key) for key in options(cls) if key in values}
                given = values.pop(f.name, None)
                value = cls(**own) if given is None else dataclasses.replace(given, **own)
            elif f.init:
                value = values.pop(f.name, f.default)
            else:
                continue
            object.__setattr__(self, f.name, value)
        if values:
            raise TypeError(f"DedupConfig() got unexpected keyword arguments: {', '.join(values)}")
        self._validate()

    def _validate(self) -> None:
        """Each option, then the checks across options; sets the (b, r) used."""
        check_options(self)
        if self.id_col == self.text_col:
            raise ConfigError(
                f"--id-col: got {self.id_col!r}; allowed: a column other than --text-col"
            )
        if self.shingle == "char" and self.tokens not in (None, LEGACY_TOKENS):
            raise ConfigError(
                f"--tokens: got {self.tokens!r} with --shingle char; allowed: "
                f"{LEGACY_TOKENS} or unset (character k-grams read the text unsplit)"
            )
        if self.method == "pstable" and self.vectors.max_distance is None:
            raise ConfigError(
                "--max-distance: required with --method pstable; allowed: a "
                "positive number (pairs at most this far apart are duplicates)"
            )
        if isinstance(self.keep_by, list):  # YAML's list form, as one string
            object.__setattr__(self, "keep_by", ", ".join(self.keep_by))
        object.__setattr__(self, "_band_params", self._choose_bands())

    def _choose_bands(self) -> tuple[int, int]:
        """The (b, r) given, the one derived from the other, or the recall-biased choice."""
        b, r = self.bands, self.rows
        if b is None and r is None:
            b, r = choose_bands(self.row_probability(), self.num_perm, self.target_recall)
        elif b is None:
            b = self.num_perm // r
            if b < 1:
                raise ConfigError(
                    f"--rows: got {r!r}; allowed: at most --num-perm ({self.num_perm})"
                )
        elif r is None:
            r = self.num_perm // b
            if r < 1:
                raise ConfigError(
                    f"--bands: got {b!r}; allowed: at most --num-perm ({self.num_perm})"
                )
        if b * r > self.num_perm:
            raise ConfigError(
                f"--bands x --rows: {b} x {r} = {b * r} exceeds --num-perm {self.num_perm}; "
                "allowed: bands * rows <= num-perm"
            )
        return int(b), int(r)

    # -- derived values -------------------------------------------------
    @property
    def measure(self) -> str:
        """The column of ``pairs/`` holding the method's exact measure."""
        return MEASURES[self.method]

    def row_probability(self, at: float | None = None) -> float:
        """Probability that one hash (one band row) agrees for a pair at the
        threshold, or at similarity/distance ``at``: the ``s`` of the S-curve."""
        if self.method == "hyperplane":
            return hyperplane_probability(self.threshold if at is None else at)
        if self.method == "pstable":
            distance = self.vectors.max_distance if at is None else at
            return pstable_probability(distance, self.vectors.width)
        return self.threshold if at is None else at

    @property
    def shingle_k(self) -> int:
        """The shingle length actually used (``k`` or the kind's default)."""
        return self.k if self.k is not None else DEFAULT_K[self.shingle]

    @property
    def token_mode(self) -> str:
        """How this run cuts normalized text into tokens (:data:`TOKEN_MODES`):
        ``--tokens``, ``script`` when unset; ``space`` for character shingles."""
        if self.shingle == "char":
            return LEGACY_TOKENS
        return self.tokens if self.tokens is not None else "script"

    @property
    def keep_order(self) -> list[tuple[str, bool]]:
        """``--keep-by`` as ``[(column, descending), ...]`` (empty when unset).

        >>> DedupConfig(keep_by="quality desc, fetch_time").keep_order
        [('quality', True), ('fetch_time', False)]
        """
        return _keep_order(self.keep_by) or []

    def band_params(self) -> tuple[int, int]:
        """``(b, r)``: the user's choice, or the recall-biased default."""
        return self._band_params

    def flat(self) -> dict[str, Any]:
        """The values as given, under their flat keys (what :meth:`from_mapping` takes)."""
        return option_values(self)

    def to_dict(self) -> dict[str, Any]:
        """Plain parameters with the values actually used, as written into ``report.json``."""
        out = self.flat()
        out["k"] = self.shingle_k
        out["tokens"] = self.token_mode
        out["bands"], out["rows"] = self.band_params()
        if self.method == "simhash":
            out["simhash_blocks"] = self.simhash.blocks
        if self.method == "pstable":
            out["bucket_width"] = self.vectors.width
        return out

    # -- construction from files and flags -------------------------------
    @classmethod
    def keys(cls) -> list[str]:
        """The flat option keys, in field order (flags without the dashes)."""
        return list(options(cls))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], source: str = "config") -> DedupConfig:
        """Build from a mapping whose keys are flag names (dashes or underscores).

        Unknown keys are an error naming the key and the allowed keys.
        """
        return cls(**normalize_keys(values, cls.keys(), source))

    @classmethod
    def from_yaml(cls, path: str, **overrides: Any) -> DedupConfig:
        """Build from a YAML file as ``--config`` reads it (keys are the flags
        without dashes: ``num-perm`` or ``num_perm``); ``overrides`` (flat keys)
        win over the file, as flags do: ``DedupConfig.from_yaml("conf/local.yaml",
        threshold=0.7)``.  Unknown keys and bad values raise :class:`ConfigError`
        naming the file (or ``overrides``), the key and what is allowed.
        """
        values = normalize_keys(load_yaml(path), cls.keys(), path)
        return cls(**{**values, **normalize_keys(overrides, cls.keys(), "overrides")})


def recorded_tokens(params: Mapping[str, Any]) -> str:
    """The tokens an output's or index's recorded parameters were cut with
    (:data:`LEGACY_TOKENS` where they name none: written by lsh-spark 0.2.0)."""
    return params.get("tokens") or LEGACY_TOKENS


def load_yaml(path: str) -> dict[str, Any]:
    """Read a YAML config file into a flat mapping (errors name the file)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError(f"--config: file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config: {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config: {path} must hold a mapping of key: value")
    return data


def _keep_order(value: Any) -> list[tuple[str, bool]] | None:
    """``"a desc, b"`` (or ``["a desc", "b"]``) -> ``[("a", True), ("b", False)]``;
    None when it is not that form."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        return None
    out = []
    for item in items:
        words = item.split() if isinstance(item, str) else []
        if not 1 <= len(words) <= 2 or (
            len(words) == 2 and words[1].lower() not in ("asc", "desc")
        ):
            return None
        out.append((words[0], len(words) == 2 and words[1].lower() == "desc"))
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )
