"""spark-submit jobs/decontaminate.py --input CORPUS --reference REF [REF ...] --output DIR

Removes from the input what overlaps the reference collections (evaluation sets,
an earlier release): documents that contain a reference item's word n-grams
(containment) or are near-duplicates of a reference document (Jaccard), with the
matching reference item named in matches/.  Writes clean/, removed/, matches/,
rejects/, reference_rejects/ and report.json atomically to --output.  See
docs/decontamination.md.
"""

import sys

from lsh_spark.commands import decontaminate as main

if __name__ == "__main__":
    sys.exit(main())
