"""Persisting a DataFrame for the length of a ``with`` block.

Every stage that reads an intermediate result more than once caches it with
:func:`cached`, so the ``persist`` and its ``unpersist`` sit in one place and
an error on the way never leaves a table in the executors' memory.  Several
tables cached for one block go on an :class:`contextlib.ExitStack`::

    with ExitStack() as stack:
        ids = stack.enter_context(cached(candidate_ids(pairs)))
        ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

from pyspark import StorageLevel


class Persistable(Protocol):
    """A DataFrame, or an object that caches its tables the same way
    (:class:`lsh_spark.buckets.DuplicateGroups`)."""

    def persist(self, level: StorageLevel, /) -> Persistable: ...
    def unpersist(self) -> object: ...


P = TypeVar("P", bound=Persistable)


@contextmanager
def cached(df: P, level: StorageLevel = StorageLevel.MEMORY_AND_DISK) -> Iterator[P]:
    """``df`` persisted at ``level`` inside the block, unpersisted when it ends.

    Parameters
    ----------
    df : DataFrame or Persistable
        What to cache; it is computed at its first use inside the block.
    level : StorageLevel
        Where the cached partitions live (memory, spilling to disk by default).

    Yields
    ------
    The persisted object, to be used in place of ``df``.
    """
    kept = df.persist(level)
    try:
        yield kept
    finally:
        kept.unpersist()
