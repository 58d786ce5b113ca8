import pytest

from lsh_spark.config import (
    ConfigError,
    DedupConfig,
    SimHashConfig,
    VectorConfig,
    candidate_probability,
)


def test_defaults_choose_recall_biased_bands():
    cfg = DedupConfig()
    b, r = cfg.band_params()
    assert b * r <= cfg.num_perm
    assert candidate_probability(cfg.threshold, b, r) >= 0.99
    assert cfg.shingle_k == 5


@pytest.mark.parametrize(
    "kwargs, flag",
    [
        ({"threshold": 0.0}, "--threshold"),
        ({"threshold": 1.5}, "--threshold"),
        ({"threshold": float("nan")}, "--threshold"),
        ({"num_perm": 0}, "--num-perm"),
        ({"bands": 30, "rows": 10}, "--bands x --rows"),
        ({"rows": 500}, "--rows"),
        ({"format": "xml"}, "--format"),
        ({"shingle": "sentence"}, "--shingle"),
        ({"k": 0}, "--k"),
        ({"keep": "random"}, "--keep"),
        ({"seed": -1}, "--seed"),
        ({"id_col": "text"}, "--id-col"),
        ({"max_bucket_size": 1}, "--max-bucket-size"),
        ({"max_family_size": 1}, "--max-family-size"),
        ({"max_family_size": 2.5}, "--max-family-size"),
    ],
)
def test_invalid_values_name_the_option(kwargs, flag):
    with pytest.raises(ConfigError) as err:
        DedupConfig(**kwargs)
    message = str(err.value)
    assert message.startswith(flag)
    assert "\n" not in message
    assert "allowed" in message


def test_one_of_bands_rows_derives_the_other():
    assert DedupConfig(num_perm=128, bands=20).band_params() == (20, 6)
    assert DedupConfig(num_perm=128, rows=4).band_params() == (32, 4)


def test_from_mapping_accepts_flag_spelling_and_rejects_unknown_keys():
    cfg = DedupConfig.from_mapping({"num-perm": 64, "threshold": 0.7, "keep": "longest"})
    assert (cfg.num_perm, cfg.threshold, cfg.keep) == (64, 0.7, "longest")
    with pytest.raises(ConfigError, match="unknown key 'treshold'.*allowed keys"):
        DedupConfig.from_mapping({"treshold": 0.7})


def test_report_parameters_include_effective_bands_and_k():
    d = DedupConfig(shingle="char").to_dict()
    assert d["k"] == 5 and d["bands"] and d["rows"]


def test_method_settings_live_in_their_own_configs_with_flat_keys():
    cfg = DedupConfig(method="simhash", max_hamming=4, vector_col="features")
    assert cfg.simhash == SimHashConfig(max_hamming=4) and cfg.simhash.blocks == 7
    assert cfg.vectors == VectorConfig(vector_col="features")
    assert DedupConfig(method="simhash", simhash=SimHashConfig(max_hamming=4)) == DedupConfig(
        method="simhash", max_hamming=4
    )
    assert VectorConfig(max_distance=0.5).width == 2.0
    with pytest.raises(TypeError, match="max_hammin"):
        DedupConfig(max_hammin=4)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_hamming": 33}, "--max-hamming: got 33; allowed: an integer from 0 to 32"),
        (
            {"max_hamming": 3, "simhash_blocks": 3},
            "--simhash-blocks: got 3; allowed: an integer from --max-hamming + 1 (4) to 64",
        ),
        ({"verify_jaccard": "yes"}, "--verify-jaccard: got 'yes'; allowed: true | false"),
        ({"max_distance": 0}, "--max-distance: got 0; allowed: a positive number"),
        (
            {"method": "pstable"},
            "--max-distance: required with --method pstable; allowed: a "
            "positive number (pairs at most this far apart are duplicates)",
        ),
    ],
)
def test_method_config_errors_name_the_flat_flag(kwargs, message):
    with pytest.raises(ConfigError) as err:
        DedupConfig(**kwargs)
    assert str(err.value) == message


def test_report_parameters_keep_the_flat_keys():
    cfg = DedupConfig(method="pstable", max_distance=0.5)
    d = cfg.to_dict()
    assert list(d) == DedupConfig.keys()
    assert d["max_distance"] == 0.5 and d["bucket_width"] == 2.0 and d["max_hamming"] == 3
    assert DedupConfig.from_mapping(cfg.flat()) == cfg
