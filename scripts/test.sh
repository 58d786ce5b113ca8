#!/usr/bin/env bash
# Runs the test suite. Usage:
#   bash scripts/test.sh            the whole suite, as CI runs it (unit, end-to-end,
#                                   spark-submit, standalone cluster, Spark Connect, S3)
#   bash scripts/test.sh --fast     the edit-test loop: every test not marked as costly
#                                   (see FAST below and the markers in pyproject.toml)
#   bash scripts/test.sh [--fast] [pytest args...]   e.g. tests/test_minhash.py -k golden
#
# The whole suite runs on LSH_SPARK_TEST_WORKERS pytest-xdist workers (default: the
# number of cores, at most 4), each with its own local SparkSession; 0 runs in one
# process. --fast, named test files and -k/-x/--pdb selections use one process unless
# the variable is set.
set -euo pipefail
export LSH_SPARK_EXTRAS=test
source "$(dirname "${BASH_SOURCE[0]}")/setup-env.sh"
cd "$ROOT"

# Every JVM of the tests (the session's, spark-submit children, servers) compiles with
# C1 only: the tests' JVMs are short-lived and run tiny queries, and the C2 compiler
# took about half of a spark-submit child's CPU (CONTRIBUTING.md). Jobs users run are
# not affected: the variable is set for the tests alone. C1 alone reserves a 48 MB
# code cache; a test worker's session JVM, which runs hundreds of tests' queries,
# filled it ("CodeCache is full. Compiler has been disabled.") and then ran every new
# query interpreted, so the cache is the size tiered compilation would reserve.
export JDK_JAVA_OPTIONS="${JDK_JAVA_OPTIONS:+$JDK_JAVA_OPTIONS }-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"

# They also map a class-data-sharing archive of the classes a small Spark job loads,
# written once per installed set of packages (setup-env.sh's $want, which pins PySpark)
# and Java (scripts/jvm_classes.py, about 20 s): a spark-submit child then starts 2-3 s
# sooner (CONTRIBUTING.md). A JVM whose class path or Java differs (the standalone
# cluster's daemons, the wheel's virtualenv) ignores the archive; -Xlog silences the
# JVM's warning that it did.
archive_key="$(printf '%s\n%s\n%s' "$want" "$java_bin" "$java_version" | cksum | cut -d' ' -f1)"
archive="$VENV/spark-classes-$archive_key.jsa"
if [ ! -s "$archive" ]; then
  echo "writing the JVM class archive $archive (once)" >&2
  rm -f "$VENV"/spark-classes-*.jsa  # those of earlier packages or Java
  if "$VENV/bin/spark-submit" --driver-java-options "-XX:ArchiveClassesAtExit=$archive.$$" \
       scripts/jvm_classes.py >"$VENV/jvm-classes.log" 2>&1 &&
     [ -s "$archive.$$" ]; then
    mv "$archive.$$" "$archive"
  else
    rm -f "$archive.$$"
    echo "note: no JVM class archive (see $VENV/jvm-classes.log); the tests run without" >&2
  fi
fi
if [ -s "$archive" ]; then
  JDK_JAVA_OPTIONS="$JDK_JAVA_OPTIONS -XX:SharedArchiveFile=$archive -Xlog:cds=off -Xlog:cds+dynamic=off"
fi

# The one definition of the fast selection: no child processes (spark-submit, servers).
FAST="not slow and not heavy and not standalone and not connect and not s3"

args=()
fast=0
narrow=0
for arg in "$@"; do
  case "$arg" in
    --fast) fast=1 ;;
    -k | -x | --pdb | --lf | -n | --numprocesses) narrow=1; args+=("$arg") ;;
    tests/* | lsh_spark/* | docs/* | ./*) narrow=1; args+=("$arg") ;;
    *) args+=("$arg") ;;
  esac
done
if [ "$fast" = 1 ]; then args=(-m "$FAST" "${args[@]}"); fi

cores="$(nproc 2>/dev/null || echo 2)"
default_workers=$((cores < 4 ? cores : 4))
# The fast selection is CPU-bound in one local[2] session: more workers only compete.
if [ "$narrow" = 1 ] || [ "$fast" = 1 ]; then default_workers=0; fi
workers="${LSH_SPARK_TEST_WORKERS:-$default_workers}"
if [ "$workers" -gt 1 ]; then
  # loadscope: a module's tests stay on one worker, so module-scoped fixtures (one
  # pipeline run read by several tests) are built once.
  args=(-n "$workers" --dist loadscope "${args[@]}")
fi
exec "$VENV/bin/python" -m pytest "${args[@]}"
