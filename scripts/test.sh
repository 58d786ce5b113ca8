#!/usr/bin/env bash
# Runs the whole test suite (unit, end-to-end and spark-submit tests).
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
export LSH_SPARK_EXTRAS=test
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
cd "$ROOT"
exec "$VENV/bin/python" -m pytest "$@"
