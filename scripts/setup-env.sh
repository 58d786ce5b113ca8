# Sourced by scripts/demo.sh and scripts/test.sh: checks Java 17+, creates the
# virtualenv .venv and installs lsh-spark into it (idempotent, quick when done).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${LSH_SPARK_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

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
extras="${LSH_SPARK_EXTRAS:-}"
stamp="$VENV/.lsh-spark-installed-${extras:-base}"
want="$(cat "$ROOT/pyproject.toml")$extras"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing lsh-spark${extras:+[$extras]} into $VENV (first run downloads PySpark, ~450 MB)" >&2
  log="$VENV/pip-install.log"
  if ! { "$VENV/bin/python" -m pip install --upgrade pip &&
         "$VENV/bin/python" -m pip install -e "$ROOT${extras:+[$extras]}"; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "error: pip install failed; full log in $log" >&2
    exit 1
  fi
  printf '%s' "$want" > "$stamp"
fi
# Python start-up: imports pyspark and py4j from the venv's site-packages,
# compiled at install, instead of SPARK_HOME's zips, compiled again by every
# driver and worker daemon (scripts/pyspark_site.py; README, "Python start-up and stop").
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if ! cmp -s "$ROOT/scripts/pyspark_site.py" "$site/_lsh_spark_pyspark_site.py"; then
  cp "$ROOT/scripts/pyspark_site.py" "$site/_lsh_spark_pyspark_site.py"
  echo "import _lsh_spark_pyspark_site" > "$site/_lsh_spark_pyspark_site.pth"
fi
export PYSPARK_PYTHON="$VENV/bin/python"
export PYSPARK_DRIVER_PYTHON="$VENV/bin/python"
export PATH="$VENV/bin:$PATH"

# Driver start-up: a class-data sharing archive of the classes the driver JVM
# loads (scripts/build-cds-archive.sh) saves about 4 s on every spark-submit in
# local or client mode. Built once per install and Java version; LSH_SPARK_CDS=0
# turns it off. SPARK_SUBMIT_OPTS reaches the JVM that spark-submit starts for
# the driver (and the one PySpark starts for tests), not executors.
if [ "${LSH_SPARK_CDS:-1}" != "0" ]; then
  cds="$VENV/spark-driver-java${java_version}.jsa"
  if [ ! -f "$cds" ] || [ "$stamp" -nt "$cds" ]; then
    echo "recording a class-data sharing archive for the driver JVM (once, about 40 s)" >&2
    if ! bash "$ROOT/scripts/build-cds-archive.sh" "$cds"; then
      echo "note: no class-data sharing archive (see above); Spark starts without it" >&2
      rm -f "$cds"
    fi
  fi
  if [ -f "$cds" ]; then
    # -Xlog:cds*=off: a JVM with another class path (--jars, a different Spark)
    # ignores the archive without a warning on every run.
    export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:+$SPARK_SUBMIT_OPTS }-XX:SharedArchiveFile=$cds -Xlog:cds*=off"
  fi
fi

# Appends JVM options to SPARK_SUBMIT_OPTS once, however often this is sourced.
_lsh_spark_submit_opts() {
  case " ${SPARK_SUBMIT_OPTS:-} " in
    *" $1 "*) ;;
    *) export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:+$SPARK_SUBMIT_OPTS }$1" ;;
  esac
}

# JIT: HotSpot's optimizing compiler (C2) took about 18 of the 45 CPU seconds
# of a 41,000-document run on 2 cores, mostly compiling Spark's planning,
# closure-cleaning and generated code that runs only a few thousand times.
# Thirty times the default tier-4 thresholds keep that code in C1 and leave C2
# to the really hot loops (README, "JIT thresholds"). They suit these jobs, not
# every Spark job: MLlib's MinHashLSH ran 15% slower with them, so
# bench/compare.py starts its peers without them. LSH_SPARK_JIT=0 keeps the
# JVM defaults.
if [ "${LSH_SPARK_JIT:-1}" != "0" ]; then
  LSH_SPARK_JIT_OPTS="-XX:Tier4InvocationThreshold=150000 -XX:Tier4MinInvocationThreshold=18000"
  LSH_SPARK_JIT_OPTS="$LSH_SPARK_JIT_OPTS -XX:Tier4CompileThreshold=450000 -XX:Tier4BackEdgeThreshold=1200000"
  export LSH_SPARK_JIT_OPTS
  _lsh_spark_submit_opts "$LSH_SPARK_JIT_OPTS"
fi

# Garbage collector: the throughput collector (Parallel GC) instead of G1, the
# JVM's default. A batch job has no pause-time goal, and on 2 cores G1's
# concurrent refinement and marking threads and its barriers competed with the
# tasks: in alternated 41,000-document runs the median system CPU time fell by
# a quarter and the verification stage's by 2 s (README, "Garbage collector").
# LSH_SPARK_GC=0 keeps G1. Like the JIT options, it reaches only the JVM that
# spark-submit starts for the driver (every task in local mode).
if [ "${LSH_SPARK_GC:-1}" != "0" ]; then
  LSH_SPARK_GC_OPTS="-XX:+UseParallelGC"
  export LSH_SPARK_GC_OPTS
  _lsh_spark_submit_opts "$LSH_SPARK_GC_OPTS"
fi
