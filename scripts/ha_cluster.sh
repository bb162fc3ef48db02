#!/usr/bin/env bash
# ha_cluster.sh -- run an HA cluster on this machine with one command:
# one etcd (Debian's etcd-server), three store_master processes sharing an
# OpLog in etcd and a snapshot directory, and one store_node following them.
#
# Usage: scripts/ha_cluster.sh [BUILD_DIR]   (default: build, relative to the
# checkout; run `make build` first)
# Everything lives under HA_DIR (default var/ha/ in the checkout; a relative
# HA_DIR is taken from the directory the script is started in): configs, data
# dirs, logs, etcd's data, the node's segment file. Ctrl-C (or SIGTERM to the
# script) stops everything it started. Ports, all on 127.0.0.1: etcd 2479
# (client) and 2480 (peer), masters RPC 7601-7603 and admin 7681-7683, node
# data 7691; HA_ETCD_PORT (the peer port is the next one), HA_RPC_BASE and
# HA_ADMIN_BASE (master i gets BASE + i) and HA_NODE_PORT move them. With
# HA_ETCD_TLS=1, etcd serves its client port over TLS only and asks for client
# certificates (--client-cert-auth); the script makes a CA, etcd's certificate
# for 127.0.0.1 and the masters' client certificate under HA_DIR/etcd-certs
# (once, with openssl) and names them in the masters' ha.etcd_tls_*. With
# HA_ETCD_PASSWORD=1, etcd serves TLS without asking for client certificates
# and its auth is on: the script adds (once) users root and weight-mgmt, whose
# role reads and writes /weight_mgmt/ only, with random passwords in
# HA_DIR/etcd-root.password and HA_DIR/etcd.password, and the masters log in
# with ha.etcd_user and ha.etcd_password_file. Then, from another terminal:
#   build/bin/weightctl --master 127.0.0.1:7601,127.0.0.1:7602,127.0.0.1:7603 status
#   curl 127.0.0.1:7681/role
set -euo pipefail
top=${HA_DIR:-}
[ -z "$top" ] || [ "${top#/}" != "$top" ] || top=$PWD/$top
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" 2>/dev/null && pwd) || { echo "ha_cluster: no build directory ${1:-build}: make build" >&2; exit 1; }
etcd_port=${HA_ETCD_PORT:-2479}
rpc_base=${HA_RPC_BASE:-7600}
admin_base=${HA_ADMIN_BASE:-7680}
node_port=${HA_NODE_PORT:-7691}
tls=${HA_ETCD_TLS:-0}
password=${HA_ETCD_PASSWORD:-0}
[ "$password" = 1 ] && tls=1
top=${top:-$PWD/var/ha}
[ -x "$build/bin/store_master" ] || { echo "ha_cluster: $build/bin/store_master missing: make build" >&2; exit 1; }
command -v etcd >/dev/null || { echo "ha_cluster: etcd missing: make deps" >&2; exit 1; }
mkdir -p "$top/snapshots"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT   # leave at once: cleanup runs on EXIT, and the
trap 'exit 143' TERM  # loop below would take its end for etcd's death

scheme=http etcd_tls=() etcdctl_tls=() master_tls=""
if [ "$tls" = 1 ]; then
  certs=$top/etcd-certs
  if [ ! -s "$certs/client.pem" ]; then
    mkdir -p "$certs"
    ( cd "$certs" && exec >openssl.log 2>&1 &&
      openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
        -subj /CN=ha-cluster-etcd-ca -keyout ca.key -out ca.pem &&
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=etcd \
        -keyout server.key -out server.csr &&
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext &&
      openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
        -extfile san.ext -out server.pem &&
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=weight-mgmt-master \
        -keyout client.key -out client.csr &&
      openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
        -out client.pem ) || { echo "ha_cluster: openssl failed: $certs/openssl.log" >&2; exit 1; }
  fi
  scheme=https
  if [ "$password" = 1 ]; then
    etcd_tls=(--cert-file "$certs/server.pem" --key-file "$certs/server.key")
    etcdctl_tls=(--cacert "$certs/ca.pem")
    master_tls="  etcd_tls_ca: $certs/ca.pem
  etcd_user: weight-mgmt
  etcd_password_file: $top/etcd.password
