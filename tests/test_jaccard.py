import random
import shutil

import numpy as np
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lsh_spark import block_matrix as M
from lsh_spark import blocks as B
from lsh_spark import jaccard as V
from lsh_spark.caching import cached
from lsh_spark.jaccard import verify_pairs
from lsh_spark.session import local_frame


def test_exact_jaccard_and_threshold(spark):
    sh = local_frame(
        spark,
        [
            ("a", [1, 2, 3, 4, 5]),
            ("b", [1, 2, 3, 4, 6]),
            ("c", [1, 2, 3, 4, 5]),
            ("d", [7, 8]),
            ("e", [1, 2, 3, 4]),
        ],
        "id string, shingles array<bigint>",
    )
    cands = local_frame(
        spark,
        [("a", "b"), ("a", "c"), ("a", "d"), ("a", "e"), ("b", "e")],
        "id_a string, id_b string",
    )
    got = verify_pairs(cands, sh, threshold=0.66)
    schema = T.StructType(
        [
            T.StructField("id_a", T.StringType()),
            T.StructField("id_b", T.StringType()),
            T.StructField("jaccard", T.DoubleType()),
        ]
    )
    want = local_frame(
        spark, [("a", "b", 4 / 6), ("a", "c", 1.0), ("a", "e", 0.8), ("b", "e", 0.8)], schema
    )
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def test_pair_exactly_at_threshold_is_kept(spark):
    sh = local_frame(
        spark, [("a", [1, 2, 3, 4, 5]), ("b", [1, 2, 3, 4])], "id string, shingles array<bigint>"
    )
    cands = local_frame(spark, [("a", "b")], "id_a string, id_b string")
    assert verify_pairs(cands, sh, threshold=0.8).count() == 1
    assert verify_pairs(cands, sh, threshold=0.8000001).count() == 0


