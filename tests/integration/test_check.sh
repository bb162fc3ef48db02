#!/usr/bin/env bash
# test_check.sh -- `store_master --check` on the embedded config reports what
# weight_mgmt.so negotiated, and a bad config (the master's keys or
# weight_mgmt's own block) makes it fail naming the key.
set -uo pipefail
: "${BUILD_DIR:?}" "${SOURCE_DIR:?}"
bin="$BUILD_DIR/bin/store_master"
tmp=$(mktemp -d /tmp/wm-check-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

# The embedded config as shipped, with its plugin path pointing at this build.
sed "s#\.\./build/lib/weight_mgmt\.so#$BUILD_DIR/lib/weight_mgmt.so#" \
  "$SOURCE_DIR/config/embedded.yaml" >"$tmp/embedded.yaml"
grep -q "$BUILD_DIR/lib/weight_mgmt.so" "$tmp/embedded.yaml" || { echo "FAIL: embedded.yaml has no plugin path to rewrite"; exit 1; }
out=$("$bin" --config "$tmp/embedded.yaml" --check 2>&1); rc=$?
[ $rc -eq 0 ] && ok "embedded config checks" || bad "embedded config: exit $rc: $out"
for line in \
  "type 8 WEIGHT_METADATA_UPSERT encver 1..2 gate weight_management_oplog_capability_confirmed" \
  "type 9 WEIGHT_METADATA_DELETE encver 1..2 gate weight_management_oplog_capability_confirmed" \
  "type 10 WEIGHT_LEASE_UPSERT encver 1..1 gate weight_management_oplog_capability_confirmed" \
  "type 11 WEIGHT_LEASE_DELETE encver 1..1 gate weight_management_oplog_capability_confirmed" \
  "type 12 WEIGHT_LINEAGE_CLAIM encver 1..1 gate weight_lineage_oplog_capability_confirmed" \
  "section weight_metadata encver 1" \
  "guard yes" \
  "tick period 1000 ms leader_only yes" \
  "key space weights/"; do
  grep -qF -- "$line" <<<"$out" && ok "lists: $line" || bad "missing: $line"
done

# The gates: not enforced without HA; with HA, closed in config unless the
# cluster key confirms them (a runtime confirmation is the OpLog's).
grep -qF "gate weight_management_oplog_capability_confirmed types 8 9 10 11: not enforced (ha.enabled is false)" <<<"$out" \
  && ok "gates not enforced without HA" || bad "gate line: $out"
{ cat "$tmp/embedded.yaml"
  printf 'oplog:\n  backend: etcd\nha:\n  enabled: true\n  id: m1\n  etcd_endpoints: "127.0.0.1:1"\n  snapshot_dir: %s/snaps\n' "$tmp"
} | sed 's/weight_management_oplog_capability_confirmed: false/weight_management_oplog_capability_confirmed: true/' >"$tmp/ha.yaml"
out=$("$bin" --config "$tmp/ha.yaml" --check 2>&1); rc=$?
[ $rc -eq 0 ] && ok "HA config checks (no etcd needed)" || bad "HA config: exit $rc: $out"
grep -qF "gate weight_management_oplog_capability_confirmed types 8 9 10 11: confirmed in config" <<<"$out" \
  && ok "a gate confirmed in config" || bad "gate line: $out"
grep -qF "gate weight_lineage_oplog_capability_confirmed types 12: closed in config" <<<"$out" \
  && ok "a gate closed in config" || bad "gate line: $out"

# A first start whose etcd never answers gives up after 10 s, saying so and
# naming the endpoints (a restarted member of a cluster waits instead:
# test_ha_failover).
printf 'listen:\n  tcp: "127.0.0.1:0"\n  unix: ""\n  admin: "127.0.0.1:0"\ndata_dir: %s/data\nnode:\n  embedded: false\noplog:\n  backend: etcd\nha:\n  enabled: true\n  id: m1\n  etcd_endpoints: "127.0.0.1:1"\n  advertise: "127.0.0.1:7"\n  snapshot_dir: %s/snaps\n' "$tmp" "$tmp" >"$tmp/noetcd.yaml"
out=$("$bin" --config "$tmp/noetcd.yaml" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -qF "ha: etcd (ha.etcd_endpoints 127.0.0.1:1) did not answer within 10 s; giving up: " <<<"$out" \
  && [ "$(grep -c "waiting for etcd to answer" <<<"$out")" -le 3 ] \
  && ok "a first start without etcd gives up, says so, and logs its wait sparingly" \
  || bad "no etcd: exit $rc: $out"

# An unknown key: non-zero exit, the key path and line named, nothing started.
printf 'listen:\n  tcp: "127.0.0.1:0"\ncluster:\n  weight_migration_cooldwn_ms: 5\n' >"$tmp/bad.yaml"
out=$("$bin" --config "$tmp/bad.yaml" --check 2>&1); rc=$?
[ $rc -ne 0 ] && ok "unknown key exits $rc" || bad "unknown key accepted"
grep -qF "bad.yaml:4: cluster.weight_migration_cooldwn_ms: unknown key" <<<"$out" \
  && ok "unknown key named with its line" || bad "message: $out"

# A ratio outside (0, 1).
printf 'cluster:\n  default_weight_mixed_hot_ratio: 1.5\n' >"$tmp/ratio.yaml"
out=$("$bin" --config "$tmp/ratio.yaml" --check 2>&1); rc=$?
[ $rc -ne 0 ] && grep -qF "ratio.yaml:2: cluster.default_weight_mixed_hot_ratio: 1.5 is outside (0, 1)" <<<"$out" \
  && ok "ratio outside (0,1) refused" || bad "ratio: exit $rc: $out"

# A plugin refused at load: the cause names the field and both values.
printf 'plugins:\n  - path: "%s/lib/testplugins/bad_major.so"\n' "$BUILD_DIR" >"$tmp/major.yaml"
out=$("$bin" --config "$tmp/major.yaml" --check 2>&1); rc=$?
[ $rc -ne 0 ] && grep -qF "bad_major.so: ABI major 2 does not match host ABI major 1" <<<"$out" \
  && ok "ABI mismatch refused" || bad "abi: exit $rc: $out"

# A plugin that does not exist: the host names the file, the line and the key.
printf 'plugins:\n  - enabled: true\n    path: "%s/nope.so"\n' "$tmp" >"$tmp/missing.yaml"
out=$("$bin" --config "$tmp/missing.yaml" --check 2>&1); rc=$?
[ $rc -ne 0 ] && grep -qF "store_master: $tmp/missing.yaml:3: plugins[0].path: nope.so: cannot load: $tmp/nope.so: " <<<"$out" \
  && ok "missing plugin refused, named with file, line and key" || bad "missing: exit $rc: $out"

# weight_mgmt's own block: every key known, every value in range (the host
# hands the block over unchecked; the plugin lists it, ABI 1.4).
plugin_block() { printf 'plugins:\n  - path: "%s/lib/weight_mgmt.so"\n    config:\n%b' "$BUILD_DIR" "$1"; }
plugin_block '      tick_period_ms: 50\n      import_ttl_ms: 0\n      record_retention_ms: 1000\n      repair_max_attempts: 3\n      degraded_migration_wait_ms: 500\n' >"$tmp/pk.yaml"
out=$("$bin" --config "$tmp/pk.yaml" --check 2>&1); rc=$?
[ $rc -eq 0 ] && ok "every weight_mgmt key accepted" || bad "known keys: exit $rc: $out"
plugin_block '      tick_period_ms: 50\n      import_tll_ms: 5000\n' >"$tmp/pk.yaml"
out=$("$bin" --config "$tmp/pk.yaml" --check 2>&1); rc=$?
[ $rc -ne 0 ] && grep -qF "config key import_tll_ms (line 5): unknown; weight_mgmt reads tick_period_ms, import_ttl_ms" <<<"$out" \
  && grep -qF "store_master: $tmp/pk.yaml:3: plugins[0].config: weight_mgmt.so: init failed: SMP_EINVAL (-1); the plugin's own line above says why (a line number there is a line of $tmp/pk.yaml)" <<<"$out" \
  && ok "unknown weight_mgmt key refused, named with its line; the host names file, line and key" \
  || bad "unknown plugin key: exit $rc: $out"
for case in 'tick_period_ms: 5|5 is outside 10..60000' 'repair_max_attempts: 0|0 is outside 1..1000' \
            'import_ttl_ms: "soon"|"soon" is not an integer in' 'record_retention_ms: -1|-1 is outside 0..' \
            'degraded_migration_wait_ms: 1.5|"1.5" is not an integer in' 'tick_period_ms: "100"|"100" is not an integer in'; do
  bad_value=${case%%|*} want=${case#*|}
  plugin_block "      $bad_value\n" >"$tmp/pk.yaml"
  out=$("$bin" --config "$tmp/pk.yaml" --check 2>&1); rc=$?
  [ $rc -ne 0 ] && grep -qF "config key ${bad_value%%:*} (line 4): $want" <<<"$out" \
    && ok "refused: $bad_value ($want)" || bad "accepted or unnamed: $bad_value: exit $rc: $out"
done

# A quoted number is a string, in weight_mgmt's block as in the host's keys.
plugin_block '      tick_period_ms: "100"\n' >"$tmp/pk.yaml"
out=$("$bin" --config "$tmp/pk.yaml" --check 2>&1)
grep -qF '"100" is not an integer in 10..60000 (a string: quoted, or not a number)' <<<"$out" \
  && ok "a quoted integer is named a string" || bad "quoted: $out"

# A listen address no listener takes (names are not resolved) is refused by
# --check, naming the key and line, as the start would refuse it.
printf 'listen:\n  tcp: "127.0.0.1:0"\n  admin: "example.com:7680"\n' >"$tmp/addr.yaml"
out=$("$bin" --config "$tmp/addr.yaml" --check 2>&1); rc=$?
[ $rc -ne 0 ] && grep -qF 'addr.yaml:3: listen.admin: "example.com:7680" is not "host:port"' <<<"$out" \
  && ok "a host name as listen address refused by --check" || bad "address: exit $rc: $out"

# Two of the master's own listeners on one address and port are refused by
# --check (the start would fail at the second bind), naming both keys and
# lines; the embedded node's data port counts as one of them.
printf 'listen:\n  unix: ""\n  tcp: "127.0.0.1:28610"\n  admin: "127.0.0.1:28610"\n' >"$tmp/twice.yaml"
out=$("$bin" --config "$tmp/twice.yaml" --check 2>&1); rc=$?
[ $rc -ne 0 ] && grep -qF "twice.yaml:4: listen.admin: 127.0.0.1:28610 is also listen.tcp's (line 3): two listeners cannot share an address" <<<"$out" \
  && ok "listen.tcp and listen.admin on one address refused by --check" || bad "twice: exit $rc: $out"
printf 'listen:\n  tcp: "127.0.0.1:28610"\n  admin: "127.0.0.1:0"\nnode:\n  data_listen: "127.0.0.1:28610"\n' >"$tmp/data.yaml"
out=$("$bin" --config "$tmp/data.yaml" --check 2>&1); rc=$?
[ $rc -ne 0 ] && grep -qF "data.yaml:5: node.data_listen: 127.0.0.1:28610 is also listen.tcp's (line 2): two listeners cannot share an address" <<<"$out" \
  && ok "node.data_listen on listen.tcp's address refused by --check" || bad "data: exit $rc: $out"

# The files the config names are read by --check as by the start (one
# function, host_config_load_files): each refusal exits 1 and names the file,
# the line of the value naming it and the key; the start says the same.
( cd "$tmp" && exec >certs.log 2>&1 &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=test-ca \
    -keyout ca.key -out ca.pem &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
    -keyout server.key -out server.csr &&
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out server.pem &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=self \
    -addext subjectAltName=IP:127.0.0.1 -keyout self.key -out self.pem &&
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >srvonly.ext &&
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile srvonly.ext -out srvonly.pem &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=noip \
    -keyout noip.key -out noip.pem &&
  # dated certificates (openssl x509 has no -not_after before 3.4): `openssl
  # ca -selfsign` with explicit dates, one expired, one not yet valid
  printf '[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\ndefault_md = sha256\npolicy = p\ncopy_extensions = copy\nunique_subject = no\n[p]\ncommonName = supplied\n' >dated.cnf &&
  : >index.txt && echo 01 >serial &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=dated \
    -addext subjectAltName=IP:127.0.0.1 -keyout dated.key -out dated.csr &&
  openssl ca -batch -config dated.cnf -selfsign -keyfile dated.key -in dated.csr \
    -startdate 20200101000000Z -enddate 20200102000000Z -out expired.pem &&
  openssl ca -batch -config dated.cnf -selfsign -keyfile dated.key -in dated.csr \
    -startdate 20990101000000Z -enddate 21000101000000Z -out future.pem ) \
  || bad "openssl could not make the test's certificates"
files_check() { # NAME YAML EXPECTED: --check exits 1 saying EXPECTED
  printf 'listen:\n  tcp: "127.0.0.1:0"\n  admin: ""\ndata_dir: %s/files-data\n%bnode:\n  segment_dir: %s/files-shm\n' \
    "$tmp" "$2" "$tmp" >"$tmp/files.yaml" # its own segment dir, should a start get that far
  out=$("$bin" --config "$tmp/files.yaml" --check 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -qF -- "$3" <<<"$out" && ok "--check refuses $1" || bad "$1: exit $rc: $out"
}
files_check "a missing tls.cert" 'tls:\n  cert: gone.pem\n  key: server.key\n' \
  "files.yaml:6: tls.cert: $tmp/gone.pem: No such file or directory"
files_check "a key not matching tls.cert" 'tls:\n  cert: server.pem\n\n  key: self.key\n' \
  "files.yaml:8: tls.key: $tmp/self.key does not match the certificate of tls.cert $tmp/server.pem"
files_check "a missing tls.ca" 'tls:\n  cert: self.pem\n  key: self.key\n  ca: ca-gone.pem\n' \
  "files.yaml:8: tls.ca: $tmp/ca-gone.pem: No such file or directory"
files_check "a CA-issued cert the embedded node would trust alone" 'tls:\n  cert: server.pem\n  key: server.key\n' \
  "files.yaml:6: tls.cert: tls.ca is not set, so the embedded node (which reaches this master over TCP: listen.unix is off) would trust tls.cert $tmp/server.pem alone, but it is issued by /CN=test-ca, not self-signed: set tls.ca"
# The embedded node (listen.unix off) verifies tls.cert as any TLS client
# does: a certificate it would refuse is refused here, naming the file and
# the cause, rather than a master that serves while its node never registers.
files_check "an expired tls.cert" 'tls:\n  cert: expired.pem\n  key: dated.key\n' \
  "files.yaml:6: tls.cert: the embedded node would not trust $tmp/expired.pem: certificate has expired (notAfter Jan  2 00:00:00 2020 GMT); it dials this master at 127.0.0.1 over TLS and trusts tls.cert alone (tls.ca is not set)"
files_check "a tls.cert not yet valid" 'tls:\n  cert: future.pem\n  key: dated.key\n' \
  "files.yaml:6: tls.cert: the embedded node would not trust $tmp/future.pem: certificate is not yet valid (notBefore Jan  1 00:00:00 2099 GMT)"
files_check "a tls.cert not naming the address the node dials" 'tls:\n  cert: noip.pem\n  key: noip.key\n' \
  "files.yaml:6: tls.cert: the embedded node would not trust $tmp/noip.pem: it does not name 127.0.0.1, listen.tcp's host (its subjectAltName needs IP:127.0.0.1, or set listen.unix"
files_check "a tls.cert tls.ca did not sign" 'tls:\n  cert: self.pem\n  key: self.key\n  ca: ca.pem\n' \
  "files.yaml:6: tls.cert: the embedded node would not trust $tmp/self.pem: "
# With verify_clients the node presents tls.cert back; one for TLS servers
# only (extendedKeyUsage serverAuth) the master would refuse from it.
files_check "a tls.cert the master would refuse from its node" \
  'tls:\n  cert: srvonly.pem\n  key: server.key\n  ca: ca.pem\n  verify_clients: true\n' \
  "files.yaml:6: tls.cert: with tls.verify_clients the embedded node presents $tmp/srvonly.pem to this master, which would refuse it: its extendedKeyUsage does not allow a TLS client (unsuitable certificate purpose)"
want=$out
out=$(timeout 20 "$bin" --config "$tmp/files.yaml" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$out" = "$want" ] && [ ! -e "$tmp/files-data" ] && [ ! -e "$tmp/files-shm" ] \
  && ok "the start refuses a tls.cert its node would not trust, making nothing" \
  || bad "untrusted cert start: exit $rc: [$out] vs [$want]"
# TLS to etcd (ha.etcd_tls_*): the CA and the client certificate are loaded
# as a TLS client's at --check and at the start, naming the key and file.
etcd_tls_yaml() { # CA [CERT KEY]
  printf 'oplog: {backend: etcd}\nha:\n  enabled: true\n  id: m1\n  etcd_endpoints: "127.0.0.1:1"\n  snapshot_dir: snaps\n  advertise: "127.0.0.1:7600"\n  etcd_tls_ca: %s\n' "$1"
  [ -n "${2:-}" ] && printf '  etcd_tls_cert: %s\n  etcd_tls_key: %s\n' "$2" "$3"
}
printf 'not a certificate\n' >"$tmp/junk.pem"
files_check "a missing ha.etcd_tls_ca" "$(etcd_tls_yaml gone-ca.pem)\n" \
  "files.yaml:12: ha.etcd_tls_ca: TLS CA $tmp/gone-ca.pem: error:80000002:system library::No such file or directory"
files_check "an ha.etcd_tls_ca that holds no certificate" "$(etcd_tls_yaml junk.pem)\n" \
  "files.yaml:12: ha.etcd_tls_ca: TLS CA $tmp/junk.pem: error:05800088:x509 certificate routines::no certificate or crl found"
files_check "an ha.etcd_tls_key not matching ha.etcd_tls_cert" "$(etcd_tls_yaml ca.pem self.pem noip.key)\n" \
  "files.yaml:13: ha.etcd_tls_cert: TLS client certificate $tmp/self.pem / key $tmp/noip.key: error:05800074:x509 certificate routines::key values mismatch"
printf 'listen:\n  tcp: "127.0.0.1:0"\n  admin: ""\ndata_dir: %s/files-data\n%b\nnode:\n  segment_dir: %s/files-shm\n' \
  "$tmp" "$(etcd_tls_yaml ca.pem self.pem self.key)" "$tmp" >"$tmp/files.yaml"
out=$("$bin" --config "$tmp/files.yaml" --check 2>&1) && ok "--check accepts TLS to etcd with a matching client certificate" \
  || bad "TLS to etcd: --check exit $?: $out"
# ha.etcd_password_file: read as a token file, named with its line.
: >"$tmp/empty.pw"
files_check "a missing ha.etcd_password_file" "$(etcd_tls_yaml ca.pem)\n  etcd_user: wm\n  etcd_password_file: gone.pw\n" \
  "files.yaml:14: ha.etcd_password_file: token file $tmp/gone.pw: No such file or directory"
files_check "an empty ha.etcd_password_file" "$(etcd_tls_yaml ca.pem)\n  etcd_user: wm\n  etcd_password_file: empty.pw\n" \
  "files.yaml:14: ha.etcd_password_file: token file $tmp/empty.pw: is empty"
printf 'a password\n' >"$tmp/etcd.pw"
printf 'listen:\n  tcp: "127.0.0.1:0"\n  admin: ""\ndata_dir: %s/files-data\n%b\n  etcd_user: wm\n  etcd_password_file: etcd.pw\nnode:\n  segment_dir: %s/files-shm\n' \
  "$tmp" "$(etcd_tls_yaml ca.pem)" "$tmp" >"$tmp/files.yaml"
out=$("$bin" --config "$tmp/files.yaml" --check 2>&1) && ok "--check accepts a user with its password file" \
  || bad "etcd password: --check exit $?: $out"
printf 'node-token-of-check' >"$tmp/node.token"
node_hash=$(printf 'node-token-of-check' | sha256sum | cut -c1-64)
other_hash=$(printf 'another-token' | sha256sum | cut -c1-64)
auth_yaml() { printf 'auth:\n  enabled: true\n  node_token_file: %s\n  tokens:\n    - {sha256: %s, tenant: ops, role: %s}\n' "$1" "$2" "$3"; }
files_check "a missing auth.node_token_file" "$(auth_yaml gone.token "$node_hash" admin)\n" \
  "files.yaml:7: auth.node_token_file: token file $tmp/gone.token: No such file or directory"
files_check "a node token of role writer" "$(auth_yaml node.token "$node_hash" writer)\n" \
  "files.yaml:7: auth.node_token_file: the token in $tmp/node.token is auth.tokens[0] (tenant ops, role writer), so the embedded node's registration would be refused (nodes.register needs role admin)"
files_check "a node token of no auth.tokens entry" "$(auth_yaml node.token "$other_hash" admin)\n" \
  "files.yaml:7: auth.node_token_file: the token in $tmp/node.token is none of auth.tokens"
# ... and the start refuses it with the same line, before making anything.
want=$out
out=$(timeout 20 "$bin" --config "$tmp/files.yaml" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$out" = "$want" ] && [ ! -e "$tmp/files-data" ] && [ ! -e "$tmp/files-shm" ] \
  && ok "the start refuses it with the same line, making nothing" || bad "start: exit $rc: [$out] vs [$want]"
# Good files pass: a self-signed cert without tls.ca, an admin node token.
printf 'listen:\n  tcp: "127.0.0.1:0"\n  admin: ""\ntls:\n  cert: self.pem\n  key: self.key\n%s\nnode:\n  segment_dir: %s/files-shm\n' \
  "$(auth_yaml node.token "$node_hash" admin)" "$tmp" >"$tmp/files.yaml"
out=$("$bin" --config "$tmp/files.yaml" --check 2>&1); rc=$?
[ $rc -eq 0 ] && ok "good TLS files and an admin node token pass --check" || bad "good files: exit $rc: $out"
# ... and a CA-signed tls.cert naming 127.0.0.1 (the same serverAuth-only
# one: clients are not verified) with its tls.ca.
printf 'listen:\n  tcp: "127.0.0.1:0"\n  admin: ""\ntls:\n  cert: srvonly.pem\n  key: server.key\n  ca: ca.pem\nnode:\n  segment_dir: %s/files-shm\n' \
  "$tmp" >"$tmp/files.yaml"
out=$("$bin" --config "$tmp/files.yaml" --check 2>&1); rc=$?
[ $rc -eq 0 ] && ok "a CA-signed tls.cert naming the node's address passes --check" || bad "CA-signed: exit $rc: $out"

# An admin port another process holds: the start stops, naming the address
# and the cause (not libmicrohttpd's "port 0").
exec {holder}< <(python3 -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
print(s.getsockname()[1], flush=True); time.sleep(60)')
holder_pid=$!
read -r -t 10 port <&"$holder" || port=""
if [ -n "$port" ]; then
  printf 'listen:\n  tcp: "127.0.0.1:0"\n  admin: "127.0.0.1:%s"\ndata_dir: %s/busy\nnode:\n  embedded: false\n' \
    "$port" "$tmp" >"$tmp/busy.yaml"
  out=$(timeout 20 "$bin" --config "$tmp/busy.yaml" 2>&1); rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qF "admin http: cannot listen on 127.0.0.1:$port: Address already in use" <<<"$out" \
    && ok "a taken admin port stops the start, named" || bad "busy admin port: exit $rc: $out"
else
  bad "no port to hold"
fi
kill "$holder_pid" 2>/dev/null; wait "$holder_pid" 2>/dev/null
exec {holder}<&-

# weightctl's default master address is the one the embedded config listens on.
tcp=$(sed -n 's/^ *tcp: *"\{0,1\}\([^" #]*\)"\{0,1\}.*/\1/p' "$SOURCE_DIR/config/embedded.yaml" | head -1)
# (the help is read whole first: grep -q closing the pipe early would end
# weightctl with SIGPIPE, which pipefail reports as a failure)
help=$("$BUILD_DIR/bin/weightctl" --help 2>&1)
grep -qF "(default $tcp," <<<"$help" \
  && ok "weightctl defaults to $tcp" || bad "weightctl default differs from embedded.yaml's $tcp"

# Usage errors.
"$bin" >/dev/null 2>&1; [ $? -eq 2 ] && ok "no --config: usage, exit 2" || bad "no --config"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
