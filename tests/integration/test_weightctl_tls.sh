#!/usr/bin/env bash
# test_weightctl_tls.sh -- weightctl's TLS flags (--tls-ca, --tls-cert,
# --tls-key, --tls-server-name) against a real store_master whose TCP port
# speaks TLS 1.3 and verifies client certificates, and a real store_node
# whose data port speaks TLS 1.3 only. Auth is on, so the shared node is
# written and read through its data port (a client is never handed its
# segment). Certificates are made by the test with the openssl CLI in its
# own directory; WM_TLS_* and WEIGHT_TOKEN are cleared, so only flags speak.
#
# Shows: a put / ls / get round trip of a small revision (the tensors
# compared byte for byte, no byte through a mapping) and a kv put / get
# through the node's data port, with the flags only; an admin call (plugin
# list) over TLS; --tls-server-name (a name the certificate carries is
# served, another refused naming it); a flag wins over its variable (a
# wrong CA in $WM_TLS_CA is ignored under --tls-ca, a wrong --tls-ca is not
# rescued by a right $WM_TLS_CA); the variables still serve alone; weightctl
# without TLS flags is refused by the TLS master saying it speaks TLS. Every
# bad setting (a missing file, an unreadable key, a key that is a directory
# or not a key, a certificate without its key and the reverse, a key not the
# certificate's, a CA that is not PEM, a certificate or a server name
# without a CA, an empty value) exits 2 with one line naming the flag and the
# file, before anything connects: a listening socket given as the master
# accepts nothing, and the same put at the real master changes nothing.
set -uo pipefail
: "${BUILD_DIR:?}"
ctl="$BUILD_DIR/bin/weightctl"
py=/usr/bin/python3
unset WM_TLS_CA WM_TLS_CERT WM_TLS_KEY WEIGHT_TOKEN WEIGHTCTL_MASTER WEIGHTCTL_TENANT
tmp=$(mktemp -d /tmp/wm-ctltls-XXXXXX)
shm=$(mktemp -d /dev/shm/wm-ctltls-XXXXXX)
pass=0 fail=0
ok()  { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
pid="" node="" listener=""
cleanup() {
  for p in $listener $node $pid; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$tmp" "$shm"
}
trap cleanup EXIT
. "$(dirname "$0")/weightctl_lib.sh"

# -- certificates (as tests/integration/harness.c hx_make_certs) and tokens ---
(cd "$tmp" && exec >certs.log 2>&1 &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=test-ca -keyout ca.key -out ca.pem &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
    -keyout server.key -out server.csr &&
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext &&
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile san.ext -out server.pem &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=client \
    -keyout client.key -out client.csr &&
  openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -out client.pem &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=other-ca -keyout other.key -out other-ca.pem) || { echo "openssl failed"; exit 1; }
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/admin.token"
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/writer.token"
sha() { sha256sum <"$1" | cut -d' ' -f1; }
port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
tcp="127.0.0.1:$port"

cat >"$tmp/master.yaml" <<YAML
listen:
  tcp: "$tcp"
  unix: "$tmp/master.sock"
  admin: ""
data_dir: "$tmp/data"
node:
  embedded: false
tls:
  cert: "$tmp/server.pem"
  key: "$tmp/server.key"
  ca: "$tmp/ca.pem"
  verify_clients: true
auth:
  enabled: true
  tokens:
    - {sha256: $(sha "$tmp/admin.token"), tenant: ops, role: admin}
    - {sha256: $(sha "$tmp/writer.token"), tenant: acme, role: writer}
cluster:
  default_weight_preferred_residency: hot
  default_weight_migration_mode: manual
plugins:
  - path: "$BUILD_DIR/lib/weight_mgmt.so"
YAML
"$BUILD_DIR/bin/store_master" --config "$tmp/master.yaml" 2>"$tmp/master.log" &
pid=$!
for _ in $(seq 300); do [ -S "$tmp/master.sock" ] && break; sleep 0.05; done
mkdir -p "$tmp/cold"
"$BUILD_DIR/bin/store_node" --master "$tmp/master.sock" --id "ctltls$$" --segment-dir "$shm" \
  --segment-bytes 16777216 --cold-dir "$tmp/cold" --listen 127.0.0.1:0 \
  --token-file "$tmp/admin.token" --data-tls-cert "$tmp/server.pem" \
  --data-tls-key "$tmp/server.key" 2>"$tmp/node.log" &
node=$!
# status over the Unix socket (plaintext, a local peer) with the admin token
for _ in $(seq 300); do
  "$ctl" --master "$tmp/master.sock" --token-file "$tmp/admin.token" status 2>/dev/null \
    | grep -q "^nodes *1" && break
  sleep 0.05
done
data_port=$(sed -n 's/.*data port \([0-9]*\) (TLS).*/\1/p' "$tmp/node.log")
[ -n "$data_port" ] && ok "store_node serves its data port $data_port with TLS only" \
  || bad "node log: $(cat "$tmp/node.log")"

# The data port refuses a plaintext peer in plaintext: it really speaks TLS.
said=$("$py" - "$data_port" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"\0" * 64)
got = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    got += b
print(got.replace(b"\0", b"").decode("latin-1"))
PY
)
grep -q "speaks TLS" <<<"$said" && ok "a plaintext peer on the data port is refused: TLS only" \
  || bad "plaintext on the data port: [$said]"

