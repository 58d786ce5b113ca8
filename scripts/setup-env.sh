# Sourced by scripts/demo.sh and scripts/test.sh: checks Java 17+, creates the
# virtualenv .venv and installs lsh-spark into it (idempotent, quick when done).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${LSH_SPARK_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"
# The tested versions: constraints.txt (the newest PySpark line), or another line's file
# (LSH_SPARK_CONSTRAINTS=constraints-spark40.txt, relative to the checkout or absolute).
CONSTRAINTS="${LSH_SPARK_CONSTRAINTS:-constraints.txt}"
case "$CONSTRAINTS" in /*) ;; *) CONSTRAINTS="$ROOT/$CONSTRAINTS" ;; esac
if [ ! -f "$CONSTRAINTS" ]; then
  echo "error: LSH_SPARK_CONSTRAINTS: no such file: $CONSTRAINTS" >&2
  exit 1
fi

java_bin="java"
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then java_bin="$JAVA_HOME/bin/java"; fi
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "error: Java 17 or newer is required by Spark and was not found." >&2
  echo "  Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless" >&2
  echo "  elsewhere: install a JDK/JRE 17+ and put it on PATH or set JAVA_HOME" >&2
  exit 1
fi
java_version="$("$java_bin" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
java_major="${java_version%%.*}"
if [ "$java_major" = "1" ]; then java_major="$(echo "$java_version" | cut -d. -f2)"; fi
if ! [ "${java_major:-0}" -ge 17 ] 2>/dev/null; then
  echo "error: Java 17 or newer is required by Spark 4; found '$java_version' ($java_bin)." >&2
  echo "  Debian/Ubuntu: sudo apt-get install -y openjdk-17-jre-headless" >&2
  exit 1
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "error: $PYTHON not found; install Python 3.10+ (Debian: apt-get install -y python3 python3-venv)" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating virtualenv $VENV" >&2
  if ! "$PYTHON" -m venv "$VENV"; then
    echo "error: could not create a virtualenv; on Debian: apt-get install -y python3-venv" >&2
    exit 1
  fi
fi
# PySpark is the extra [spark] (a platform may bring its own); the versions are the
# tested ones of $CONSTRAINTS.
extras="spark${LSH_SPARK_EXTRAS:+,$LSH_SPARK_EXTRAS}"
stamp="$VENV/.lsh-spark-installed-$extras"
want="$(cat "$ROOT/pyproject.toml" "$CONSTRAINTS")$extras"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing lsh-spark[$extras] into $VENV (first run downloads PySpark, ~450 MB)" >&2
  log="$VENV/pip-install.log"
  if ! { "$VENV/bin/python" -m pip install --upgrade pip &&
         "$VENV/bin/python" -m pip install -c "$CONSTRAINTS" -e "$ROOT[$extras]"; } \
       >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "error: pip install failed; full log in $log" >&2
    exit 1
  fi
  printf '%s' "$want" > "$stamp"
fi
export PYSPARK_PYTHON="$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"

