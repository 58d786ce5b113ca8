import random

import numpy as np
import pytest
from chispa import assert_df_equality
from pyspark.sql import types as T
from reference import reference_components

from lsh_spark.components import (
    ClusteringDidNotConverge,
    apply_keep_policy,
    connected_components,
    forest_of_clusters,
)
from lsh_spark.session import local_frame
from lsh_spark.stages.rounds import saved_rounds

OUT = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("cluster_id", T.LongType()),
        T.StructField("cluster_size", T.LongType()),
    ]
)


def run(spark, vertices, edges, contract=True):
    e = local_frame(spark, edges or [], "id_a long, id_b long")
    v = local_frame(spark, [(x,) for x in vertices], "id long")
    return connected_components(e, v, contract=contract)


def check(spark, vertices, edges):
    ref = reference_components(vertices, edges)
    want = local_frame(spark, [(v, c, s) for v, (c, s) in ref.items()], OUT)
    # With and without the local contraction before the star rounds.
    for contract in (True, False):
        got = run(spark, vertices, edges, contract)
        assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.heavy
def test_long_chain_in_shuffled_order(spark):
    order = list(range(1, 65))
    random.Random(3).shuffle(order)
    edges = list(zip(order, order[1:], strict=False))
    check(spark, list(range(1, 70)), edges)  # 65..69 isolated


def test_stars_cycles_and_several_components(spark):
    edges = [(100, i) for i in range(101, 120)]  # star around its min
    edges += [(205, i) for i in range(200, 205)]  # star around a middle id
    edges += [(300, 301), (301, 302), (302, 300)]  # triangle
    edges += [(400, 401), (402, 403), (401, 402), (403, 400), (404, 402)]  # cycle + tail
    vertices = sorted({v for e in edges for v in e} | {999})
    check(spark, vertices, edges)


@pytest.mark.heavy
@pytest.mark.parametrize("finish_in_one_task", [True, False])
def test_random_graph_against_union_find(spark, monkeypatch, finish_in_one_task):
    import lsh_spark.components as C

    if not finish_in_one_task:  # contracted partitions, then the star rounds
        monkeypatch.setattr(C, "LOCAL_FINISH_EDGES", 0)
    rng = random.Random(42)
    vertices = list(range(300))
    edges = [(rng.randrange(300), rng.randrange(300)) for _ in range(220)]
    edges = [(a, b) for a, b in edges if a != b]
    check(spark, vertices, edges)


@pytest.mark.heavy
def test_rounds_saved_as_parquet_in_the_checkpoint_dir(spark, tmp_path, monkeypatch):
    import lsh_spark.components as C

    monkeypatch.setattr(C, "LOCAL_FINISH_EDGES", 0)  # contraction, then star rounds
    rng = random.Random(7)
    edges = [(rng.randrange(200), rng.randrange(200)) for _ in range(150)]
    edges = [(a, b) for a, b in edges if a != b]
    ref = reference_components(list(range(200)), edges)
    want = local_frame(spark, [(v, c, s) for v, (c, s) in ref.items()], OUT)
    e = local_frame(spark, edges, "id_a long, id_b long")
    v = local_frame(spark, [(x,) for x in range(200)], "id long")
    got = connected_components(e, v, checkpoints=saved_rounds(str(tmp_path)))
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    (run_dir,) = tmp_path.glob("cc-*")
    # Only the last round is left, a complete Parquet output (the contracted
    # edges were round 0, each round deleted once the next was saved).
    (last,) = run_dir.iterdir()
    assert last.name.startswith("round-") and last.name != "round-000000"
    assert (last / "_SUCCESS").exists()


def test_no_edges_gives_singletons(spark):
    check(spark, [1, 2, 3], [])


def _chain(spark, n):
    order = list(range(1, n))
    random.Random(1).shuffle(order)
    e = local_frame(spark, list(zip(order, order[1:], strict=False)), "id_a long, id_b long")
    v = local_frame(spark, [(x,) for x in order], "id long")
    return e, v