# tctl ARGS: weightctl at the TLS master as acme's writer, with the flags only.
tflags=(--master "$tcp" --token-file "$tmp/writer.token" --tls-ca "$tmp/ca.pem"
        --tls-cert "$tmp/client.pem" --tls-key "$tmp/client.key")
tctl() { "$ctl" "${tflags[@]}" "$@"; }
state() { tctl --json ls --all; }

# -- the round trip with the flags only -------------------------------------
mk_st "$tmp/model.safetensors" embed.weight:64:32 layers.0.weight:32:32 norm.weight:1:32
out=$(tctl put --namespace llm --resource tiny --revision v1 "$tmp/model.safetensors" 2>&1); rc=$?
[ $rc -eq 0 ] && ok "put over TLS (flags only)" || bad "put: $rc $out"
out=$(tctl ls 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "llm/tiny/v1@1" <<<"$out" && grep -q "READY" <<<"$out" \
  && ok "ls over TLS shows the revision READY" || bad "ls: $rc $out"
out=$(tctl --json get llm/tiny/v1 --out "$tmp/back" 2>&1); rc=$?
back=$(ls "$tmp"/back/*.safetensors 2>/dev/null | head -1)
if [ $rc -eq 0 ] && [ -n "$back" ] && st_same "$tmp/model.safetensors" "$back" \
   && grep -q '"local_bytes":0[,}]' <<<"$out" && ! grep -q '"bytes":0[,}]' <<<"$out"; then
  ok "get over TLS: every tensor byte for byte, all through the node's data port"
else
  bad "get: $rc $out"
fi
head -c 200000 /dev/urandom >"$tmp/blob"
tctl kv put acme/blob "$tmp/blob" && tctl kv get acme/blob "$tmp/blob.back" \
  && cmp -s "$tmp/blob" "$tmp/blob.back" && ok "kv put / get over TLS, bytes exact" \
  || bad "kv put/get over TLS"
out=$("$ctl" --master "$tcp" --token-file "$tmp/admin.token" --tls-ca "$tmp/ca.pem" \
  --tls-cert "$tmp/client.pem" --tls-key "$tmp/client.key" plugin list 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "weight_mgmt" <<<"$out" && ok "an admin call (plugin list) over TLS" \
  || bad "plugin list: $rc $out"

# -- --tls-server-name --------------------------------------------------------
out=$(tctl --tls-server-name localhost exists llm/tiny/v1@1 2>&1); rc=$?
[ $rc -eq 0 ] && ok "--tls-server-name localhost (in the certificate) served at 127.0.0.1" \
  || bad "server name localhost: $rc $out"
out=$(tctl --tls-server-name weights.example.com exists llm/tiny/v1@1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "weights.example.com" <<<"$out" \
  && ok "--tls-server-name not in the certificate refused: $out" || bad "wrong server name: $rc $out"

# -- flags over the environment, and the environment alone -------------------
out=$(WM_TLS_CA="$tmp/other-ca.pem" tctl exists llm/tiny/v1@1 2>&1); rc=$?
[ $rc -eq 0 ] && ok "--tls-ca wins over a wrong \$WM_TLS_CA" || bad "flag over env: $rc $out"
out=$(WM_TLS_CA="$tmp/ca.pem" "$ctl" --master "$tcp" --token-file "$tmp/writer.token" \
  --tls-ca "$tmp/other-ca.pem" --tls-cert "$tmp/client.pem" --tls-key "$tmp/client.key" \
  exists llm/tiny/v1@1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "not trusted" <<<"$out" \
  && ok "a wrong --tls-ca is not rescued by \$WM_TLS_CA: $out" || bad "wrong flag, right env: $rc $out"
out=$(WM_TLS_CA="$tmp/ca.pem" WM_TLS_CERT="$tmp/client.pem" WM_TLS_KEY="$tmp/client.key" \
  "$ctl" --master "$tcp" --token-file "$tmp/writer.token" get llm/tiny/v1 --out "$tmp/env" 2>&1); rc=$?
[ $rc -eq 0 ] && st_same "$tmp/model.safetensors" "$(ls "$tmp"/env/*.safetensors | head -1)" \
  && ok "\$WM_TLS_* alone still serve (get, tensors exact)" || bad "env only: $rc $out"

# -- no TLS flags: the TLS master refuses, nothing changes --------------------
before=$(state)
out=$("$ctl" --master "$tcp" --token-file "$tmp/writer.token" put --namespace llm \
  --resource tiny --revision plain "$tmp/model.safetensors" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "speaks TLS" <<<"$out" && [ "$(state)" = "$before" ] \
  && ok "no TLS flags: refused by the TLS master, nothing changed: $out" || bad "plaintext: $rc $out"
out=$("$ctl" --master "$tcp" --token-file "$tmp/writer.token" --tls-ca "$tmp/ca.pem" \
  exists llm/tiny/v1@1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "certificate required (this master verifies clients" <<<"$out" \
  && [ "$(state)" = "$before" ] \
  && ok "no client certificate for a master that verifies clients: refused: $out" \
  || bad "no client cert: $rc $out"

# -- bad settings: exit 2, one line, nothing contacted or changed -------------
# A "master" that only counts the connections made to it.
"$py" - "$tmp/listener.port" "$tmp/listener.count" <<'PY' &
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
n = 0
while True:
    c, _ = s.accept()
    n += 1
    open(sys.argv[2], "w").write(str(n))
    c.close()
PY
listener=$!
for _ in $(seq 100); do [ -s "$tmp/listener.port" ] && break; sleep 0.05; done
trap_master="127.0.0.1:$(cat "$tmp/listener.port")"
printf 'this is not a certificate\n' >"$tmp/garbage.pem"
mkdir "$tmp/keydir"
cp "$tmp/client.key" "$tmp/locked.key"
chmod 000 "$tmp/locked.key"
chmod 755 "$tmp"                         # nobody may reach the other files
chmod 644 "$tmp"/*.pem "$tmp/writer.token" "$tmp/model.safetensors"
missing="$tmp/no-such.pem"
# refused NAME WANT_LINE [VAR=VALUE...] -- TLS_ARGS...: weightctl put with
# the writer's token and TLS_ARGS (env VAR=VALUE set) exits 2 with exactly
# WANT_LINE, at the counting listener (no connection) and at the master
# (nothing changed).
refused() {
  local name=$1 want=$2 envs=() err rc1 rc2 before
  shift 2
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$ctl" --master "$trap_master" --token-file "$tmp/writer.token" "$@" \
    put --namespace llm --resource tiny --revision bad "$tmp/model.safetensors" >/dev/null 2>"$tmp/err"
  rc1=$?
  err=$(cat "$tmp/err")
  before=$(state)
  env "${envs[@]}" "$ctl" --master "$tcp" --token-file "$tmp/writer.token" "$@" \
    put --namespace llm --resource tiny --revision bad "$tmp/model.safetensors" >/dev/null 2>&1
  rc2=$?
  if [ $rc1 -eq 2 ] && [ $rc2 -eq 2 ] && [ "$err" = "$want" ] && [ ! -e "$tmp/listener.count" ] \
     && [ "$(state)" = "$before" ]; then
    ok "$name: '$err'"
  else
    bad "$name: rc $rc1/$rc2, stderr [$err], want [$want], connections $(cat "$tmp/listener.count" 2>/dev/null)"
  fi
}
ca=(--tls-ca "$tmp/ca.pem")
refused "missing CA file" "weightctl: --tls-ca $missing: cannot open: No such file or directory" \
  -- --tls-ca "$missing"
refused "missing certificate file" \
  "weightctl: --tls-cert $missing: cannot open: No such file or directory" \
  -- "${ca[@]}" --tls-cert "$missing" --tls-key "$tmp/client.key"
refused "missing key file" "weightctl: --tls-key $missing: cannot open: No such file or directory" \
  -- "${ca[@]}" --tls-cert "$tmp/client.pem" --tls-key "$missing"
refused "key that is a directory" "weightctl: --tls-key $tmp/keydir: not a regular file" \
  -- "${ca[@]}" --tls-cert "$tmp/client.pem" --tls-key "$tmp/keydir"
refused "key file that holds no key" \
  "weightctl: --tls-key $tmp/garbage.pem: holds no unencrypted PEM private key" \
  -- "${ca[@]}" --tls-cert "$tmp/client.pem" --tls-key "$tmp/garbage.pem"
refused "key of another certificate" \
  "weightctl: --tls-key $tmp/other.key is not the private key of --tls-cert $tmp/client.pem" \
  -- "${ca[@]}" --tls-cert "$tmp/client.pem" --tls-key "$tmp/other.key"
refused "certificate without its key" \
  "weightctl: --tls-cert $tmp/client.pem without --tls-key: a client certificate and its key come together" \
  -- "${ca[@]}" --tls-cert "$tmp/client.pem"
refused "key without its certificate" \
  "weightctl: --tls-key $tmp/client.key without --tls-cert: a client certificate and its key come together" \
  -- "${ca[@]}" --tls-key "$tmp/client.key"
refused "flag key does not pair with \$WM_TLS_CERT" \
  "weightctl: --tls-key $tmp/client.key without --tls-cert: a client certificate and its key come together" \
  WM_TLS_CERT="$tmp/client.pem" -- "${ca[@]}" --tls-key "$tmp/client.key"
refused "CA that is not PEM" "weightctl: --tls-ca $tmp/garbage.pem: holds no PEM CA certificate" \
  -- --tls-ca "$tmp/garbage.pem"
refused "certificate without a CA" \
  "weightctl: --tls-cert needs --tls-ca (or \$WM_TLS_CA): the CA the master's certificate chains to" \
  -- --tls-cert "$tmp/client.pem" --tls-key "$tmp/client.key"
refused "server name without a CA" \
  "weightctl: --tls-server-name needs --tls-ca (or \$WM_TLS_CA): without a CA nothing speaks TLS" \
  -- --tls-server-name localhost
refused "empty --tls-ca" "weightctl: --tls-ca: the value is empty" -- --tls-ca=
refused "bad \$WM_TLS_CA" "weightctl: \$WM_TLS_CA $tmp/garbage.pem: holds no PEM CA certificate" \
  WM_TLS_CA="$tmp/garbage.pem" --
# An unreadable key: as root every file is readable, so as nobody.
if setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
  err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$ctl" --master "$trap_master" \
    --token-file "$tmp/writer.token" "${ca[@]}" --tls-cert "$tmp/client.pem" \
    --tls-key "$tmp/locked.key" put --namespace llm --resource tiny --revision bad \
    "$tmp/model.safetensors" 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] && [ "$err" = "weightctl: --tls-key $tmp/locked.key: cannot open: Permission denied" ] \
    && [ ! -e "$tmp/listener.count" ] && ok "unreadable key: '$err'" || bad "unreadable key: $rc [$err]"
else
  bad "setpriv cannot switch to uid 65534 here: the unreadable-key case did not run"
fi
# The counter counts: a plaintext weightctl does connect to it.
"$ctl" --master "$trap_master" --token-file "$tmp/writer.token" ls >/dev/null 2>&1
for _ in $(seq 100); do [ -e "$tmp/listener.count" ] && break; sleep 0.05; done
[ -e "$tmp/listener.count" ] && ok "the counting listener sees a connection when one is made" \
  || bad "the counting listener saw nothing"
out=$(state)
grep -q '"revision":"bad"' <<<"$out" && bad "a refused put left revision bad: $out" \
  || ok "no refused setting left anything on the master"
kill -0 $pid 2>/dev/null && kill -0 $node 2>/dev/null && ok "master and node alive" \
  || bad "master or node died"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