def test_large_arrays(spark):
    n = 200_000
    sh = local_frame(
        spark,
        [("a", list(range(n))), ("b", list(range(n // 10, n + n // 10)))],
        "id string, shingles array<bigint>",
    )
    cands = local_frame(spark, [("a", "b")], "id_a string, id_b string")
    j = verify_pairs(cands, sh, threshold=0.5).first().jaccard
    assert j == (n - n // 10) / (n + n // 10)


def test_broadcast_and_shuffle_joins_agree(spark):
    sh = local_frame(
        spark,
        [(f"d{i}", list(range(i, i + 20))) for i in range(30)],
        "id string, shingles array<bigint>",
    )
    cands = local_frame(
        spark,
        [(f"d{i}", f"d{j}") for i in range(30) for j in range(i + 1, 30)],
        "id_a string, id_b string",
    )
    a = verify_pairs(cands, sh, 0.5, broadcast=False)
    b = verify_pairs(cands, sh, 0.5, broadcast=True)
    assert a.count() > 0
    assert_df_equality(a, b, ignore_row_order=True)


def test_pair_jaccards_equal_python_sets_and_spark(spark):
    # The numpy pair kernel against set arithmetic and against Spark's own
    # array_intersect Jaccard (the same doubles, not just close ones): sets of
    # very different sizes, disjoint and identical sets, negative hashes,
    # one-element sets, and integer ids.
    import pyarrow as pa
    from pyspark.sql import functions as F

    rng = np.random.default_rng(5)
    pool = rng.integers(-(2**63), 2**63 - 1, size=3000, dtype=np.int64)
    sets = [
        np.unique(rng.choice(pool, size=int(rng.integers(1, 400)), replace=False))
        for _ in range(60)
    ]
    sets += [sets[0].copy(), np.array([7]), np.array([7]), np.array([-5, 9])]
    pairs = [
        (i, j)
        for i in range(len(sets))
        for j in range(len(sets))
        if i < j and (rng.random() < 0.2 or j >= 60)
    ]
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([i for i, _ in pairs], pa.int64()),
            pa.array([j for _, j in pairs], pa.int64()),
            pa.array([sets[i].tolist() for i, _ in pairs], pa.list_(pa.int64())),
            pa.array([sets[j].tolist() for _, j in pairs], pa.list_(pa.int64())),
        ],
        names=["id_a", "id_b", "shingles_a", "shingles_b"],
    )
    got = V.pair_jaccards(batch, 0.0)
    # Packed sets (dedup.py's shingles/) give the same rows.
    from lsh_spark.shingle import pack_shingles

    packed = pa.RecordBatch.from_arrays(
        batch.columns[:2] + [pack_shingles(batch.column(2)), pack_shingles(batch.column(3))],
        names=batch.schema.names,
    )
    assert V.pair_jaccards(packed, 0.0).equals(got)
    want = {}
    for i, j in pairs:
        a, b = set(sets[i].tolist()), set(sets[j].tolist())
        want[(i, j)] = len(a & b) / (len(a) + len(b) - len(a & b))
    assert (
        dict(
            zip(
                zip(got.column(0).to_pylist(), got.column(1).to_pylist(), strict=False),
                got.column(2).to_pylist(),
                strict=False,
            )
        )
        == want
    )
    assert max(want.values()) == 1.0 and min(want.values()) == 0.0
    # The threshold keeps exactly the rows at or above it.
    some = V.pair_jaccards(batch, 0.3)
    assert sorted(some.column(2).to_pylist()) == sorted(v for v in want.values() if v >= 0.3)
    # And Spark's expression gives the same doubles on the same sets.
    sh = local_frame(
        spark, [(k, s.tolist()) for k, s in enumerate(sets)], "id long, shingles array<bigint>"
    )
    cands = local_frame(spark, pairs, "id_a long, id_b long")
    spark_j = {
        (r.id_a, r.id_b): r.j
        for r in V.join_sides(cands, sh, "shingles")
        .select("id_a", "id_b", V.jaccard(F.col("shingles_a"), F.col("shingles_b")).alias("j"))
        .collect()
    }
    assert spark_j == want
    via_job = {(r.id_a, r.id_b): r.jaccard for r in verify_pairs(cands, sh, 0.3).collect()}
    assert via_job == {k: v for k, v in want.items() if v >= 0.3}


# -- block verification ------------------------------------------------------------
def _brute_block(sets, threshold, covered=None):
    out = {}
    for i in range(len(sets)):
        for j in range(i + 1, len(sets)):
            if covered and covered[i] & covered[j]:
                continue
            inter = len(sets[i] & sets[j])
            jac = inter / (len(sets[i]) + len(sets[j]) - inter)
            if jac >= threshold:
                out[(i, j)] = jac
    return out


def _family(seed, n=60):
    rng = np.random.default_rng(seed)
    base = rng.integers(-(2**63), 2**63 - 1, 200).tolist()
    sets = [
        set(x for x in base if rng.random() < 0.92)
        | set(rng.integers(-(2**63), 2**63 - 1, int(rng.integers(1, 30))).tolist())
        for _ in range(n)
    ]
    sets += [{5}, {5}, {5, 6}]  # tiny members: J = 1 and J = 0.5
    covered = [set(rng.choice(8, int(rng.integers(0, 3)), replace=False).tolist()) for _ in sets]
    return sets, covered


def _shingle_frame(spark, ids, sets):
    """``(id, shingles)``: each id's set, sorted, as the shingle stage writes it."""
    return local_frame(
        spark,
        [(i, sorted(s)) for i, s in zip(ids, sets, strict=True)],
        "id string, shingles array<bigint>",
    )


def _flat(sets):
    return (
        np.concatenate([np.array(sorted(s), dtype=np.int64) for s in sets]),
        np.array([len(s) for s in sets]),
    )


@pytest.mark.parametrize("cells", [1 << 22, 37, 1000])
def test_block_pairs_equal_brute_force(monkeypatch, cells):
    """Matrix-product Jaccard equals set arithmetic, whatever the chunking."""
    monkeypatch.setattr(M, "BLOCK_CELLS", cells)
    sets, covered = _family(3)
    values, lengths = _flat(sets)
    for cov in (None, covered):
        i, j, s = M.block_pairs(
            values, lengths, 0.5, None if cov is None else _flat([c or set() for c in cov])
        )
        got = dict(zip(zip(i.tolist(), j.tolist(), strict=False), s.tolist(), strict=False))
        want = _brute_block(sets, 0.5, cov)
        assert len(want) > 100
        assert got == want  # float64 division: bit-identical to Spark's
    # required: only pairs whose members share a key.
    i, j, s = M.block_pairs(values, lengths, 0.5, required=_flat([c or set() for c in covered]))
    got = dict(zip(zip(i.tolist(), j.tolist(), strict=False), s.tolist(), strict=False))
    full = _brute_block(sets, 0.5)
    want = {p: v for p, v in full.items() if covered[p[0]] & covered[p[1]]}
    assert got == want and 0 < len(want) < len(full)


@pytest.mark.parametrize("n,parts", [(1, 1), (2, 3), (7, 7), (40, 3), (500, 13)])
def test_row_ranges_split_the_pairs_evenly(n, parts):
    bounds = M.row_ranges(n, parts)
    assert bounds[0] == 0 and bounds[-1] == n and np.all(np.diff(bounds) >= 1)
    assert len(bounds) == min(parts, n) + 1
    share = [
        sum(n - 1 - i for i in range(a, b)) for a, b in zip(bounds[:-1], bounds[1:], strict=False)
    ]
    assert sum(share) == n * (n - 1) // 2
    if n >= 40:  # even shares, up to one row's pairs
        assert max(share) - min(share) <= n


@pytest.mark.parametrize("seed", [3, 4])
def test_block_forest_connects_what_block_pairs_connect(seed):
    """A subset of the block's pairs with the same values and components, no cycle.

    The tiny members and a second family appended to the first are not reached
    by member 0, so their rows are computed too; shuffled, member 0 is someone else.
    """
    from reference import reference_components

    sets, covered = _family(seed, n=50)
    other, _ = _family(seed + 10, n=20)
    sets += other[:20]
    covered += [{9}] * 20
    rng = np.random.default_rng(seed)
    for order in (np.arange(len(sets)), rng.permutation(len(sets))):
        s = [sets[k] for k in order]
        keys = _flat([covered[k] or set() for k in order])
        values, lengths = _flat(s)
        n = len(s)
        for kw in ({}, {"covered": keys}, {"required": keys}):
            i, j, jac = M.block_pairs(values, lengths, 0.5, **kw)
            fi, fj, fjac = M.block_forest(values, lengths, 0.5, **kw)
            full = dict(zip(zip(i.tolist(), j.tolist(), strict=False), jac.tolist(), strict=False))
            got = dict(
                zip(zip(fi.tolist(), fj.tolist(), strict=False), fjac.tolist(), strict=False)
            )
            assert len(got) == len(fi) and all(full[p] == v for p, v in got.items())
            want = reference_components(range(n), list(zip(i.tolist(), j.tolist(), strict=False)))
            assert (
                reference_components(range(n), list(zip(fi.tolist(), fj.tolist(), strict=False)))
                == want
            )
            assert len(fi) == n - len({root for root, _ in want.values()}) < len(full) / 3
            # Shared among tasks: no pair twice, the same components together.
            for parts in (2, 7, 200):
                shares = [
                    M.block_forest(values, lengths, 0.5, share=(k, parts), **kw)
                    for k in range(parts)
                ]
                pairs = [
                    p for si, sj, _ in shares for p in zip(si.tolist(), sj.tolist(), strict=False)
                ]
                assert len(pairs) == len(set(pairs)) and set(pairs) <= set(full)
                assert all(len(si) < n for si, _, _ in shares)
                assert reference_components(range(n), pairs) == want


@pytest.mark.parametrize("seed", [3, 4])
def test_block_forest_folded_piece_by_piece_is_the_forest_of_every_pair(monkeypatch, seed):
    """The forest is folded in as the pairs are computed, BLOCK_CELLS cells at a
    time: with pieces of a few rows it is the very forest (same pairs, same
    order, same Jaccard) that one piece holding every pair gives, whole or
    shared among tasks."""
    sets, covered = _family(seed, n=50)
    other, _ = _family(seed + 10, n=20)
    order = np.random.default_rng(seed).permutation(70)
    values, lengths = _flat([(sets + other[:20])[k] for k in order])
    keys = _flat([((covered + [{9}] * 20)[k] or set()) for k in order])
    for kw in ({}, {"covered": keys}, {"share": (1, 3)}):
        monkeypatch.setattr(M, "BLOCK_CELLS", 1 << 22)  # one piece
        whole = M.block_forest(values, lengths, 0.5, **kw)
        monkeypatch.setattr(M, "BLOCK_CELLS", 150)  # two rows of 70 members a piece
        pieces = M.block_forest(values, lengths, 0.5, **kw)
        assert len(whole[0]) > 10
        for a, b in zip(whole, pieces, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("n,rows,parts", [(100, 30, 4), (100, 3, 5), (100, 0, 3), (50, 50, 7)])
def test_row_ranges_of_the_first_rows(n, rows, parts):
    """Only the first ``rows`` rows are shared out, evenly by their pairs."""
    bounds = M.row_ranges(n, parts, rows=rows)
    assert bounds[0] == 0 and bounds[-1] == rows and np.all(np.diff(bounds) >= 0)
    assert len(bounds) == max(1, min(parts, rows)) + 1
    if rows >= parts:
        share = [
            sum(n - 1 - i for i in range(a, b))
            for a, b in zip(bounds[:-1], bounds[1:], strict=False)
        ]
        assert min(share) > 0 and max(share) - min(share) <= n


@pytest.mark.parametrize("parts,cells", [(2, 1 << 22), (5, 1 << 22), (63, 1 << 22), (5, 37)])
def test_block_pairs_by_row_range_add_up_to_the_whole_block(monkeypatch, parts, cells):
    """Shares of a block, with or without chunked columns, make exactly the whole block."""
    monkeypatch.setattr(M, "BLOCK_CELLS", cells)
    sets, covered = _family(5, n=60)
    values, lengths = _flat(sets)
    keys = _flat([c or set() for c in covered])
    bounds = M.row_ranges(len(sets), parts)
    for kw in ({}, {"covered": keys}, {"required": keys}):
        whole = M.block_pairs(values, lengths, 0.5, **kw)
        pieces = [
            M.block_pairs(values, lengths, 0.5, row_range=(int(a), int(b)), **kw)
            for a, b in zip(bounds[:-1], bounds[1:], strict=False)
        ]
        assert len(whole[0]) > 100
        for k in range(3):
            assert np.array_equal(whole[k], np.concatenate([p[k] for p in pieces]))
        for (a, b), (i, j, _) in zip(
            zip(bounds[:-1], bounds[1:], strict=False), pieces, strict=False
        ):
            assert np.all((i >= a) & (i < b) & (j > i))


@pytest.mark.heavy
@pytest.mark.parametrize(
    "max_group,one_task,pairs_per_task,packed",
    [
        (1000, True, 1 << 20, False),
        (1000, False, 1 << 20, False),
        (30, True, 1 << 20, False),
        (1000, True, 100, False),
        (30, True, 60, False),
        (1000, True, 1 << 20, True),
        (30, True, 60, True),
    ],
)
def test_blocks_and_pair_path_give_identical_pairs(
    spark, monkeypatch, max_group, one_task, pairs_per_task, packed
):
    """Two overlapping blocks plus pair rows: every pair once, same Jaccard as pair by pair.

    With ``max_group`` 1000 the two blocks are verified as one merged group;
    with 30 the group (40 members) is too large and each block is verified alone.
    ``one_task`` False groups the blocks with the distributed connected components.
    A small ``pairs_per_task`` splits every group's rows over several tasks.
    ``packed``: the sets as dedup.py's shingles/ holds them, one binary value each.
    """
    import lsh_spark.components as C

    monkeypatch.setattr(B, "PAIRS_PER_TASK", pairs_per_task)
    if not one_task:
        monkeypatch.setattr(C, "LOCAL_FINISH_EDGES", 0)
    sets, _ = _family(4, n=40)
    ids = [f"d{i:03d}" for i in range(len(sets))]
    sh = _shingle_frame(spark, ids, sets)
    packed_sh = local_frame(
        spark,
        [(i, np.array(sorted(s), dtype="<i8").tobytes()) for i, s in zip(ids, sets, strict=False)],
        "id string, shingles binary",
    )
    blocks = local_frame(
        spark, [(11, ids[:30]), (7, ids[10:40])], "block bigint, ids array<string>"
    )
    cands = local_frame(
        spark,
        [(a, b) for a in ids for b in ids if a < b and (a >= "d035" or b >= "d038")],
        "id_a string, id_b string",
    )
    memberships = B.block_memberships(blocks)
    rest = B.drop_block_pairs(cands, memberships)
    used = packed_sh if packed else sh
    got = (
        V.verify_pairs(rest, used, 0.5)
        .unionByName(B.verify_blocks(blocks, memberships, used, 0.5, max_group))
        .collect()
    )
    keys = [(r.id_a, r.id_b) for r in got]
    assert len(keys) == len(set(keys)), "a pair was emitted twice"
    inside = {(a, b) for blk in (ids[:30], ids[10:40]) for a in blk for b in blk if a < b}
    everything = local_frame(
        spark,
        sorted(inside | {(r.id_a, r.id_b) for r in cands.collect()}),
        "id_a string, id_b string",
    )
    want = {(r.id_a, r.id_b): r.jaccard for r in V.verify_pairs(everything, sh, 0.5).collect()}
    assert {(r.id_a, r.id_b): r.jaccard for r in got} == want
    assert len(want) > 200


@pytest.mark.heavy
@pytest.mark.parametrize("id_type", ["string", "bigint"])
def test_block_groups_in_one_task_equal_the_distributed_ones(spark, monkeypatch, id_type):
    """The one-task block groups (numpy) give the rows of the joins and
    aggregations over distributed connected components: merged families,
    families split into their blocks, bounded ones, smallest ids in Spark's
    order (non-ASCII strings order bytewise; integers numerically)."""
    import lsh_spark.components as C

    rng = random.Random(11)
    alphabet = ["a", "Z", "é", "中", "😀", "0", "ß"]
    if id_type == "string":
        ids = sorted(
            {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4))) for _ in range(400)}
        )
    else:
        ids = sorted(rng.sample(range(-(10**12), 10**12), 400))
    rng.shuffle(ids)
    # Families: chains of overlapping blocks of several sizes, plus lone blocks;
    # block keys are random longs, negative ones included.
    rows, pos = [], 0
    for family in [3, 1, 5, 2, 1, 4, 1]:
        start = pos
        for _ in range(family):
            size = rng.randint(3, 25)
            lo = rng.randint(start, max(start, pos - 2))
            rows.append((rng.randint(-(2**62), 2**62), ids[lo : lo + size]))
            pos = max(pos, lo + size)
        pos += 1
    blocks = local_frame(spark, rows, f"block bigint, ids array<{id_type}>")
    memberships = B.block_memberships(blocks).persist()
    try:
        for max_size, max_family in [(1000, None), (10, None), (10, 25), (20, 8)]:
            one = B.block_groups(blocks, memberships, max_size, max_family_size=max_family)
            with monkeypatch.context() as m:
                m.setattr(C, "LOCAL_FINISH_EDGES", 0)
                dist = B.block_groups(blocks, memberships, max_size, max_family_size=max_family)
                want = sorted(tuple(r) for r in dist.collect())
            got = sorted(tuple(r) for r in one.collect())
            assert [(f.name, f.dataType) for f in one.schema] == [
                (f.name, f.dataType) for f in dist.schema
            ]
            assert got == want
            assert len(got) > 100 and len({r[1] for r in got}) > 3
            # Families above max_size members are split into their blocks, the others merged.
            assert {r[2] for r in got} == ({True} if max_size == 1000 else {True, False})
            assert {r[5] for r in got} == ({False} if max_family is None else {True, False})
    finally:
        memberships.unpersist()


@pytest.mark.heavy
@pytest.mark.parametrize(
    "max_group,pairs_per_task", [(1000, 1 << 20), (1000, 100), (30, 1 << 20), (30, 100)]
)
def test_family_above_the_bound_writes_a_spanning_forest(
    spark, monkeypatch, max_group, pairs_per_task
):
    """A family of more than max_family_size members: a subset of its verified
    pairs with the same Jaccard values and the same connected components.

    Merged in one task, merged and shared among tasks, split into its blocks,
    or split into blocks each shared among tasks.
    """
    from reference import reference_components

    monkeypatch.setattr(B, "PAIRS_PER_TASK", pairs_per_task)
    monkeypatch.setattr(B, "FOREST_PAIRS_PER_TASK", pairs_per_task)
    sets, _ = _family(6, n=40)
    ids = [f"d{i:03d}" for i in range(len(sets))]
    sh = _shingle_frame(spark, ids, sets)
    # Two overlapping blocks (one family of 40) and a separate one of 3.
    blocks = local_frame(
        spark, [(11, ids[:30]), (7, ids[10:40]), (3, ids[40:])], "block bigint, ids array<string>"
    )
    memberships = B.block_memberships(blocks)
    full = {
        (r.id_a, r.id_b): r.jaccard
        for r in B.verify_blocks(blocks, memberships, sh, 0.5, max_group).collect()
    }
    at_bound = {
        (r.id_a, r.id_b): r.jaccard
        for r in B.verify_blocks(
            blocks, memberships, sh, 0.5, max_group, max_family_size=40
        ).collect()
    }
    assert at_bound == full  # 40 members is not above a bound of 40
    groups = B.block_groups(blocks, memberships, max_group, max_family_size=39)
    got = {
        (r.id_a, r.id_b): r.jaccard
        for r in B.verify_blocks(blocks, memberships, sh, 0.5, max_group, groups=groups).collect()
    }
    assert set(got) < set(full) and all(full[p] == v for p, v in got.items())
    # At most one tree edge per member in each of the family's tasks.
    tasks = B.block_tasks(groups).filter("family = 'd000'").collect()
    assert (len(tasks) > 2) == (pairs_per_task == 100)
    forest = [p for p in got if p[0] < "d040"]
    assert len(forest) <= sum(t.n - 1 for t in tasks)
    assert len(forest) < len([p for p in full if p[0] < "d040"]) / 2
    # The small block is listed in full; the clusters are the same.
    assert {p for p in got if p[0] >= "d040"} == {p for p in full if p[0] >= "d040"}
    assert reference_components(ids, list(got)) == reference_components(ids, list(full))
    work = B.block_work(groups)
    assert work["forest_families"] == 1 and work["forest_family_documents"] == 40
    assert work["largest_forest_families"] == [{"smallest_id": "d000", "size": 40}]


@pytest.mark.heavy
@pytest.mark.parametrize("pairs_per_task", [1 << 20, 60])
def test_block_tasks_give_copies_the_pairs_the_joins_give(spark, monkeypatch, pairs_per_task):
    # Members with identical texts: the block tasks expand each pair to every
    # copy (expand_copies) and must give what DuplicateGroups.expand gives by
    # joins: the same pairs, ordered id_a < id_b, with the same Jaccard.
    from lsh_spark.buckets import DuplicateGroups

    monkeypatch.setattr(B, "PAIRS_PER_TASK", pairs_per_task)
    sets, _ = _family(4, n=30)
    ids = [f"d{i:03d}" for i in range(len(sets))]
    # Copies sort before, between and after their representative's id.
    extra = {"d003": ["a003", "d003x"], "d010": ["d010a"], "d017": ["c017", "e017", "z017"]}
    docs = [(i, bytes([k % 256, k // 256]) * 8) for k, i in enumerate(ids)]
    docs += [(c, dict(docs)[rep]) for rep, cs in extra.items() for c in cs]
    sigs = local_frame(spark, docs, "id string, text_hash binary")
    dups = DuplicateGroups(sigs, max_group=1000)
    assert dups.stats()["expanded_documents"] == 9
    sh = _shingle_frame(spark, ids, sets)
    blocks = local_frame(spark, [(5, ids)], "block bigint, ids array<string>")
    memberships = B.block_memberships(blocks)
    # Each verified once: the assertions below read them four and two times.
    with (
        cached(
            B.verify_blocks(blocks, memberships, sh, 0.5, 1000, copies=dups.copies(1000))
        ) as got,
        cached(B.verify_blocks(blocks, memberships, sh, 0.5, 1000)) as plain,
    ):
        want = dups.expand(plain, 1000)
        assert got.count() > plain.count() > 0
        assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
        assert got.filter("id_a >= id_b").count() == 0


@pytest.mark.heavy
@pytest.mark.parametrize("sizes", [[3, 5, 4], [1, 1], [37]])
def test_share_slots_give_every_share_its_own_partition(spark, sizes):
    """Hash-partitioned on their slot, n shares fill exactly n partitions, one each."""
    from pyspark.sql import functions as F

    split = local_frame(
        spark,
        [(g * 1000 - 7, p, parts) for g, parts in enumerate(sizes) for p in range(parts)],
        "group bigint, part int, parts int",
    )
    n = sum(sizes)
    slots = B.share_slots(split, n)
    assert slots.count() == n and slots.select("slot").distinct().count() == n
    placed = (
        slots.repartition(n, "slot")
        .groupBy(F.spark_partition_id().alias("p"))
        .agg(F.count(F.lit(1)).alias("shares"))
        .collect()
    )
    assert len(placed) == n and all(r.shares == 1 for r in placed)


@pytest.mark.heavy
@pytest.mark.parametrize("shares,n", [(5, 2), (7, 3), (4, 4), (3, 8)])
def test_share_slots_spread_more_shares_than_partitions_round_robin(spark, shares, n):
    """With more shares than partitions (a count fixed before the shares were
    counted), every partition gets floor or ceil(shares / n) of them."""
    split = local_frame(
        spark, [(11, p, shares) for p in range(shares)], "group bigint, part int, parts int"
    )
    slots = B.share_slots(split, n)
    assert slots.count() == shares
    assert slots.select("group", "part").distinct().count() == shares
    placed = sorted(
        r.shares
        for r in slots.repartition(n, "slot")
        .groupBy(F.spark_partition_id().alias("p"))
        .agg(F.count(F.lit(1)).alias("shares"))
        .collect()
    )
    assert sum(placed) == shares and len(placed) == min(n, shares)
    assert placed[0] >= shares // n and placed[-1] <= -(-shares // n)


@pytest.mark.heavy
@pytest.mark.parametrize("pairs_per_task", [None, 3])
def test_verify_with_the_block_total_known_gives_the_same_pairs_and_report(
    spark, tmp_path, sample_path, monkeypatch, pairs_per_task
):
    """run_dedup passes the candidate stage's block total, so the block groups are
    planned before the sizing job and their shares computed in it; the stage
    jobs size them in a second job; with the signature stage's document and
    shingle counts too, a small input is planned from those bounds and sized
    by no job before the write. All three must give the same pairs and report,
    also when block groups are split into more shares than there are shuffle
    partitions (PAIRS_PER_TASK made tiny)."""
    from lsh_spark.config import DedupConfig
    from lsh_spark.outputs import StagedOutput
    from lsh_spark.pipeline import stage_candidates, stage_signatures, stage_verify

    if pairs_per_task:
        monkeypatch.setattr(B, "PAIRS_PER_TASK", pairs_per_task)
    cfg = DedupConfig(block_min_size=2)  # every shared bucket is a block
    # The signature and candidate stages once; each mode verifies a copy of them.
    first = StagedOutput(spark, str(tmp_path / "stages"))
    sigs = stage_signatures(spark, str(sample_path), first, cfg, packed=True)
    cands = stage_candidates(spark, first, cfg)
    total = cands["buckets"]["block_members"]
    assert total > 0
    # The block total is the number of (block, member) memberships.
    memberships = B.block_memberships(spark.read.parquet(first.path("blocks")))
    assert memberships.agg(F.sum(F.size("in_blocks"))).first()[0] == total
    counts = sigs["counts"]
    # The shingle total counts the accepted documents' sets.
    assert (
        counts["accepted_shingles"]
        == spark.read.parquet(first.path("signatures")).agg(F.sum("num_shingles")).first()[0]
    )
    runs = {}
    for mode in ("job", "folded", "bounds"):
        out = StagedOutput(spark, str(tmp_path / f"run-{mode}"))
        for name in ("signatures", "shingles", "candidates", "blocks"):
            shutil.copytree(
                first.path(name).removeprefix("file:"), out.path(name).removeprefix("file:")
            )
        bounds = (
            {"documents": counts["accepted"], "shingles": counts["accepted_shingles"]}
            if mode == "bounds"
            else {}
        )
        report = stage_verify(
            spark, out, cfg, block_members=None if mode == "job" else total, **bounds
        )
        assert report["verify_sizing"] == ("bounds" if mode == "bounds" else "job")
        pairs = sorted(
            tuple(r)
            for r in spark.read.parquet(out.path("pairs"))
            .select("id_a", "id_b", "jaccard")
            .collect()
        )
        runs[mode] = (
            report["block_verification"],
            report["exact_duplicates"],
            report["counts"],
            pairs,
        )
    assert runs["job"] == runs["folded"] == runs["bounds"]
    work = runs["bounds"][0]
    assert work["groups"] > 0 and runs["bounds"][2]["verified_pairs"] > 0
    if pairs_per_task:  # more shares than the shuffle partitions: round robin
        assert work["split_tasks"] > int(spark.conf.get("spark.sql.shuffle.partitions"))


@pytest.mark.heavy
def test_verify_broadcast_and_shuffled_shingles_give_the_same_pairs(
    spark, tmp_path, sample_path, monkeypatch
):
    """The pair candidates' shingle sets are broadcast up to BROADCAST_SHINGLE_BYTES
    (read once, not cached) and joined by shuffles above it (cached, read by both
    joins): the same pairs and counts either way."""
    from lsh_spark.config import DedupConfig
    from lsh_spark.outputs import StagedOutput
    from lsh_spark.pipeline import stage_candidates, stage_signatures, stage_verify
    from lsh_spark.stages import verify_plan

    cfg = DedupConfig()
    default = verify_plan.BROADCAST_SHINGLE_BYTES
    runs = {}
    for limit in (default, 0):
        monkeypatch.setattr(verify_plan, "BROADCAST_SHINGLE_BYTES", limit)
        out = StagedOutput(spark, str(tmp_path / f"run-{limit}"))
        stage_signatures(spark, str(sample_path), out, cfg)
        stage_candidates(spark, out, cfg)
        report = stage_verify(spark, out, cfg)
        pairs = sorted(
            tuple(r)
            for r in spark.read.parquet(out.path("pairs"))
            .select("id_a", "id_b", "jaccard")
            .collect()
        )
        runs[limit] = (report["counts"], pairs)
    assert default > 0 and runs[0] == runs[default]
    assert runs[0][0]["verified_pairs"] > 0


@pytest.mark.parametrize("seed", [0, 1])
def test_sorted_intersections_compiled_equals_numpy(seed):
    pytest.importorskip("numba")
    rng = np.random.default_rng(seed)
    pool = rng.integers(-(2**63), 2**63 - 1, size=2000, dtype=np.int64)
    sets = [
        np.unique(rng.choice(pool, size=int(rng.integers(0, 300)), replace=False))
        for _ in range(400)
    ]
    sets += [np.array([], np.int64), sets[0].copy(), np.array([pool[0]]), np.array([pool[0]])]
    a, b = sets[::2], sets[1::2]
    args = (
        np.concatenate(a),
        np.array([len(s) for s in a]),
        np.concatenate(b),
        np.array([len(s) for s in b]),
    )
    want = [len(set(x.tolist()) & set(y.tolist())) for x, y in zip(a, b, strict=False)]
    assert V.sorted_intersections(*args, kernel="numpy").tolist() == want
    # Read-only arrays too, as Arrow hands them to the workers.
    for arr in args:
        arr.setflags(write=False)
    assert V.sorted_intersections(*args, kernel="compiled").tolist() == want
    assert max(want) > 0 and min(want) == 0


def test_expand_copies_orders_every_copy_pair_as_spark_compares_ids():
    import pyarrow as pa

    rng = np.random.default_rng(3)
    alphabet = ["a", "B", "z", "é", "日", "0", "-"]
    ids = sorted({"".join(rng.choice(alphabet, size=int(rng.integers(1, 6)))) for _ in range(60)})[
        :40
    ]
    members = ids[:20]
    pool = iter(ids[20:])
    copies = []
    for m in members:
        extra = [next(pool) for _ in range(int(rng.integers(0, 2)))] if rng.random() < 0.5 else []
        copies.append([m, *extra] if extra else None)
    i, j = np.triu_indices(len(members), 1)
    jac = rng.random(len(i))
    a, b, got_jac = B.expand_copies(
        pa.array(members),
        pa.array(copies, pa.list_(pa.string())),
        i.astype(np.int64),
        j.astype(np.int64),
        jac,
    )
    want = []
    for k, (x, y) in enumerate(zip(i, j, strict=False)):
        for cx in copies[x] or [members[x]]:
            for cy in copies[y] or [members[y]]:
                lo, hi = sorted([cx, cy], key=lambda s: s.encode())
                want.append((lo, hi, jac[k]))
    assert sorted(zip(a.to_pylist(), b.to_pylist(), got_jac.tolist(), strict=False)) == sorted(want)
    assert all(x.encode() < y.encode() for x, y in zip(a.to_pylist(), b.to_pylist(), strict=False))