def test_round_limit_is_an_error_not_a_wrong_answer(spark):
    e, v = _chain(spark, 200)
    with pytest.raises(ClusteringDidNotConverge, match="max-cc-iterations"):
        connected_components(e, v, max_iterations=1, contract=False)


@pytest.mark.heavy
def test_round_limit_resumes_from_the_last_saved_round(spark, tmp_path):
    """One round per call: each call stops at its limit with its round saved (the
    one before deleted), the next continues from it, and the last gives the
    components of an unbounded run."""
    e, v = _chain(spark, 100)
    want = connected_components(e, v, contract=False)
    saved = tmp_path / "ckpt"
    calls = 0
    while True:
        try:
            got = connected_components(
                e, v, max_iterations=1, checkpoints=saved_rounds(str(saved)), contract=False
            )
            break
        except ClusteringDidNotConverge as err:
            calls += 1
            assert f"round {calls} is saved" in str(err)
            (run_dir,) = saved.glob("cc-*")
            assert [p.name for p in run_dir.iterdir()] == [f"round-{calls:06d}"]
            assert calls < 20
    assert calls >= 2
    assert_df_equality(got, want, ignore_row_order=True)
    assert {r.cluster_id for r in got.collect()} == {1}


def test_keep_policies(spark):
    clusters = local_frame(
        spark,
        [("a", "a", 3), ("b", "a", 3), ("c", "a", 3), ("d", "d", 1)],
        "id string, cluster_id string, cluster_size long",
    )
    docs = local_frame(
        spark, [("a", 10), ("b", 50), ("c", 50), ("d", 1)], "id string, text_len int"
    )
    keep_min = {r.id for r in apply_keep_policy(clusters, docs, "min-id").collect() if r.keep}
    assert keep_min == {"a", "d"}
    keep_long = {r.id for r in apply_keep_policy(clusters, docs, "longest").collect() if r.keep}
    assert keep_long == {"b", "d"}  # b and c tie on length: smaller id wins


def _components(n, src, dst):
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in zip(src, dst, strict=False):
        parent[find(a)] = find(b)
    return [find(x) for x in range(n)]


def _same_partition(x, y):
    """Two labelings describe the same partition of the nodes."""
    return len(set(zip(x, y, strict=False))) == len(set(x)) == len(set(y))


@pytest.mark.parametrize("sweeps", [1, 2, 32])
def test_local_roots_preserve_components(sweeps):
    """Contracted edges connect exactly what the input did, finished or not."""
    from lsh_spark.components import local_roots

    rng = np.random.default_rng(sweeps)
    n = 400
    chain = np.arange(n - 1)  # a long path needs many sweeps
    src = np.concatenate([chain[:150], rng.integers(150, n, 300)])
    dst = np.concatenate([chain[:150] + 1, rng.integers(150, n, 300)])
    a, b = local_roots(src, dst, n, max_sweeps=sweeps)
    assert _same_partition(_components(n, a, b), _components(n, src, dst))
    if sweeps == 32:
        assert len(a) < n  # at most one edge per non-root node


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spanning_forest_keeps_the_components_with_no_cycle(seed):
    """A subset of the edges, n - (components) of them, connecting what all edges connect."""
    from lsh_spark.components import spanning_forest

    rng = np.random.default_rng(seed)
    n = 500
    # A dense family, a long path in reverse order, a star, random sparse
    # edges, repeated edges, self-loops and isolated nodes.
    a, b = np.triu_indices(80, 1)
    keep = rng.random(len(a)) < 0.6
    path = np.arange(100, 250)[::-1]
    src = np.concatenate(
        [a[keep], path[:-1], np.full(40, 260), rng.integers(310, 450, 90), [5, 5, 470]]
    )
    dst = np.concatenate(
        [b[keep], path[1:], np.arange(261, 301), rng.integers(310, 450, 90), [6, 6, 470]]
    )
    order = rng.permutation(len(src))
    src, dst = src[order], dst[order]
    forest = spanning_forest(src, dst, n)
    assert np.all(np.diff(forest) > 0) and forest.max() < len(src)
    want = _components(n, src, dst)
    assert _same_partition(_components(n, src[forest], dst[forest]), want)
    # No cycle: a forest on n nodes with c components has n - c edges.
    assert len(forest) == n - len(set(want))
    assert np.array_equal(spanning_forest(src, dst, n), forest)  # same edges, same forest
    assert len(spanning_forest(src[:0], dst[:0], n)) == 0


