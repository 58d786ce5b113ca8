#!/usr/bin/env bash
# Builds a class-data sharing (CDS) archive for the Spark driver JVM.
#
# Usage: bash scripts/build-cds-archive.sh ARCHIVE
#
# A JVM that starts from a dynamic CDS archive (JEP 350, Java 13+) maps the
# classes it lists, already parsed and verified, instead of loading them one by
# one from the jars; Spark's driver loads about 15,000 classes before and during
# its first jobs. The archive is recorded by one run of jobs/dedup.py on the
# bundled sample corpus (about 40 s, once per virtualenv and Java version) and
# only holds classes of the JDK and of Spark's own jars. A JVM whose class path
# or Java version differs from the recorded one ignores the archive and starts
# as usual. Called by scripts/setup-env.sh; see README.md, "Start-up time".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
archive="${1:?usage: build-cds-archive.sh ARCHIVE}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The recording run must not itself start from an archive.
SPARK_SUBMIT_OPTS="" spark-submit --master "local[2]" --driver-memory 2g \
  --driver-java-options "-XX:ArchiveClassesAtExit=$work/driver.jsa -Dlog4j2.configurationFile=file:$ROOT/conf/log4j2.properties" \
  "$ROOT/jobs/dedup.py" --input "$ROOT/data/sample/corpus.jsonl" --output "$work/out" \
  >"$work/log" 2>&1 || { tail -n 20 "$work/log" >&2; exit 1; }
[ -s "$work/driver.jsa" ] || { echo "no archive was written" >&2; exit 1; }
mv "$work/driver.jsa" "$archive"
