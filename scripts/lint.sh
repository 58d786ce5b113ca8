#!/usr/bin/env bash
# Lints and checks the formatting of the whole repository with ruff (the rules
# are in pyproject.toml). Usage: bash scripts/lint.sh   (or with --fix to apply
# the safe fixes and reformat).
set -euo pipefail
export LSH_SPARK_EXTRAS=test
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
cd "$ROOT"
if [ "${1:-}" = "--fix" ]; then
  ruff check --fix .
  ruff format .
else
  ruff check .
  ruff format --check .
fi
