# The driver JVM's options for lsh-spark's jobs, in SPARK_SUBMIT_OPTS.
#
# Sourced by scripts/setup-env.sh (after the install, with ROOT, VENV,
# java_version and stamp set): builds the class-data sharing archive when it is
# missing or older than the install, and exports SPARK_SUBMIT_OPTS,
# LSH_SPARK_JIT_OPTS and LSH_SPARK_GC_OPTS.
#
# Run on its own (bash scripts/jvm-opts.sh), it builds nothing and prints the
# three variables, one NAME=value per line, as a shell that had sourced
# setup-env.sh would have them (the archive only if it already exists):
# bench/compare.py uses that when it is started from a shell that had not.
_lsh_spark_jvm_print=0
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  _lsh_spark_jvm_print=1
  ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  VENV="${LSH_SPARK_VENV:-$ROOT/.venv}"
  java_bin="java"
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then java_bin="$JAVA_HOME/bin/java"; fi
  java_version="$("$java_bin" -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')"
fi

# Appends JVM options to SPARK_SUBMIT_OPTS once, however often this is sourced.
_lsh_spark_submit_opts() {
  case " ${SPARK_SUBMIT_OPTS:-} " in
    *" $1 "*) ;;
    *) export SPARK_SUBMIT_OPTS="${SPARK_SUBMIT_OPTS:+$SPARK_SUBMIT_OPTS }$1" ;;
  esac
}

# Driver start-up: a class-data sharing archive of the classes the driver JVM
# loads (scripts/build-cds-archive.sh) saves about 4 s on every spark-submit in
# local or client mode. Built once per install and Java version; LSH_SPARK_CDS=0
# turns it off. SPARK_SUBMIT_OPTS reaches the JVM that spark-submit starts for
# the driver (and the one PySpark starts for tests), not executors.
if [ "${LSH_SPARK_CDS:-1}" != "0" ]; then
  cds="$VENV/spark-driver-java${java_version}.jsa"
  if [ "$_lsh_spark_jvm_print" = "0" ] && { [ ! -f "$cds" ] || [ "$stamp" -nt "$cds" ]; }; then
    echo "recording a class-data sharing archive for the driver JVM (once, about 40 s)" >&2
    if ! bash "$ROOT/scripts/build-cds-archive.sh" "$cds"; then
      echo "note: no class-data sharing archive (see above); Spark starts without it" >&2
      rm -f "$cds"
    fi
  fi
  if [ -f "$cds" ]; then
    # -Xlog:cds*=off: a JVM with another class path (--jars, a different Spark)
    # ignores the archive without a warning on every run.
    _lsh_spark_submit_opts "-XX:SharedArchiveFile=$cds -Xlog:cds*=off"
  fi
fi

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

if [ "$_lsh_spark_jvm_print" = "1" ]; then
  printf 'SPARK_SUBMIT_OPTS=%s\n' "${SPARK_SUBMIT_OPTS:-}"
  printf 'LSH_SPARK_JIT_OPTS=%s\n' "${LSH_SPARK_JIT_OPTS:-}"
  printf 'LSH_SPARK_GC_OPTS=%s\n' "${LSH_SPARK_GC_OPTS:-}"
fi
