#!/usr/bin/env bash
# run_target.sh -- one fuzz target in the default suite: write its seeds into
# a scratch directory, then run them, every input kept in tests/fuzz/regress/
# for it (inputs that once crashed a target), and FUZZ_MUTANTS (default 200)
# deterministic mutants of each.
# The target's scratch files (fuzz_scratch) go under the same directory as
# the seeds, so they are removed even when the target crashes before its
# atexit handler runs.
# Usage: run_target.sh TARGET_BINARY REGRESS_DIR
set -euo pipefail
bin=$1
regress=$2
root=$(mktemp -d "${TMPDIR:-/tmp}/wm-fuzz-run-XXXXXX")
trap 'rm -rf "$root"' EXIT
dir=$root/seeds
mkdir "$dir" "$root/tmp"
export TMPDIR=$root/tmp
"$bin" --seeds "$dir"
inputs=("$dir")
[ -d "$regress" ] && [ -n "$(ls -A "$regress" 2>/dev/null)" ] && inputs+=("$regress")
"$bin" --mutate "${FUZZ_MUTANTS:-200}" "${inputs[@]}"
