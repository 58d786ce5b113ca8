#!/usr/bin/env bash
# Runs a Spark Connect server from the installed PySpark, in the foreground, with
# lsh-spark on its Python workers; jobs then run with --remote sc://HOST:PORT.
# Usage: bash scripts/connect-server.sh [--port PORT] [spark-submit options...]
#   e.g. bash scripts/connect-server.sh --port 15002 --master "local[*]" --driver-memory 4g
# Binds 127.0.0.1 unless given --conf spark.connect.grpc.binding.address=...
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
PORT=15002
if [ "${1:-}" = "--port" ]; then PORT="$2"; shift 2; fi
export PYSPARK_PYTHON="${PYSPARK_PYTHON:-$VENV/bin/python}"
exec spark-submit \
  --class org.apache.spark.sql.connect.service.SparkConnectServer \
  --properties-file "$ROOT/conf/local.properties" \
  --conf "spark.driver.defaultJavaOptions=-Dlog4j2.configurationFile=file:$ROOT/conf/log4j2.properties" \
  --conf spark.connect.grpc.binding.address=127.0.0.1 \
  --conf "spark.connect.grpc.binding.port=$PORT" \
  "$@"
