#!/usr/bin/env bash
# run_all.sh -- every benchmark, each printing its figure next to a baseline
# measured in the same run. Usage: bench/run_all.sh BUILD_DIR [DATA_DIR]
set -euo pipefail
build=${1:-build}
dir=${2:-/tmp}
for b in "$build"/bench/bench_*; do
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b" "$dir"
done
