#!/usr/bin/env bash
# Builds what Spark executors need, under dist/ (one command, idempotent):
#   dist/lsh_spark.zip          the lsh_spark package, for --py-files
#   dist/lsh-spark-env.tar.gz   a packed virtualenv (venv-pack) with the native
#                               dependencies numpy, pyarrow, pandas and pyyaml at
#                               the versions of constraints.txt, for
#                               --archives dist/lsh-spark-env.tar.gz#environment
# Usage: bash scripts/package.sh [--zip-only]
#   --zip-only  build the zip alone, for clusters whose workers already have the
#               dependencies installed (e.g. the Docker image of docker-compose.yml)
# The packed environment links to this machine's Python interpreter
# (venv-pack does not ship one): the workers need the same Python version
# installed at the same path.  See the README's "Running on a cluster".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
cd "$ROOT"
mkdir -p dist

"$VENV/bin/python" - <<'PY'
import os, zipfile
with zipfile.ZipFile("dist/lsh_spark.zip.tmp", "w", zipfile.ZIP_DEFLATED) as zf:
    for folder, dirs, files in os.walk("lsh_spark"):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                with open(path, "rb") as fh:
                    zf.writestr(info, fh.read())
os.replace("dist/lsh_spark.zip.tmp", "dist/lsh_spark.zip")
PY
echo "built dist/lsh_spark.zip" >&2
if [ "${1:-}" = "--zip-only" ]; then exit 0; fi

# The executor environment: runtime dependencies without PySpark itself (the
# workers' Spark installation provides it, and it is an extra), read from the
# installed lsh-spark metadata, at the tested versions of constraints.txt.
reqs="$("$VENV/bin/python" - <<'PY'
from importlib.metadata import requires
for r in requires("lsh-spark") or []:
    if "extra ==" not in r and not r.lower().startswith("pyspark"):
        print(r.split(";")[0].strip())
PY
)"
PACK="$ROOT/build/executor-venv"
want="$reqs venv-pack==0.2.0 $("$PYTHON" -V 2>&1) $(cat "$ROOT/constraints.txt")"
if [ ! -f "$PACK/.installed" ] || [ "$(cat "$PACK/.installed")" != "$want" ]; then
  rm -rf "$PACK"
  "$PYTHON" -m venv "$PACK"
  log="$ROOT/build/executor-venv.log"
  # shellcheck disable=SC2086
  if ! "$PACK/bin/python" -m pip install -c "$ROOT/constraints.txt" $reqs venv-pack==0.2.0 \
       >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "error: pip install of the executor environment failed; log in $log" >&2
    exit 1
  fi
  printf '%s' "$want" > "$PACK/.installed"
fi
rm -f dist/lsh-spark-env.tar.gz
"$PACK/bin/venv-pack" -p "$PACK" -o dist/lsh-spark-env.tar.gz -q
echo "built dist/lsh-spark-env.tar.gz ($(du -h dist/lsh-spark-env.tar.gz | cut -f1))" >&2
