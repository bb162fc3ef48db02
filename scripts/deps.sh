#!/usr/bin/env bash
# deps.sh -- install the Debian packages the project builds and tests with.
#
# Idempotent and quiet: it asks dpkg which of the packages below are missing and
# installs only those (apt-get update first, non-interactive). Nothing happens
# when everything is present. Each package is named in README.md with why.
# Usage: scripts/deps.sh [bench|fuzz]  -- `bench` adds what `make bench`
# compares against, `fuzz` the compiler `make fuzz` needs (neither is needed
# to build or test).
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config   # the toolchain
  libyaml-dev                         # strict config parsing
  libcmocka-dev                       # unit tests
  libuv1-dev                          # the master's event loop, sockets, timers
  libprotobuf-c-dev protobuf-c-compiler  # RPC and OpLog payload encoding
  libxxhash-dev                       # OpLog and snapshot checksums
  uthash-dev                          # hash tables of the master (header only)
  libmicrohttpd-dev                   # admin HTTP(S): /metrics /health /role
  libgnutls28-dev                     # admin HTTPS: client certificates on MHD's GnuTLS session
  libssl-dev                          # SHA-256 digests, HMAC write tickets
  libjansson-dev                      # safetensors JSON headers (client)
  valgrind                            # memcheck run of the unit tests
  libmimalloc-dev                     # the master's allocator
  libgrpc-dev                         # etcd v3 API over gRPC (the etcd OpLog, election)
  etcd-server etcd-client             # the etcd the HA tests start; etcdctl to look inside
  python3-pytest python3-numpy python3-cffi  # the Python binding and its tests
)
if [ "${1:-}" = bench ]; then
  PACKAGES+=(redis-server)            # durable-write baseline of bench_master_mutations
fi
if [ "${1:-}" = fuzz ]; then
  PACKAGES+=(clang libclang-rt-14-dev)  # libFuzzer and its sanitizers (make fuzz)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq </dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
