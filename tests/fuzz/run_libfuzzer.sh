#!/usr/bin/env bash
# run_libfuzzer.sh -- `make fuzz`: every target of tests/fuzz/ under libFuzzer
# (clang, AddressSanitizer + UndefinedBehaviorSanitizer), SECONDS each.
#
# The corpus of each target lives in FUZZ_BUILD/corpus/<target> and grows
# from run to run; it starts from the target's seeds (written by the plain
# build's binary) and the inputs kept in tests/fuzz/regress/<target>. A crash
# leaves its input in FUZZ_BUILD/artifacts/ and makes the run fail; copy it
# into tests/fuzz/regress/<target>/ with the fix, so `make test` replays it.
# Usage: run_libfuzzer.sh BUILD FUZZ_BUILD SECONDS [TARGET...]
set -euo pipefail
build=$1
fuzz_build=$2
seconds=$3
shift 3
src=$(cd "$(dirname "$0")" && pwd)
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in "$src"/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
fi
cmake --build "$fuzz_build" -j "$(nproc)" --target "${targets[@]}"
# The targets' scratch files (fuzz_scratch) in a directory of this run's,
# removed at its end: libFuzzer ends a crashed or timed-out target without
# the atexit handler that removes them.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/wm-fuzz-run-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch
mkdir -p "$fuzz_build/artifacts"
failed=()
for t in "${targets[@]}"; do
  corpus="$fuzz_build/corpus/$t"
  mkdir -p "$corpus"
  "$build/fuzz/$t" --seeds "$corpus" >/dev/null
  if [ -d "$src/regress/$t" ]; then cp -n "$src/regress/$t"/* "$corpus"/ 2>/dev/null || true; fi
  echo "== $t: ${seconds}s"
  if ! "$fuzz_build/fuzz/$t" -max_total_time="$seconds" -print_final_stats=1 \
       -artifact_prefix="$fuzz_build/artifacts/$t-" "$corpus" >"$fuzz_build/$t.log" 2>&1; then
    failed+=("$t")
    tail -40 "$fuzz_build/$t.log"
  fi
  grep -E "^stat::(number_of_executed_units|new_units_added)|^Done" "$fuzz_build/$t.log" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${failed[*]} crashed; inputs in $fuzz_build/artifacts/"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, nothing found"
