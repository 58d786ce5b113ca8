#!/usr/bin/env bash
# Runs jobs/dedup.py in local mode on the bundled sample corpus.
# Usage: bash scripts/demo.sh [OUTPUT_DIR] [extra dedup.py flags...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
OUT="${1:-$ROOT/out/sample}"
shift || true
# Spark settings: conf/local.properties (commented key by key); logging: conf/log4j2.properties.
spark-submit --master "local[2]" --driver-memory 2g \
  --properties-file "$ROOT/conf/local.properties" \
  --conf "spark.driver.defaultJavaOptions=-Dlog4j2.configurationFile=file:$ROOT/conf/log4j2.properties" \
  "$ROOT/jobs/dedup.py" --config "$ROOT/conf/local.yaml" \
  --input "$ROOT/data/sample/corpus.jsonl" --output "$OUT" --overwrite "$@"