def test_dense_family_contracts_to_a_star(spark):
    from lsh_spark.components import contract_locally

    ids = [f"n{i:03d}" for i in range(60)]
    edges = local_frame(
        spark, [(a, b) for a in ids for b in ids if a < b], "src string, dst string"
    ).repartition(3)
    got = contract_locally(edges).collect()
    assert len(got) <= 3 * 59 and all(r.dst < r.src for r in got)
    assert (
        len(set(_components(60, [ids.index(r.src) for r in got], [ids.index(r.dst) for r in got])))
        == 1
    )
    # In one partition the family becomes a star on its smallest id.
    star = contract_locally(edges.repartition(1)).collect()
    assert sorted((r.src, r.dst) for r in star) == [(i, "n000") for i in ids[1:]]


def test_component_roots_in_one_task_equal_union_find(spark):
    # Roots and sizes: connected_components labels and sizes clusters from this
    # step alone when the graph fits one task (no star rounds, no count pass).
    from lsh_spark.components import component_roots

    rng = random.Random(8)
    edges = [(rng.randrange(80), rng.randrange(80)) for _ in range(70)]
    edges += [(i, i + 1) for i in range(100, 140)]  # a path needs many sweeps
    edges += [(i + 1, i) for i in range(200, 260)]  # a long path, larger ids first
    df = local_frame(spark, edges, "src long, dst long").repartition(3)
    rows = component_roots(df).collect()
    nodes = sorted({v for e in edges for v in e})
    assert sorted(r.id for r in rows) == nodes  # every node once
    ref = reference_components(nodes, edges)
    assert {r.id: (r.root, r.size) for r in rows} == ref


def test_known_small_edge_count_goes_straight_to_one_task(spark):
    # With n_edges given (and small), no contraction round runs first; the
    # clusters are the same as on the general path.
    rng = random.Random(4)
    ids = [f"d{i:03d}" for i in range(120)]
    edges = [(rng.choice(ids), rng.choice(ids)) for _ in range(90)]
    pairs = local_frame(spark, edges, "id_a string, id_b string").repartition(3)
    vertices = local_frame(spark, [(i,) for i in ids], "id string")
    direct = connected_components(pairs, vertices, n_edges=len(edges))
    general = connected_components(pairs, vertices)
    assert_df_equality(direct, general, ignore_row_order=True, ignore_nullable=True)
    ref = reference_components(ids, edges)
    assert {r.id: (r.cluster_id, r.cluster_size) for r in direct.collect()} == ref


