# weightctl_lib.sh -- what the weightctl scripts share (sourced, not run):
# start a store_master on a config and wait until its embedded node serves.
#
# start_master CONFIG: starts $BUILD_DIR/bin/store_master --config CONFIG in
# the background with its stderr in $tmp/master.log, sets pid, points
# weightctl at $tmp/master.sock (WEIGHTCTL_MASTER) and waits up to 15 s for
# `status` to report one node. Needs $tmp (the test's directory) and $ctl
# (the weightctl binary); the caller's EXIT trap stops $pid.
start_master() {
  "$BUILD_DIR/bin/store_master" --config "$1" 2>"$tmp/master.log" &
  pid=$!
  export WEIGHTCTL_MASTER="$tmp/master.sock"
  for _ in $(seq 300); do
    "$ctl" status 2>/dev/null | grep -q "^nodes *1" && break
    sleep 0.05
  done
}
