# weightctl_lib.sh -- what the weightctl scripts share (sourced, not run):
# the weight scripts' master config; start a store_master on a config and
# wait until its embedded node serves; what the master holds;
# write safetensors files and compare them (mk_st and st_same need $py, a
# Python 3).
#
# weight_master_yaml FILE NODE_ID SEGMENT_BYTES: the config the weight
# scripts run on -- a Unix socket in $tmp, no TCP or admin port, data in
# $tmp/data, the embedded node's segment in $shm, weight_mgmt.so with a
# 50 ms tick, revisions HOT and MANUAL by default (nothing moves by itself).
weight_master_yaml() {
  cat >"$1" <<YAML
listen:
  tcp: ""
  unix: "$tmp/master.sock"
  admin: ""
data_dir: "$tmp/data"
node:
  embedded: true
  id: "$2"
  segment_dir: "$shm"
  segment_bytes: $3
cluster:
  default_weight_preferred_residency: hot
  default_weight_migration_mode: manual
plugins:
  - path: "$BUILD_DIR/lib/weight_mgmt.so"
    config:
      tick_period_ms: 50
YAML
}

# state: what the master holds (every revision, tombstones too, and the
# keys), to compare before and after a refused command.
state() { "$ctl" --json ls --all; "$ctl" kv ls; }

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

# Safetensors files written by the test, independently of the client library:
# mk_st PATH NAME:ROWS:COLS... (F32, random bytes, names sorted).
mk_st() {
  "$py" - "$@" <<'PY'
import json, os, struct, sys
path, specs = sys.argv[1], sorted(sys.argv[2:])
header, blobs, at = {}, [], 0
for spec in specs:
    name, rows, cols = spec.split(":")
    n = int(rows) * int(cols) * 4
    header[name] = {"dtype": "F32", "shape": [int(rows), int(cols)], "data_offsets": [at, at + n]}
    blobs.append(os.urandom(n))
    at += n
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for b in blobs:
        f.write(b)
PY
}
# st_same A B: the two safetensors files hold the same tensors, byte for byte.
st_same() {
  "$py" - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    d = open(p, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n])
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items()}
sys.exit(0 if load(sys.argv[1]) == load(sys.argv[2]) else 1)
PY
}
