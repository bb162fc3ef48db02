#!/usr/bin/env bash
# run_all.sh -- every benchmark, each printing its figure next to a baseline
# measured in the same run (`make bench`). Usage: bench/run_all.sh BUILD_DIR [DIR]
# DIR is the disk directory for OpLog, snapshot and cold-tier files (default
# /tmp); memory segments go to /dev/shm. Each program also prints its headline
# figures as "summary | ..." lines (bench/bench_summary.h); they are gathered
# into one table, printed at the end and written to BUILD_DIR/bench/summary.md.
set -euo pipefail
build=${1:-build}
dir=${2:-/tmp}
log="$build/bench/run_all.log"
summary="$build/bench/summary.md"
: > "$log"
run() { echo "== $*" | tee -a "$log"; "$@" 2>&1 | tee -a "$log"; echo; }
run "$build/bench/bench_oplog" "$dir" 2
run "$build/bench/bench_master_mutations" "$dir" 3
run "$build/bench/bench_master_mutations" "$dir" 3 instructions
run "$build/bench/bench_data_plane" 2048 "$dir"
run "$build/bench/bench_weight_get" 4 "$dir"
run "$build/bench/bench_reshard_plan"
run "$build/bench/bench_master_mutations" "$dir" 3 etcd 1,64
run "$build/bench/bench_etcd_oplog" 3
run "$build/bench/bench_etcd_oplog" 3 tls
run "$build/bench/bench_ha_failover" 5
run "$build/bench/bench_metadata_reads" "$dir" 100000 3
run "$build/bench/bench_plugin_reload" 4 10 "$dir"
run "$build/bench/bench_upsert" 20 "$dir"
BUILD_DIR="$build" run /usr/bin/python3 bench/bench_python_get.py

{
  echo "# weight_mgmt benchmarks"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); disk files in $dir. Each ratio is figure / baseline measured in the same run."
  echo
  echo "| measurement | figure | baseline (same run) | ratio | asked |"
  echo "|---|---|---|---|---|"
  grep '^summary | ' "$log" | sed -e 's/^summary | /| /' -e 's/$/ |/'
} > "$summary"
echo "== summary (also in $summary)"
cat "$summary"
