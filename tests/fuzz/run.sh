#!/bin/sh
# Runs one libFuzzer target for MCPSUB_FUZZ_SECONDS (default 12) from its
# seed corpus, writing what it finds to a corpus directory in the build
# tree (and crash files to the current directory). Exits non-zero on a crash.
# usage: run.sh TARGET SEED_DIR WORK_DIR
set -eu
target=$1 seeds=$2 work=$3
mkdir -p "$work"
exec "$target" -max_total_time="${MCPSUB_FUZZ_SECONDS:-12}" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$work/" \
  -print_final_stats=1 "$work" "$seeds"