"
  else
    etcd_tls=(--cert-file "$certs/server.pem" --key-file "$certs/server.key"
              --trusted-ca-file "$certs/ca.pem" --client-cert-auth)
    etcdctl_tls=(--cacert "$certs/ca.pem" --cert "$certs/client.pem" --key "$certs/client.key")
    master_tls="  etcd_tls_ca: $certs/ca.pem
  etcd_tls_cert: $certs/client.pem
  etcd_tls_key: $certs/client.key
"
  fi
fi
# etcdctl as root once etcd's auth is on (HA_ETCD_PASSWORD, from a run before)
[ -s "$top/etcd-root.password" ] && etcdctl_tls+=(--user "root:$(cat "$top/etcd-root.password")")

etcd --name ha0 --data-dir "$top/etcd" "${etcd_tls[@]}" \
  --listen-client-urls "$scheme://127.0.0.1:$etcd_port" --advertise-client-urls "$scheme://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
  --initial-cluster "ha0=http://127.0.0.1:$((etcd_port + 1))" >"$top/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  ETCDCTL_API=3 etcdctl --endpoints "$scheme://127.0.0.1:$etcd_port" "${etcdctl_tls[@]}" \
    endpoint health >/dev/null 2>&1 && break
  sleep 0.1
done
if [ "$password" = 1 ] && [ ! -s "$top/etcd-root.password" ]; then
  umask 077
  openssl rand -hex 16 >"$top/etcd.password"
  openssl rand -hex 16 >"$top/etcd-root.password.new"
  for step in "user add root --new-user-password=$(cat "$top/etcd-root.password.new")" \
      "user add weight-mgmt --new-user-password=$(cat "$top/etcd.password")" "role add weight-mgmt" \
      "role grant-permission weight-mgmt readwrite /weight_mgmt/ --prefix=true" \
      "user grant-role weight-mgmt weight-mgmt" "auth enable"; do
    # shellcheck disable=SC2086 # each step is etcdctl's words
    ETCDCTL_API=3 etcdctl --endpoints "$scheme://127.0.0.1:$etcd_port" "${etcdctl_tls[@]}" $step \
      >>"$top/etcdctl.log" 2>&1 || { echo "ha_cluster: etcdctl $step failed: $top/etcdctl.log" >&2; exit 1; }
  done
  mv "$top/etcd-root.password.new" "$top/etcd-root.password"
fi

masters=""
for i in 1 2 3; do
  mkdir -p "$top/m$i"
  cat >"$top/m$i/config.yaml" <<EOF
listen:
  tcp: "127.0.0.1:$((rpc_base + i))"
  admin: "127.0.0.1:$((admin_base + i))"
data_dir: $top/m$i/data
oplog:
  backend: etcd
ha:
  enabled: true
  id: m$i
  etcd_endpoints: "127.0.0.1:$etcd_port"
  snapshot_dir: $top/snapshots
${master_tls}node:
  embedded: false
cluster:
  weight_management_oplog_capability_confirmed: true
  weight_lineage_oplog_capability_confirmed: true
plugins:
  - path: $build/lib/weight_mgmt.so
EOF
  "$build/bin/store_master" --config "$top/m$i/config.yaml" >"$top/m$i/master.log" 2>&1 &
  pids+=($!)
  masters+="${masters:+,}127.0.0.1:$((rpc_base + i))"
done

mkdir -p "$top/node/cold"
"$build/bin/store_node" --master "$masters" --id n1 --segment-dir "$top/node" \
  --segment-bytes 1073741824 --cold-dir "$top/node/cold" --listen "127.0.0.1:$node_port" \
  >"$top/node/node.log" 2>&1 &
pids+=($!)

echo "ha_cluster: etcd $scheme://127.0.0.1:$etcd_port; masters $masters; node 127.0.0.1:$node_port; logs under $top"
echo "ha_cluster: build/bin/weightctl --master $masters status    (Ctrl-C stops everything)"
# Runs until Ctrl-C (or etcd dies). Kill a master meanwhile to watch a
# failover: `kill -9 $(pgrep -f m1/config.yaml)`.
while kill -0 "${pids[0]}" 2>/dev/null; do sleep 1; done
echo "ha_cluster: etcd exited; see $top/etcd.log" >&2