@pytest.mark.parametrize("bound", [2_000_000, 0])
def test_kept_documents_filter_the_input_by_a_broadcast_id_list(spark, monkeypatch, capsys, bound):
    """deduped/ (and Duplicates.remove) keep what clusters/ keeps: of a cluster of
    three, the kept one with its size; singletons with size 1; nothing rejected
    (d, f: in rejects/; a null id).  Under the bound the input is filtered by a
    broadcast list of the duplicate clusters' and the rejects' ids: no shuffle
    moves the input's text; above it, a shuffle join."""
    from lsh_spark.stages import verify_plan
    from lsh_spark.stages.cluster import kept_documents

    monkeypatch.setattr(verify_plan, "BROADCAST_ID_ROWS", bound)
    docs = local_frame(
        spark,
        [
            ("a", "text a", 7),
            ("b", "text b", 8),
            ("c", "text c", 9),
            ("d", None, 1),
            ("e", "text e", 2),
            ("f", "", 3),
            (None, "no id", 4),
        ],
        "doc_id string, text string, n int",
    )
    clusters = local_frame(
        spark,
        [("a", "a", 3, True), ("b", "a", 3, False), ("c", "a", 3, False), ("e", "e", 1, True)],
        "id string, cluster_id string, cluster_size long, keep boolean",
    )
    rejects = local_frame(
        spark, [("d", "missing text"), ("f", "empty")], "id string, reason string"
    )
    # Only the hint broadcasts: Spark's own size threshold is off.
    before = spark.conf.get("spark.sql.autoBroadcastJoinThreshold")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")
    try:
        got = kept_documents(docs, clusters, rejects, 3, id_col="doc_id")
        got.explain()
        plan = capsys.readouterr().out
    finally:
        spark.conf.set("spark.sql.autoBroadcastJoinThreshold", before)
    if bound:
        assert "BroadcastHashJoin" in plan and "SortMergeJoin" not in plan, plan
    else:
        assert "SortMergeJoin" in plan, plan
    want = local_frame(
        spark,
        [("a", "text a", 7, 3), ("e", "text e", 2, 1)],
        "doc_id string, text string, n int, cluster_size long",
    )
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


def _forest_rows(spark, rows, measure, partitions):
    pairs = spark.createDataFrame(rows, f"id_a string, id_b string, {measure} double")
    ids = sorted({r[0] for r in rows} | {r[1] for r in rows})
    clusters = connected_components(pairs, local_frame(spark, [(i,) for i in ids], "id string"))
    forest = forest_of_clusters(pairs.repartition(partitions), clusters)
    return sorted(tuple(r) for r in forest.collect()), ids


@pytest.mark.parametrize("partitions", [1, 3])
def test_pairs_become_a_maximum_similarity_spanning_forest(spark, partitions):
    rows = [
        # A triangle: the two closest edges stay, the 0.80 one closes a cycle.
        ("a", "b", 0.90), ("b", "c", 0.95), ("a", "c", 0.80),
        # A square with a diagonal, and a tie broken by (id_a, id_b).
        ("d", "e", 0.7), ("e", "f", 0.7), ("f", "g", 0.7), ("d", "g", 0.7), ("d", "f", 0.99),
        # One edge: stays.
        ("x", "y", 0.6),
    ]  # fmt: skip
    forest, ids = _forest_rows(spark, rows, "jaccard", partitions)
    assert forest == [
        ("a", "b", 0.90), ("b", "c", 0.95),
        ("d", "e", 0.7), ("d", "f", 0.99), ("d", "g", 0.7),
        ("x", "y", 0.6),
    ]  # fmt: skip
    # One row per document beyond the first of its cluster, the same clusters.
    assert len(forest) == len(ids) - 3
    kept = reference_components(ids, [(a, b) for a, b, _ in forest])
    assert kept == reference_components(ids, [(a, b) for a, b, _ in rows])


def test_a_distance_forest_keeps_the_nearest_pairs(spark):
    rows = [("a", "b", 3.0), ("b", "c", 1.0), ("a", "c", 2.0)]
    forest, _ = _forest_rows(spark, rows, "hamming", 2)
    assert forest == [("a", "c", 2.0), ("b", "c", 1.0)]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_random_graph_keeps_its_components_in_its_forest(spark, seed):
    rng = random.Random(seed)
    ids = [f"d{i:03d}" for i in range(200)]
    edges = {tuple(sorted(rng.sample(ids, 2))) for _ in range(400)}
    rows = [(a, b, round(rng.uniform(0.5, 1.0), 3)) for a, b in sorted(edges)]
    forest, seen = _forest_rows(spark, rows, "jaccard", 4)
    components = reference_components(seen, [(a, b) for a, b, _ in rows])
    assert reference_components(seen, [(a, b) for a, b, _ in forest]) == components
    assert len(forest) == len(seen) - len({root for root, _ in components.values()})
