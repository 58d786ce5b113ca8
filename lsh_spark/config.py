"""Validated, frozen configuration for a dedup run.

Every key of :class:`DedupConfig` can be given three ways, in increasing order
of precedence: its default, a YAML file (``--config conf/FILE.yaml``) whose keys
are the command-line flags without the leading dashes (``num-perm`` or
``num_perm``), and the command-line flag itself.  Validation happens on
construction and raises :class:`ConfigError` with one line naming the key and
what is allowed, so a bad run fails before Spark starts any work.

Example
-------
>>> cfg = DedupConfig(threshold=0.7, num_perm=128)
>>> cfg.band_params()
(17, 4)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

FORMATS = ("jsonl", "parquet", "csv", "text", "warc")
TEXT_UNITS = ("line", "file")
SHINGLE_KINDS = ("word", "char")
KEEP_POLICIES = ("min-id", "longest")
METHODS = ("minhash", "simhash", "hyperplane", "pstable")
VECTOR_METHODS = ("hyperplane", "pstable")
SIMHASH_WEIGHTS = ("tf", "uniform")
# The exact measure each method writes into pairs/.
MEASURES = {"minhash": "jaccard", "simhash": "hamming", "hyperplane": "cosine",
            "pstable": "distance"}
DEFAULT_K = {"word": 5, "char": 5}


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key."""


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class DedupConfig:
    """Parameters of one dedup run (algorithm and input layout).

    Paths (``input``, ``output``) belong to the job, not to this object, so one
    config file can serve many inputs.
    """

    format: str | None = None
    id_col: str = "id"
    text_col: str = "text"
    text_unit: str = "line"
    threshold: float = 0.8
    num_perm: int = 128
    bands: int | None = None
    rows: int | None = None
    target_recall: float = 0.99
    shingle: str = "word"
    k: int | None = None
    seed: int = 1
    keep: str = "min-id"
    max_bucket_size: int = 5000
    block_min_size: int = 32
    max_family_size: int = 3000
    max_text_chars: int = 20_000_000
    max_cc_iterations: int = 64
    checkpoint_dir: str | None = None
    method: str = "minhash"
    max_hamming: int = 3
    simhash_blocks: int | None = None
    simhash_weight: str = "tf"
    verify_jaccard: bool = False
    vector_col: str = "vector"
    max_distance: float | None = None
    bucket_width: float | None = None
    # Filled in by __post_init__: the (b, r) actually used.
    _band_params: tuple[int, int] = field(default=(0, 0), repr=False, compare=False)

    def __post_init__(self) -> None:
        def bad(key: str, allowed: str, value: Any) -> ConfigError:
            return ConfigError(f"{_flag(key)}: got {value!r}; allowed: {allowed}")

        if self.format is not None and self.format not in FORMATS:
            raise bad("format", " | ".join(FORMATS), self.format)
        for key in ("id_col", "text_col"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value:
                raise bad(key, "a non-empty column name", value)
        if self.id_col == self.text_col:
            raise bad("id_col", "a column other than --text-col", self.id_col)
        if self.text_unit not in TEXT_UNITS:
            raise bad("text_unit", " | ".join(TEXT_UNITS), self.text_unit)
        if not _is_number(self.threshold) or not 0 < self.threshold <= 1:
            raise bad("threshold", "a number in (0, 1]", self.threshold)
        if not _is_number(self.target_recall) or not 0 < self.target_recall < 1:
            raise bad("target_recall", "a number in (0, 1)", self.target_recall)
        if not _is_int(self.num_perm) or not 1 <= self.num_perm <= 4096:
            raise bad("num_perm", "an integer from 1 to 4096", self.num_perm)
        for key in ("bands", "rows"):
            value = getattr(self, key)
            if value is not None and (not _is_int(value) or value < 1):
                raise bad(key, "a positive integer", value)
        if self.shingle not in SHINGLE_KINDS:
            raise bad("shingle", " | ".join(SHINGLE_KINDS), self.shingle)
        if self.k is not None and (not _is_int(self.k) or not 1 <= self.k <= 64):
            raise bad("k", "an integer from 1 to 64", self.k)
        if not _is_int(self.seed) or not 0 <= self.seed < 2**31:
            raise bad("seed", "an integer from 0 to 2147483647", self.seed)
        if self.keep not in KEEP_POLICIES:
            raise bad("keep", " | ".join(KEEP_POLICIES), self.keep)
        if not _is_int(self.max_bucket_size) or self.max_bucket_size < 2:
            raise bad("max_bucket_size", "an integer >= 2", self.max_bucket_size)
        if not _is_int(self.block_min_size) or self.block_min_size < 2:
            raise bad("block_min_size", "an integer >= 2", self.block_min_size)
        if not _is_int(self.max_family_size) or self.max_family_size < 2:
            raise bad("max_family_size", "an integer >= 2", self.max_family_size)
        if not _is_int(self.max_text_chars) or self.max_text_chars < 1:
            raise bad("max_text_chars", "a positive integer", self.max_text_chars)
        if not _is_int(self.max_cc_iterations) or self.max_cc_iterations < 1:
            raise bad("max_cc_iterations", "a positive integer", self.max_cc_iterations)

        if self.method not in METHODS:
            raise bad("method", " | ".join(METHODS), self.method)
        if not _is_int(self.max_hamming) or not 0 <= self.max_hamming <= 32:
            raise bad("max_hamming", "an integer from 0 to 32", self.max_hamming)
        if self.simhash_blocks is not None and (
                not _is_int(self.simhash_blocks)
                or not self.max_hamming < self.simhash_blocks <= 64):
            raise bad("simhash_blocks", f"an integer from --max-hamming + 1 "
                      f"({self.max_hamming + 1}) to 64", self.simhash_blocks)
        if self.simhash_weight not in SIMHASH_WEIGHTS:
            raise bad("simhash_weight", " | ".join(SIMHASH_WEIGHTS), self.simhash_weight)
        if not isinstance(self.verify_jaccard, bool):
            raise bad("verify_jaccard", "true | false", self.verify_jaccard)
        if not isinstance(self.vector_col, str) or not self.vector_col:
            raise bad("vector_col", "a non-empty column name", self.vector_col)
        for key in ("max_distance", "bucket_width"):
            value = getattr(self, key)
            if value is not None and (not _is_number(value) or value <= 0):
                raise bad(key, "a positive number", value)
        if self.method == "pstable" and self.max_distance is None:
            raise ConfigError("--max-distance: required with --method pstable; allowed: a "
                              "positive number (pairs at most this far apart are duplicates)")

        b, r = self.bands, self.rows
        if b is None and r is None:
            from lsh_spark.banding import choose_bands

            b, r = choose_bands(self.row_probability(), self.num_perm, self.target_recall)
        elif b is None:
            b = self.num_perm // r
            if b < 1:
                raise bad("rows", f"at most --num-perm ({self.num_perm})", r)
        elif r is None:
            r = self.num_perm // b
            if r < 1:
                raise bad("bands", f"at most --num-perm ({self.num_perm})", b)
        if b * r > self.num_perm:
            raise ConfigError(
                f"--bands x --rows: {b} x {r} = {b * r} exceeds --num-perm {self.num_perm}; "
                "allowed: bands * rows <= num-perm"
            )
        object.__setattr__(self, "_band_params", (int(b), int(r)))

    # -- derived values -------------------------------------------------
    @property
    def measure(self) -> str:
        """The column of ``pairs/`` holding the method's exact measure."""
        return MEASURES[self.method]

    @property
    def blocks(self) -> int:
        """SimHash blocks B (``C(B, max_hamming)`` tables)."""
        return self.simhash_blocks or min(64, self.max_hamming + 3)

    @property
    def width(self) -> float:
        """p-stable bucket width w (default four times --max-distance)."""
        return float(self.bucket_width or 4.0 * (self.max_distance or 1.0))

    def row_probability(self, at: float | None = None) -> float:
        """Probability that one hash (one band row) agrees for a pair at the
        threshold, or at similarity/distance ``at``: the ``s`` of the S-curve."""
        from lsh_spark.vectors import hyperplane_probability, pstable_probability

        if self.method == "hyperplane":
            return hyperplane_probability(self.threshold if at is None else at)
        if self.method == "pstable":
            return pstable_probability(self.max_distance if at is None else at, self.width)
        return self.threshold if at is None else at

    @property
    def shingle_k(self) -> int:
        """The shingle length actually used (``k`` or the kind's default)."""
        return self.k if self.k is not None else DEFAULT_K[self.shingle]

    def band_params(self) -> tuple[int, int]:
        """``(b, r)``: the user's choice, or the recall-biased default."""
        return self._band_params

    def to_dict(self) -> dict[str, Any]:
        """Plain parameters, as written into ``report.json``."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.repr}
        out["k"] = self.shingle_k
        out["bands"], out["rows"] = self.band_params()
        if self.method == "simhash":
            out["simhash_blocks"] = self.blocks
        if self.method == "pstable":
            out["bucket_width"] = self.width
        return out

    # -- construction from files and flags -------------------------------
    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if f.repr]

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], source: str = "config") -> "DedupConfig":
        """Build from a mapping whose keys are flag names (dashes or underscores).

        Unknown keys are an error naming the key and the allowed keys.
        """
        allowed = cls.keys()
        kwargs: dict[str, Any] = {}
        for raw_key, value in values.items():
            key = str(raw_key).replace("-", "_")
            if key not in allowed:
                names = ", ".join(k.replace("_", "-") for k in allowed)
                raise ConfigError(f"{source}: unknown key {raw_key!r}; allowed keys: {names}")
            kwargs[key] = value
        return cls(**kwargs)


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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )
