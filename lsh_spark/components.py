"""Duplicate clusters: distributed connected components and the keep policy.

Connected components use the alternating large-star / small-star rounds of
Kiveris, Lattanzi, Mirrokni, Rastogi and Vassilvitskii, "Connected Components
in MapReduce and Beyond" (SoCC 2014), on DataFrames of edges.  Each round's
edges are saved (as Parquet in a checkpoint directory, or as a local
checkpoint) so the lineage stays short and a lost executor recomputes one
round, not the whole history.
Before the first round every partition of the edge list contracts its own
piece of the graph (vectorized label propagation with pointer jumping in numpy,
the local-contraction idea of Łącki, Mirrokni and Włodarczyk, "Connected
Components at Scale via Local Contractions", 2018): a family of 2,000 verified
near-duplicates holds 2 million edges but leaves at most 2,000 per partition.
The loop ends when the edges form stars: every edge points from a node to a
root, no root has a parent and no node has two parents; then the root is the
smallest id of its component.  That check is one aggregation per round
(:func:`_is_star_forest`); nothing is collected to the driver but its one row.
A graph of up to ``LOCAL_FINISH_EDGES`` edges (after the contraction, or known
from the start) is finished in one task instead, which gives every node its
root and its component's size (:func:`component_roots`).

Where the rounds are kept is the caller's (``checkpoints``, a
:class:`Rounds` for the edges): by default local checkpoints, which nothing
finds again; with :func:`lsh_spark.stages.rounds.saved_rounds` of a checkpoint
directory the rounds *resume*: round ``k``'s edges are saved as
``cc-<key>/round-<k>`` (``key`` a fingerprint of the input edges,
:func:`edges_key`), the round before is deleted once it is saved, and a call
that reaches its round limit stops with :class:`ClusteringDidNotConverge`
leaving the last round in place; the next call on the same edges and
directory continues from it.  This module reads and writes no files itself.

Example
-------
>>> spark = getfixture("spark")
>>> pairs = spark.createDataFrame([("a", "b"), ("b", "c")], "id_a string, id_b string")
>>> vertices = spark.createDataFrame([("a",), ("b",), ("c",), ("d",)], "id string")
>>> clusters = connected_components(pairs, vertices)
>>> clusters.columns
['id', 'cluster_id', 'cluster_size']
>>> sorted(tuple(row) for row in clusters.collect())
[('a', 'a', 3), ('b', 'a', 3), ('c', 'a', 3), ('d', 'd', 1)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from lsh_spark.errors import LshSparkError

# Label-propagation sweeps per partition; an unfinished contraction is still
# correct (see local_roots), only less of a reduction.
MAX_LOCAL_SWEEPS = 32
# A contracted edge list up to this size is finished in one task (about 200 MB
# of Python memory at the most); a larger one goes through the star rounds.
LOCAL_FINISH_EDGES = 4_000_000


class ClusteringDidNotConverge(LshSparkError, RuntimeError):
    """The component computation reached its round limit (its last round saved,
    when it has a checkpoint directory)."""


def local_roots(
    src: np.ndarray, dst: np.ndarray, n: int, max_sweeps: int = MAX_LOCAL_SWEEPS
) -> tuple[np.ndarray, np.ndarray]:
    """Edges on nodes ``0..n-1`` -> ``(child, parent)`` edges, ``parent < child``, same components.

    Labels start as the node numbers; each sweep lowers every node's label to
    its neighbours' smallest and then jumps pointers (``label = label[label]``).
    The result is every node joined to its label (the smallest node of its
    component once the sweeps converge), plus, for any input edge whose ends
    still disagree (only when ``max_sweeps`` ran out), an edge between the two
    labels, so connectivity is preserved whether or not the sweeps finished.
    """
    label = np.arange(n, dtype=np.int64)
    for _ in range(max_sweeps):
        new = label.copy()
        np.minimum.at(new, src, label[dst])
        np.minimum.at(new, dst, label[src])
        new = new[new]
        if np.array_equal(new, label):
            break
        label = new
    nodes = np.nonzero(label != np.arange(n))[0]
    ls, ld = label[src], label[dst]
    open_ = ls != ld
    child = np.concatenate([nodes, np.maximum(ls, ld)[open_]])
    parent = np.concatenate([label[nodes], np.minimum(ls, ld)[open_]])
    return child, parent


def spanning_forest(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Edges on nodes ``0..n-1`` -> the positions of a spanning forest among them.

    The chosen edges connect exactly what all edges connect, with no cycle (at
    most ``n - 1``): Borůvka's rounds, where every component takes its incident
    edge of the smallest position (distinct weights, so the choices never close
    a cycle) and the components joined by the chosen edges merge
    (:func:`local_roots`).  Each round at least halves the components.  The
    result depends only on the edges and their order, so a re-run chooses the
    same forest.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    label = np.arange(n, dtype=np.int64)
    edge = np.arange(len(src), dtype=np.int64)
    none = len(src)
    chosen = []
    while len(edge):
        ls, ld = label[src[edge]], label[dst[edge]]
        between = ls != ld
        edge, ls, ld = edge[between], ls[between], ld[between]
        if not len(edge):
            break
        first = np.full(n, none, dtype=np.int64)
        np.minimum.at(first, ls, edge)
        np.minimum.at(first, ld, edge)
        pick = np.unique(first[first < none])
        chosen.append(pick)
        child, parent = local_roots(label[src[pick]], label[dst[pick]], n, max_sweeps=n + 1)
        merged = np.arange(n, dtype=np.int64)
        merged[child] = parent
        label = merged[label]
    return np.sort(np.concatenate(chosen)) if chosen else np.empty(0, dtype=np.int64)


def _numbered(batches: Iterator[pa.RecordBatch]) -> tuple[pa.Array, np.ndarray, np.ndarray] | None:
    """One partition's edges as node numbers: ``(names, src, dst)``, or None if empty.

    ``names`` is sorted, so node numbers follow id order and the smallest
    number of a component is its smallest id.
    """
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return None
    table = pa.Table.from_batches(batches)
    src, dst = table.column("src").combine_chunks(), table.column("dst").combine_chunks()
    names = pc.unique(pa.concat_arrays([src, dst]))
    names = names.take(pc.sort_indices(names))
    return (names, pc.index_in(src, names).to_numpy(), pc.index_in(dst, names).to_numpy())


def _local_stars(
    batches: Iterator[pa.RecordBatch], converge: bool
) -> tuple[pa.Array, np.ndarray, np.ndarray] | None:
    """One partition's edges -> ``(names, child, parent)`` of :func:`local_roots`
    (None if empty); ``converge`` runs the sweeps to the end, which leaves stars."""
    numbered = _numbered(batches)
    if numbered is None:
        return None
    names, src, dst = numbered
    n = len(names)
    # n + 1 sweeps always converge (labels only fall, one hop per sweep at least).
    child, parent = local_roots(src, dst, n, max_sweeps=n + 1 if converge else MAX_LOCAL_SWEEPS)
    return names, child, parent


def _contract(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    # One partition of the edge list at a time (bounded by the shuffle partition size).
    stars = _local_stars(batches, converge=False)
    if stars is None:
        return
    names, child, parent = stars
    yield pa.RecordBatch.from_arrays(
        [names.take(pa.array(child)), names.take(pa.array(parent))], names=["src", "dst"]
    )


def contract_locally(edges: DataFrame) -> DataFrame:
    """``(src, dst)`` -> fewer ``(src, dst)`` edges, ``dst < src``, same components.

    Every partition is contracted on its own; where a partition holds whole
    components, their edges come out as stars from each member to the
    component's smallest id, the form the star rounds end in.
    """
    return edges.mapInArrow(_contract, edges.schema).distinct()


def _roots_in_one_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    stars = _local_stars(batches, converge=True)
    if stars is None:
        return
    names, child, parent = stars
    root = np.arange(len(names))
    root[child] = parent
    size = np.bincount(root, minlength=len(names))[root]
    yield pa.RecordBatch.from_arrays(
        [names, names.take(pa.array(root)), pa.array(size)], names=["id", "root", "size"]
    )


def component_roots(edges: DataFrame) -> DataFrame:
    """``(src, dst)`` -> ``(id, root, size)``: every node with its component's
    smallest node and its number of nodes.

    The whole edge list goes to one task: for graphs up to ``LOCAL_FINISH_EDGES``
    edges (a run's verified pairs), where the distributed rounds of
    :func:`connected_components` would cost more in job overhead than in work.
    ``edges`` must be a scan of stored data (``pairs/``, a checkpoint), possibly
    filtered: the task reads it itself (``coalesce(1)``, no shuffle), so any
    computation in its plan would run in that one task too.
    """
    field = edges.schema["src"].dataType
    schema = f"id {field.simpleString()}, root {field.simpleString()}, size long"
    return edges.coalesce(1).mapInArrow(_roots_in_one_task, schema)


def _large_star(edges: DataFrame) -> DataFrame:
    # Each node u links every larger neighbour v to m(u) = min(N(u) + {u}).
    both = edges.union(edges.select(F.col("dst").alias("src"), F.col("src").alias("dst")))
    m = both.groupBy("src").agg(F.least(F.min("dst"), F.col("src")).alias("m"))
    return (
        both.filter(F.col("dst") > F.col("src"))
        .join(m, "src")
        .select(F.col("dst").alias("src"), F.col("m").alias("dst"))
        .filter(F.col("src") != F.col("dst"))
        .distinct()
    )


def _small_star(edges: DataFrame) -> DataFrame:
    # Each node u links itself and every smaller neighbour to m(u) = min(smaller N(u) + {u}).
    down = edges.select(F.greatest("src", "dst").alias("src"), F.least("src", "dst").alias("dst"))
    m = down.groupBy("src").agg(F.min("dst").alias("m"))
    members = down.union(down.select("src", F.col("src").alias("dst")))
    return (
        members.join(m, "src")
        .select(F.col("dst").alias("src"), F.col("m").alias("dst"))
        .filter(F.col("src") != F.col("dst"))
        .distinct()
    )


def _is_star_forest(edges: DataFrame) -> bool:
    """Every edge points from a node to a smaller root, one root per node, roots have none.

    One aggregation: each node's times as a child and as a parent, and whether
    any of its edges points up; a node that breaks a rule is counted.
    """
    as_child = edges.select(
        F.col("src").alias("node"),
        F.lit(1).alias("child"),
        F.lit(0).alias("parent"),
        (F.col("dst") >= F.col("src")).alias("up"),
    )
    as_parent = edges.select(
        F.col("dst").alias("node"),
        F.lit(0).alias("child"),
        F.lit(1).alias("parent"),
        F.lit(False).alias("up"),
    )
    nodes = (
        as_child.unionByName(as_parent)
        .groupBy("node")
        .agg(
            F.sum("child").alias("child"),
            F.sum("parent").alias("parent"),
            F.max("up").alias("up"),
        )
    )
    broken = F.col("up") | (F.col("child") > 1) | ((F.col("child") > 0) & (F.col("parent") > 0))
    return nodes.agg(F.count(F.when(broken, 1)).alias("n")).first()["n"] == 0


def edges_key(edges: DataFrame) -> str:
    """A fingerprint of an edge list's content (one aggregation): its size and
    the sum of its rows' 64-bit hashes, whatever their order or partitioning."""
    row = edges.agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.xxhash64("src", "dst").cast("decimal(38,0)")).alias("h"),
    ).first()
    return f"{row['n']}-{int(row['h'] or 0) % (1 << 64):016x}"


class Rounds(Protocol):
    """Where :func:`connected_components` keeps the edges of its rounds, and
    finds them again."""

    def last(self) -> tuple[int, DataFrame | None]:
        """The last round kept and its edges, or ``(0, None)``."""

    def where(self, k: int) -> str:
        """The error message's note of where round ``k`` is kept."""

    def __call__(self, df: DataFrame, k: int) -> DataFrame:
        """Round ``k``'s edges kept; the same edges, read from where they are kept."""


# ``checkpoints`` of connected_components: the Rounds of an edge list, from the
# edges and whether they are contracted first.
Checkpoints = Callable[[DataFrame, bool], Rounds]


class _LocalRounds:
    """Each round's edges as a local checkpoint, kept by the executors: nothing
    is found again (the :class:`Rounds` without ``checkpoints``)."""

    def last(self) -> tuple[int, DataFrame | None]:
        return 0, None

    def where(self, k: int) -> str:
        return "(no checkpoint directory: nothing is kept); "

    def __call__(self, df: DataFrame, k: int) -> DataFrame:
        return df.localCheckpoint()


def connected_components(
    pairs: DataFrame,
    vertices: DataFrame,
    max_iterations: int = 64,
    checkpoints: Checkpoints | None = None,
    contract: bool = True,
    n_edges: int | None = None,
) -> DataFrame:
    """``(id_a, id_b)`` edges + ``(id)`` vertices -> ``(id, cluster_id, cluster_size)``.

    Every vertex appears exactly once; ``cluster_id`` is the smallest id of its
    connected component; isolated vertices are their own cluster of size 1.
    ``checkpoints``: where each round's edges are kept, called with the edges
    and ``contract``; :func:`lsh_spark.stages.rounds.saved_rounds` of a
    checkpoint directory writes them there as Parquet and reads them back
    (reliable: a lost executor's share is read again, not recomputed), keeps
    only the last round, and a call on the same edges continues from it (see
    the module's docstring); the caller deletes the directory once the result
    is written.  Without it the rounds are local checkpoints, kept by the
    executors, and nothing resumes.
    ``max_iterations``: star rounds per call; reaching it raises
    :class:`ClusteringDidNotConverge`, never returns a partial answer.
    ``contract=False`` skips the local contraction (for testing the rounds alone).
    ``n_edges``: the number of rows of ``pairs`` when the caller knows it; up to
    ``LOCAL_FINISH_EDGES`` the graph then goes straight to one task, without
    the parallel contraction and its count.
    """
    edges = edges_of(pairs)
    if contract and n_edges is not None and n_edges <= LOCAL_FINISH_EDGES:
        return _labelled(vertices, component_roots(edges))
    saved = _LocalRounds() if checkpoints is None else checkpoints(edges, contract)
    start, resumed = saved.last()
    if resumed is not None:
        edges = resumed
    elif contract:
        edges = saved(contract_locally(edges), 0)
    else:
        down = edges.select(
            F.greatest("src", "dst").alias("src"), F.least("src", "dst").alias("dst")
        )
        edges = saved(down.distinct(), 0)
    if contract and start == 0 and edges.count() <= LOCAL_FINISH_EDGES:
        # Small enough for one task: it labels and sizes every component
        # (no star rounds, no star check, no second pass to count sizes).
        return _labelled(vertices, component_roots(edges))
    rounds = start
    while not _is_star_forest(edges):
        if rounds == start + max_iterations:
            raise ClusteringDidNotConverge(
                f"connected components did not converge in {max_iterations} rounds; "
                + saved.where(rounds)
                + "raise --max-cc-iterations"
            )
        rounds += 1
        edges = saved(_small_star(_large_star(edges)), rounds)
    parent = edges.select(F.col("src").alias("id"), F.col("dst").alias("cluster_id"))
    labelled = (
        vertices.select("id")
        .distinct()
        .join(parent, "id", "left")
        .select("id", F.coalesce("cluster_id", "id").alias("cluster_id"))
    )
    sizes = labelled.groupBy("cluster_id").agg(F.count(F.lit(1)).alias("cluster_size"))
    return labelled.join(sizes, "cluster_id").select("id", "cluster_id", "cluster_size")


def edges_of(pairs: DataFrame) -> DataFrame:
    """``(id_a, id_b)`` pairs -> ``(src, dst)`` edges, self-edges dropped."""
    return pairs.select(F.col("id_a").alias("src"), F.col("id_b").alias("dst")).filter(
        F.col("src") != F.col("dst")
    )


def _labelled(vertices: DataFrame, roots: DataFrame) -> DataFrame:
    """Vertices labelled from :func:`component_roots` of the graph's edges: a
    vertex in no edge is a cluster of its own, of size 1."""
    return (
        vertices.select("id")
        .distinct()
        .join(roots, "id", "left")
        .select(
            "id",
            F.coalesce("root", "id").alias("cluster_id"),
            F.coalesce("size", F.lit(1).cast("long")).alias("cluster_size"),
        )
    )


def apply_keep_policy(
    clusters: DataFrame,
    docs: DataFrame,
    policy: str,
    order: Sequence[tuple[str, bool]] = (),
) -> DataFrame:
    """Add ``keep``: exactly one ``True`` per cluster, chosen deterministically.

    ``min-id`` keeps the cluster's smallest id (its ``cluster_id``); ``longest``
    keeps the document with the most characters (``docs.text_len``), ties to the
    smallest id.  ``order`` (``--keep-by``: ``[(column, descending), ...]``,
    columns of ``docs``) comes first, nulls last; the policy breaks its ties.
    Only members of clusters of two or more are ranked.
    """
    if policy not in ("min-id", "longest"):
        raise ValueError(f"--keep: got {policy!r}; allowed: min-id | longest")
    if policy == "min-id" and not order:
        return clusters.withColumn("keep", F.col("id") == F.col("cluster_id"))
    ranks = [F.col(c).desc_nulls_last() if desc else F.col(c).asc_nulls_last() for c, desc in order]
    if policy == "longest":
        ranks.append(F.col("text_len").desc())
    w = Window.partitionBy("cluster_id").orderBy(*ranks, F.col("id"))
    wanted = ["id", *dict.fromkeys([c for c, _ in order] + ["text_len"] * (policy == "longest"))]
    members = clusters.filter(F.col("cluster_size") > 1)
    ranked = members.join(docs.select(*wanted), "id").select(
        *clusters.columns, (F.row_number().over(w) == 1).alias("keep")
    )
    singletons = clusters.filter(F.col("cluster_size") <= 1).withColumn("keep", F.lit(True))
    return ranked.unionByName(singletons)


