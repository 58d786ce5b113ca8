"""SimHash, random hyperplanes and p-stable projections against theory.

Collision probabilities are measured over many random pairs and hash functions
and compared with the formulas; the permuted block tables are checked
exhaustively on short fingerprints.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pytest

from lsh_spark.config import hyperplane_probability, pstable_probability
from lsh_spark.simhash import block_bounds, simhash_flat, table_masks
from lsh_spark.vectors import hyperplane_bits, projections, pstable_hashes


def _pair_at_angle(rng, dim, theta):
    u = rng.standard_normal(dim)
    u /= np.linalg.norm(u)
    w = rng.standard_normal(dim)
    w -= w @ u * u
    w /= np.linalg.norm(w)
    return u, math.cos(theta) * u + math.sin(theta) * w


@pytest.mark.parametrize("theta", [0.1, 0.5, 1.0, 2.0])
def test_hyperplane_collision_probability_is_one_minus_theta_over_pi(theta):
    rng = np.random.default_rng(3)
    a, _ = projections(32, 4000, seed=5, kind="hyperplane")
    agree = []
    for _ in range(25):
        u, v = _pair_at_angle(rng, 32, theta)
        bits = hyperplane_bits(np.stack([u, v]), a)
        agree.append(np.mean(bits[0] == bits[1]))
    expected = 1 - theta / math.pi
    assert abs(np.mean(agree) - expected) < 0.01, (np.mean(agree), expected)
    assert hyperplane_probability(math.cos(theta)) == pytest.approx(expected)


@pytest.mark.parametrize("c", [0.25, 1.0, 2.0, 4.0])
def test_pstable_collision_probability_matches_datar_et_al(c):
    rng = np.random.default_rng(4)
    w = 2.0
    a, b = projections(16, 4000, seed=6, kind="pstable", width=w)
    agree = []
    for _ in range(25):
        u = rng.standard_normal(16) * 3
        d = rng.standard_normal(16)
        v = u + c * d / np.linalg.norm(d)
        h = pstable_hashes(np.stack([u, v]), a, b, w)
        agree.append(np.mean(h[0] == h[1]))
    expected = pstable_probability(c, w)
    assert abs(np.mean(agree) - expected) < 0.015, (np.mean(agree), expected)
    # the formula's shape: 1 at distance 0, falling with distance
    assert pstable_probability(0.0, w) == 1.0
    assert pstable_probability(c, w) > pstable_probability(2 * c, w)


def test_simhash_matches_a_bit_by_bit_reference():
    rng = np.random.default_rng(1)
    values = rng.integers(0, 2**63, size=900, dtype=np.uint64)
    values[::7] |= np.uint64(1 << 63)
    offsets = np.array([0, 300, 300, 601, 900])
    fps = simhash_flat(values, offsets).view(np.uint64)
    for i in range(4):
        votes = np.zeros(64)
        for h in values[offsets[i] : offsets[i + 1]]:
            for j in range(64):
                votes[j] += 1 if (int(h) >> j) & 1 else -1
        assert int(fps[i]) == sum(1 << j for j in range(64) if votes[j] > 0)


def test_simhash_bit_agreement_follows_the_angle_of_the_shingle_sets():
    """For sets A, B with |A & B| = s and |A|=|B|=n, the vote vectors' angle is
    arccos(s/n); each fingerprint bit agrees with probability about 1 - theta/pi."""
    rng = np.random.default_rng(2)
    n = 400
    for shared in (360, 300, 200):
        agree = []
        for _ in range(60):
            common = rng.integers(0, 2**63, size=shared, dtype=np.uint64)
            a = np.concatenate([common, rng.integers(0, 2**63, n - shared, dtype=np.uint64)])
            b = np.concatenate([common, rng.integers(0, 2**63, n - shared, dtype=np.uint64)])
            fp = simhash_flat(np.concatenate([a, b]), np.array([0, n, 2 * n])).view(np.uint64)
            agree.append(64 - bin(int(fp[0] ^ fp[1])).count("1"))
        expected = 64 * (1 - math.acos(shared / n) / math.pi)
        assert abs(np.mean(agree) - expected) < 1.5, (shared, np.mean(agree), expected)


def test_term_frequency_weights_count_repeats():
    one = np.array([5, 5, 5, 9], dtype=np.uint64)
    uniform = simhash_flat(np.array([5, 9], dtype=np.uint64), np.array([0, 2]))
    tf = simhash_flat(one, np.array([0, 4]))
    # with tf the shingle 5 outvotes 9 on every bit where they differ
    assert tf[0] == np.int64(5) and uniform[0] != tf[0]


@pytest.mark.parametrize("bits,k,blocks", [(12, 2, 4), (12, 3, 5), (10, 1, 3), (12, 0, 3)])
def test_block_tables_find_every_pair_within_k(bits, k, blocks):
    """Every pair of `bits`-bit fingerprints at distance <= k shares a table key."""
    masks = [m & ((1 << 64) - 1) for m in table_masks(k, blocks, bits)]
    assert len(masks) == math.comb(blocks, k)
    fps = np.arange(1 << bits, dtype=np.uint64)
    flips = [sum(1 << i for i in c) for d in range(1, k + 1) for c in combinations(range(bits), d)]
    for flip in flips:
        other = fps ^ np.uint64(flip)
        found = np.zeros(len(fps), dtype=bool)
        for m in masks:
            found |= (fps & np.uint64(m)) == (other & np.uint64(m))
        assert found.all(), f"pair at flip {flip:b} missed"
    # and a pair at distance k + 1 spread over k + 1 blocks is missed by every table
    if k + 1 <= blocks:
        spread = sum(1 << start for start, _ in block_bounds(blocks, bits)[: k + 1])
        assert not any(
            (np.uint64(0) & np.uint64(m)) == (np.uint64(spread) & np.uint64(m)) for m in masks
        )


def test_bad_block_parameters_name_the_flag():
    with pytest.raises(ValueError, match="--max-hamming: got 4"):
        table_masks(4, 4)
    with pytest.raises(ValueError, match="--simhash-blocks: got 0"):
        block_bounds(0)
