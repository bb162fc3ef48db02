#!/usr/bin/env bash
# valgrind_unit.sh -- run every unit test program under valgrind memcheck,
# as many at once as there are cores (each program is one process).
# Usage: scripts/valgrind_unit.sh BUILD_DIR. Fails on any error or leak;
# each program's output is in BUILD_DIR/NAME.valgrind.log.
set -uo pipefail
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc 2>/dev/null || echo 2)

# One program: prints "pass NAME" or "fail NAME" and, on failure, its log's tail.
run_one() {
  local build=$1 c=$2 name bin
  name=$(basename "$c" .c)
  bin="$build/tests/$name"
  if [ ! -x "$bin" ]; then echo "fail $name (missing: $bin)"; return; fi
  if valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect \
       "$bin" >"$build/$name.valgrind.log" 2>&1; then
    echo "pass $name"
  else
    { echo "fail $name (see $build/$name.valgrind.log)"; tail -30 "$build/$name.valgrind.log"; } | sed '2,$s/^/  /'
  fi
}
export -f run_one

out=$(printf '%s\0' "$src"/tests/unit/test_*.c | xargs -0 -n1 -P "$jobs" bash -c 'run_one "$0" "$1"' "$build")
grep -v '^pass ' <<<"$out" | sed 's/^fail /valgrind: /'
passed=$(grep -c '^pass ' <<<"$out")
failed=$(grep -c '^fail ' <<<"$out")
echo "valgrind: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
