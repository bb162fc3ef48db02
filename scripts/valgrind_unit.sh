#!/usr/bin/env bash
# valgrind_unit.sh -- run every unit test program under valgrind memcheck.
# Usage: scripts/valgrind_unit.sh BUILD_DIR. Fails on any error or leak.
set -uo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
failed=0 passed=0
for c in "$src"/tests/unit/test_*.c; do
  name=$(basename "$c" .c)
  bin="$build/tests/$name"
  [ -x "$bin" ] || { echo "valgrind: $bin missing"; failed=$((failed + 1)); continue; }
  if valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect \
       "$bin" >"$build/$name.valgrind.log" 2>&1; then
    passed=$((passed + 1))
  else
    echo "valgrind: $name failed (see $build/$name.valgrind.log)"; tail -30 "$build/$name.valgrind.log"
    failed=$((failed + 1))
  fi
done
echo "valgrind: $passed passed, $failed failed"
[ $failed -eq 0 ]
