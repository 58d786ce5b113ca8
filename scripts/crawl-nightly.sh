#!/usr/bin/env bash
# One scheduled crawl batch: deduplicates the crawl of DATE against the index.
#
# Usage: bash scripts/crawl-nightly.sh [YYYY-MM-DD]      (default: yesterday, UTC)
#
# Reads the batch from   $CRAWL_ROOT/DATE   (a directory of WARC/WET files)
# updates the index at   $INDEX
# writes results to      $RESULTS/DATE      (deduped/, duplicates/, ..., report.json)
# with batch id          crawl-DATE         (a re-run of the same date changes nothing)
#
# Environment:
#   CRAWL_ROOT, INDEX, RESULTS   required; local paths or hdfs://, s3a://, ... URIs
#   SPARK_SUBMIT                 default: spark-submit
#   SPARK_ARGS                   spark-submit arguments (default: local mode with
#                                "--properties-file conf/local.properties"), e.g.
#                                "--master yarn --properties-file conf/spark-cluster.properties"
#   DECONTAM_REFERENCES          optional: reference collections (space-separated paths);
#                                when set, the batch's deduped/ is then decontaminated
#                                against them into $DECONTAM_RESULTS/DATE (clean/,
#                                removed/, matches/, ...; replaced on a re-run)
#   DECONTAM_RESULTS             default: $RESULTS-clean
#   LSH_SPARK_LOCK               lock file (default: /tmp/lsh-spark-crawl.lock): a second
#                                batch started on this host while one runs exits 75 at once
#                                (across hosts, the index's version check refuses the later
#                                commit instead)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
date="${1:-$(date -u -d yesterday +%F)}"
if ! [[ "$date" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}$ ]]; then
  echo "crawl-nightly.sh: error: DATE: got '$date'; allowed: YYYY-MM-DD" >&2
  exit 2
fi
: "${CRAWL_ROOT:?crawl-nightly.sh: set CRAWL_ROOT (where the batches are, one directory per date)}"
: "${INDEX:?crawl-nightly.sh: set INDEX (the index directory)}"
: "${RESULTS:?crawl-nightly.sh: set RESULTS (results go to RESULTS/DATE)}"
lock="${LSH_SPARK_LOCK:-/tmp/lsh-spark-crawl.lock}"
exec 9>"$lock"
if ! flock -n 9; then
  echo "crawl-nightly.sh: error: another batch holds $lock; not starting $date" >&2
  exit 75
fi
# Logging first, so that SPARK_ARGS can replace it.
# shellcheck disable=SC2086
"${SPARK_SUBMIT:-spark-submit}" \
  --conf "spark.driver.defaultJavaOptions=-Dlog4j2.configurationFile=file:$ROOT/conf/log4j2.properties" \
  ${SPARK_ARGS:---properties-file $ROOT/conf/local.properties} \
  "$ROOT/jobs/crawl_dedup.py" \
  --batch "$CRAWL_ROOT/$date" --index "$INDEX" --output "$RESULTS/$date" \
  --batch-id "crawl-$date"
if [ -n "${DECONTAM_REFERENCES:-}" ]; then
  # shellcheck disable=SC2086
  "${SPARK_SUBMIT:-spark-submit}" \
    --conf "spark.driver.defaultJavaOptions=-Dlog4j2.configurationFile=file:$ROOT/conf/log4j2.properties" \
    ${SPARK_ARGS:---properties-file $ROOT/conf/local.properties} \
    "$ROOT/jobs/decontaminate.py" \
    --input "$RESULTS/$date/deduped" --reference $DECONTAM_REFERENCES \
    --output "${DECONTAM_RESULTS:-$RESULTS-clean}/$date" --overwrite
fi