# The pairs/ rows of one cluster above which they are written as verified, not
# reduced to a forest: one task holds a cluster's rows (about 100 bytes each).
FOREST_MAX_EDGES = 4_000_000
# How pairs/ ranks an edge for the forest: the closest pairs first.
CLOSER_FIRST = {"jaccard": False, "cosine": False, "hamming": True, "distance": True}


def forest_of_clusters(pairs: DataFrame, clusters: DataFrame) -> DataFrame:
    """``pairs`` reduced to a spanning forest of every cluster: the same clusters,
    at most ``cluster_size - 1`` rows each, so one per document not kept.

    Each row is labelled with its cluster, the rows are partitioned by cluster
    (every cluster in one task), and each task ranks its rows closest first
    (``CLOSER_FIRST``: the highest ``jaccard`` or ``cosine``, the lowest
    ``hamming`` or ``distance``), then by ``(id_a, id_b)``, and keeps
    :func:`spanning_forest` of them: each cluster's maximum-similarity
    spanning forest, the same however the rows are partitioned.  A task with
    more than ``FOREST_MAX_EDGES`` rows keeps them all.  ``pairs``: ``(id_a,
    id_b, measure)`` rows whose two ends are in one cluster; ``clusters``: the
    ``(id, cluster_id, cluster_size)`` of :func:`connected_components`.
    """
    measure = next(c for c in pairs.columns if c in CLOSER_FIRST)
    keys = [
        (measure, "ascending" if CLOSER_FIRST[measure] else "descending"),
        ("id_a", "ascending"),
        ("id_b", "ascending"),
    ]
    columns = pairs.columns
    labels = clusters.filter(F.col("cluster_size") > 1).select(
        F.col("id").alias("id_a"), "cluster_id"
    )

    def forest(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        batches = list(batches)
        if not batches:
            return
        table = pa.Table.from_batches(batches).select(columns)
        if table.num_rows > FOREST_MAX_EDGES:
            yield from table.to_batches()
            return
        ranked = table.take(pc.sort_indices(table, sort_keys=keys))
        ids = pa.chunked_array(ranked["id_a"].chunks + ranked["id_b"].chunks, ranked["id_a"].type)
        encoded = pc.dictionary_encode(ids).combine_chunks()
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        m = ranked.num_rows
        keep = spanning_forest(codes[:m], codes[m:], len(encoded.dictionary))
        yield from ranked.take(pa.array(keep)).to_batches()

    labelled = pairs.join(labels, "id_a")
    return labelled.repartition("cluster_id").mapInArrow(forest, pairs.schema)
