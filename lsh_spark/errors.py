"""The base class of lsh-spark's errors.

An :class:`LshSparkError` is the user's to fix (a bad option, input or index):
the jobs print its message as one line, ``prog: error: message``, and exit
with code 2 (:func:`lsh_spark.cli.run_job`).  Any other exception is a bug and
keeps its traceback.
"""

from __future__ import annotations


class LshSparkError(Exception):
    """An error the user can fix; its message is one line naming what to change."""
