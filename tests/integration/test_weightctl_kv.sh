#!/usr/bin/env bash
# test_weightctl_kv.sh -- weightctl as a user drives the plain KV store of a
# real master (weight plugin disabled: the fallback mode): status, kv put,
# get (byte for byte), ls, rm, and the failures' exit codes and messages.
set -uo pipefail
: "${BUILD_DIR:?}"
ctl="$BUILD_DIR/bin/weightctl"
tmp=$(mktemp -d /tmp/wm-ctl-XXXXXX)
pass=0 fail=0
ok()  { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
cat >"$tmp/master.yaml" <<YAML
listen:
  tcp: ""
  unix: "$tmp/master.sock"
  admin: ""
data_dir: "$tmp/data"
node:
  segment_dir: "$tmp/shm"
  segment_bytes: 16777216
plugins:
  - path: "$BUILD_DIR/lib/weight_mgmt.so"
    enabled: false
YAML
pid=""
trap '[ -n "$pid" ] && { kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null; }; rm -rf "$tmp"' EXIT
. "$(dirname "$0")/weightctl_lib.sh"
start_master "$tmp/master.yaml"

out=$("$ctl" status --bytes); rc=$?
[ $rc -eq 0 ] && grep -q "^nodes *1" <<<"$out" && grep -q "16777216 bytes" <<<"$out" \
  && ok "status answers: one node, its capacity" || bad "status: $rc $out"
json=$("$ctl" --json status)
grep -q '"nodes":1' <<<"$json" && ok "status --json" || bad "status --json: $json"

head -c 300000 /dev/urandom >"$tmp/blob"
"$ctl" kv put models/blob "$tmp/blob" && ok "kv put" || bad "kv put"
"$ctl" kv get models/blob "$tmp/back" && cmp -s "$tmp/blob" "$tmp/back" \
  && ok "kv get returns the same bytes" || bad "kv get differs"
: >"$tmp/empty"
"$ctl" kv put models/empty "$tmp/empty" && "$ctl" kv get models/empty "$tmp/empty.back" \
  && [ ! -s "$tmp/empty.back" ] && ok "empty object round trip" || bad "empty object"
"$ctl" kv put other/x "$tmp/blob" >/dev/null
[ "$("$ctl" kv ls models/ | tr '\n' ' ')" = "models/blob models/empty " ] \
  && ok "kv ls PREFIX" || bad "kv ls: $("$ctl" kv ls models/)"
[ "$("$ctl" --json kv ls models/)" = '["models/blob","models/empty"]' ] \
  && ok "kv ls --json" || bad "kv ls --json"

err=$("$ctl" kv put models/blob "$tmp/blob" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "SMP_EEXIST" <<<"$err" && ok "put of an existing key refused: $err" || bad "dup put: $rc $err"
err=$("$ctl" kv get nope "$tmp/nope" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "SMP_ENOTFOUND" <<<"$err" && [ ! -e "$tmp/nope" ] \
  && ok "get of a missing key: error, no file" || bad "get missing: $rc $err"
err=$("$ctl" kv put k "$tmp/does-not-exist" 2>&1); rc=$?
[ $rc -eq 1 ] && ok "put of a missing file: exit 1" || bad "put missing file: $rc"
"$ctl" kv rm other/x && ! "$ctl" kv get other/x "$tmp/x" 2>/dev/null && ok "kv rm" || bad "kv rm"
"$ctl" kv frobnicate >/dev/null 2>&1; [ $? -eq 2 ] && ok "unknown command: usage, exit 2" || bad "usage"
out=$("$ctl" ls 2>"$tmp/ls.err"); rc=$?
[ $rc -eq 1 ] && [ -z "$out" ] && [ "$(wc -l <"$tmp/ls.err")" -eq 1 ] \
  && ok "ls with the weight plugin disabled: no table header, '$(cat "$tmp/ls.err")'" || bad "ls disabled: $rc [$out] $(cat "$tmp/ls.err")"

kill -TERM $pid; wait $pid; rc=$?
[ $rc -eq 0 ] && grep -q "signal 15, shutting down" "$tmp/master.log" \
  && ! grep -q "lost the master\|registering again" "$tmp/master.log" \
  && ok "SIGTERM: exit 0, the embedded node says nothing of losing its master" \
  || bad "SIGTERM stop: $rc $(tail -3 "$tmp/master.log")"
pid=""
err=$("$ctl" status 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "cannot reach the master" <<<"$err" && ok "status without a master exits 1" || bad "dead master: $rc"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
