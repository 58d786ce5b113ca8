"""The rounds of connected components kept in a checkpoint directory, and found again.

:func:`lsh_spark.components.connected_components` saves each round's edges
where its ``checkpoints`` say; :func:`saved_rounds` of a directory keeps them
there as Parquet, so a lost executor's share is read again rather than
recomputed, and a call that stopped at its round limit is continued by the
next call on the same edges.  The clustering stage, the crawl batch, block
verification (through :func:`lsh_spark.blocks.verify_blocks`) and the Python
API pass it their ``--checkpoint-dir``.
"""

from __future__ import annotations

from functools import partial

from pyspark.sql import DataFrame

from lsh_spark.components import Checkpoints, edges_key
from lsh_spark.store import FileSystem


def saved_rounds(checkpoint_dir: str | None) -> Checkpoints | None:
    """The ``checkpoints`` of :func:`~lsh_spark.components.connected_components`
    that save its rounds under ``checkpoint_dir`` (:class:`SavedRounds`); None
    without a directory (local checkpoints, nothing resumes)."""
    return None if checkpoint_dir is None else partial(SavedRounds, checkpoint_dir)


class SavedRounds:
    """Each round's edges saved once, as Parquet under ``checkpoint_dir``, and
    found again by a later call on the same edges.

    Parquet written by Spark and read back is a checkpoint that works the same
    in classic mode and over Spark Connect, on local disk, HDFS and S3.  Round
    ``k`` goes to ``cc-<key>/round-<k>``; a round is complete when Spark wrote
    its ``_SUCCESS`` marker, and the rounds before it are deleted then, so at
    most two are on disk at a time.
    """

    def __init__(self, checkpoint_dir: str, edges: DataFrame, contract: bool):
        self.spark = edges.sparkSession
        mode = "c" if contract else "n"
        self.root = f"{checkpoint_dir.rstrip('/')}/cc-{mode}{edges_key(edges)}"
        self.fs = FileSystem(self.spark, self.root)

    def _done(self) -> list[int]:
        """The complete rounds on disk, in order."""
        names = self.fs.list_names(self.root)
        rounds = [int(n[len("round-") :]) for n in names if n.startswith("round-")]
        return sorted(k for k in rounds if self.fs.exists(f"{self._path(k)}/_SUCCESS"))

    def _path(self, k: int) -> str:
        return f"{self.root}/round-{k:06d}"

    def last(self) -> tuple[int, DataFrame | None]:
        """The last complete round and its edges, or ``(0, None)``."""
        done = self._done()
        if not done:
            return 0, None
        return done[-1], self.spark.read.parquet(self._path(done[-1]))

    def where(self, k: int) -> str:
        """The error message's note of where round ``k`` is kept."""
        return f"round {k} is saved in {self._path(k)} and a re-run continues from it, or "

    def __call__(self, df: DataFrame, k: int) -> DataFrame:
        # A round left half-written by a killed run is replaced.
        df.write.mode("overwrite").parquet(self._path(k))
        for old in self._done():
            if old < k:
                self.fs.delete(self._path(old))
        return self.spark.read.parquet(self._path(k))
