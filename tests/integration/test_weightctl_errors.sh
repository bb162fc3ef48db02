#!/usr/bin/env bash
# test_weightctl_errors.sh -- what weightctl says when an input or a call
# goes wrong, and that it then changed nothing, against a real store_master
# with the real weight_mgmt.so (Unix socket, own data and /dev/shm
# directories, removed on exit); the findings of a user trial, one section
# each:
#  - put_tie_must_be_one_storage: put / upsert --tie NAME=TARGET refused
#    before any import, naming the tie and the cause (NAME or TARGET not a
#    tensor of the files, TARGET itself tied, dtype or shape differ, bytes
#    differ), no revision made; a good tie stored as an alias.
#  - put_same_tensor_in_two_files: refused naming the tensor and both files.
#  - put_of_a_directory_or_missing_file: put and kv put say "Is a
#    directory" (put: pointing to --from-dir), a missing file's name once.
#  - put_of_a_file_of_another_kind: a text file, a header that is not JSON:
#    "not a safetensors file"; bytes after the last tensor's data refused
#    (as the reference reader does).
#  - rm_wait_after_an_operation: rm --wait without --expect right after a
#    migration removes the revision (the operation's end moved the
#    generation it read); with a stale --expect, STALE_GENERATION.
#  - identities: exists without @GENERATION takes the newest live one, as
#    info does (none: "no"); NAME@0 refused as a usage error by every
#    command that takes an ID; an empty or over-long component named, with
#    the limit.
#  - get_of_a_missing_revision_makes_no_directory: --out DIR made only for
#    a revision that is there (removed again when nothing was written).
#  - ls_header_only_with_an_answer: a refused first page prints no header
#    (text or JSON) on stdout (the plugin disabled: test_weightctl_kv.sh).
#  - a_peer_that_answers_http: ls, status and kv ls against it say the peer
#    answered HTTP (a unit test keeps the size check: test_rpc).
#  - put_that_does_not_fit_names_payload_bytes: a put that finds no free
#    range large enough names the shortfall and points to --payload-bytes;
#    nothing is made, and the same put in smaller objects fits.
#  - help_says_what_is_there: put --help's wording and --payload-bytes,
#    migrate --wait in the main --help, rm --help on what refuses a removal.
#  - plugin_reload_relative_path: plugin reload --path with a relative path
#    resolves it against weightctl's working directory (not the master's);
#    one that names nothing here is refused (exit 2) before any call, the
#    plugin untouched; plugin --help says whose path it is.
#  - stale_import_listed_and_aborted: a put whose writer was killed (-9)
#    after its objects were written is IMPORTING: ls --all lists it with its
#    state (ls without --all does not), rm refuses it naming `weightctl
#    abort`, abort of a READY revision is refused (CONFLICT, nothing
#    changed), and `weightctl abort ID` (no @GEN: the newest IMPORTING one)
#    frees its segment bytes, forgets it, and the name takes a new put.
#  - upsert_abort_of_a_dead_trainers_claim: a trainer killed mid-upsert
#    (PUT_FIRST, its target's import begun) blocks its lineage (another target
#    generation CONFLICT); `weightctl upsert abort ID` ends the claim ABORTED
#    with the base intact and readable, the target gone, and the lineage
#    takes another target; with no open claim it is refused (CONFLICT,
#    nothing changed).
set -uo pipefail
: "${BUILD_DIR:?}" "${SOURCE_DIR:?}"
ctl="$BUILD_DIR/bin/weightctl"
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/wm-err-XXXXXX)
shm=$(mktemp -d /dev/shm/wm-err-XXXXXX)
pass=0 fail=0
ok()  { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
pid=""
http=""
# A sanitizer build: the Python writer needs the ASan runtime loaded first.
pyenv=()
grep -q '^WM_SANITIZE:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null \
  && pyenv=(LD_PRELOAD="$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0)
cleanup() {
  [ -n "$http" ] && kill "$http" 2>/dev/null
  [ -n "$pid" ] && { kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
  rm -rf "$tmp" "$shm"
}
trap cleanup EXIT
. "$(dirname "$0")/weightctl_lib.sh"
weight_master_yaml "$tmp/master.yaml" "err$$" 67108864
start_master "$tmp/master.yaml"

# refused NAME RC EXPECTED_LINE ARGS...: exit RC, exactly that one line on
# stderr, nothing on stdout, nothing changed on the master.
refused() {
  local name=$1 want_rc=$2 want=$3
  shift 3
  local before after out err rc
  before=$(state)
  out=$("$ctl" "$@" 2>"$tmp/err"); rc=$?
  err=$(cat "$tmp/err")
  after=$(state)
  if [ $rc -eq "$want_rc" ] && [ "$err" = "$want" ] && [ -z "$out" ] && [ "$before" = "$after" ]; then
    ok "$name: '$err'"
  else
    bad "$name: rc $rc, stderr [$err], stdout [$out], want $want_rc [$want]"
  fi
}
# absent ID: info answers NOT_FOUND (no revision, no tombstone).
absent() {
  local out
  out=$("$ctl" info "$1" 2>&1)
  [ $? -eq 1 ] && grep -q "NOT_FOUND" <<<"$out"
}
# mk_tensors PATH NAME:DTYPE:D0xD1:FILL...: a safetensors file whose tensors
# hold FILL (a byte value, or "r" for random bytes).
mk_tensors() {
  "$py" - "$@" <<'PY'
import json, os, struct, sys
sizes = {"F32": 4, "F16": 2, "U8": 1}
path, header, blobs, at = sys.argv[1], {}, [], 0
for spec in sorted(sys.argv[2:]):
    name, dtype, dims, fill = spec.split(":")
    shape = [int(d) for d in dims.split("x")]
    n = sizes[dtype]
    for d in shape: n *= d
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + n]}
    blobs.append(os.urandom(n) if fill == "r" else bytes([int(fill)]) * n)
    at += n
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for b in blobs: f.write(b)
PY
}

# -- put_that_does_not_fit_names_payload_bytes ----------------------------------------------
# First, while the segment is empty: three 20 MiB revisions fill the 64 MiB
# segment; the middle one removed
# leaves a 20 MiB hole and some 4 MiB at the end. A 22 MiB tensor in one
# payload object fits neither: refused with the shortfall and a pointer to
# --payload-bytes, nothing made; cut into 4 MiB objects it fits.
mk_tensors "$tmp/20m.safetensors" w:U8:5120x4096:r
for r in a b c; do
  "$ctl" put --namespace err --resource room --revision $r "$tmp/20m.safetensors" >/dev/null || bad "put of room/$r"
done
"$ctl" rm err/room/b@1 --wait --timeout 30 >/dev/null || bad "rm of room/b"
mk_tensors "$tmp/22m.safetensors" w:U8:5632x4096:r
out=$("$ctl" put --namespace err --resource room --revision d "$tmp/22m.safetensors" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "no memory segment has room: 22.0 MiB needed, the largest free range is .* MiB, .* short" <<<"$out" \
  && grep -qx "weightctl: put: --payload-bytes N (at least 4096) cuts the revision into smaller payload objects, which may fit the free ranges the segments have left" <<<"$out" \
  && absent err/room/d@1 && ok "a put that does not fit: the shortfall and --payload-bytes named, nothing made" \
  || bad "no room: $rc [$out]"
out=$("$ctl" put --namespace err --resource room --revision d --payload-bytes 4194304 "$tmp/22m.safetensors" 2>&1) \
  && ok "the same in 4 MiB payload objects fits" || bad "with --payload-bytes: $out"
for r in a c d; do "$ctl" rm err/room/$r@1 --wait --timeout 30 >/dev/null || bad "rm of room/$r"; done

# -- put_tie_must_be_one_storage ------------------------------------------------------
m="$tmp/tie.safetensors"
mk_tensors "$m" emb:F32:4x8:7 head:F32:4x8:7 other:F32:4x8:9 wide:F32:8x4:7 half:F16:4x8:7
P=(put --namespace err --resource tie --revision v1)
refused "tie: NAME not a tensor" 1 \
  "weightctl: put: INVALID_ARGUMENT: --tie nope=emb: nope is not a tensor of $m" \
  "${P[@]}" --tie nope=emb "$m"
refused "tie: TARGET not a tensor" 1 \
  "weightctl: put: INVALID_ARGUMENT: --tie head=nope: nope is not a tensor of $m" \
  "${P[@]}" --tie head=nope "$m"
refused "tie: TARGET itself tied" 1 \
  "weightctl: put: INVALID_ARGUMENT: --tie head=emb: emb is itself tied (to other): tie head to other" \
  "${P[@]}" --tie head=emb --tie emb=other "$m"
refused "tie: shape differs" 1 \
  "weightctl: put: INVALID_ARGUMENT: --tie wide=emb: wide is F32 [8, 4] (in $m), emb is F32 [4, 8] (in $m): a tie is one storage" \
  "${P[@]}" --tie wide=emb "$m"
refused "tie: dtype differs" 1 \
  "weightctl: put: INVALID_ARGUMENT: --tie half=emb: half is F16 [4, 8] (in $m), emb is F32 [4, 8] (in $m): a tie is one storage" \
  "${P[@]}" --tie half=emb "$m"
refused "tie: bytes differ" 1 \
  "weightctl: put: INVALID_ARGUMENT: --tie other=emb: the bytes of other (in $m) differ from those of emb (in $m): a tie is one storage" \
  "${P[@]}" --tie other=emb "$m"
refused "tie: NAME tied twice" 1 \
  "weightctl: put: INVALID_ARGUMENT: --tie head=other: head is tied twice (also to emb)" \
  "${P[@]}" --tie head=emb --tie head=other "$m"
refused "tie: to itself" 2 \
  "weightctl: put: --tie: 'emb=emb' is not NAME=TARGET of two tensors (at most 64)" \
  "${P[@]}" --tie emb=emb "$m"
absent err/tie/v1@1 && ok "no refused tie made a revision (info: NOT_FOUND)" || bad "a refused tie left err/tie/v1"
# the base of an upsert, then its refused ties (the base stays, no generation 2)
mk_tensors "$tmp/base.safetensors" emb:F32:4x8:1
"$ctl" put --namespace err --resource tie --revision up "$tmp/base.safetensors" >/dev/null || bad "put of the upsert base"
refused "upsert --tie: dtype differs" 1 \
  "weightctl: upsert: INVALID_ARGUMENT: --tie half=emb: half is F16 [4, 8] (in $m), emb is F32 [4, 8] (in $m): a tie is one storage" \
  upsert err/tie/up@1 --generation 2 --tie half=emb "$m"
refused "upsert --tie: NAME not a tensor" 1 \
  "weightctl: upsert: INVALID_ARGUMENT: --tie nope=emb: nope is not a tensor of $m" \
  upsert err/tie/up@1 --generation 2 --tie nope=emb "$m"
absent err/tie/up@2 && ok "no refused upsert tie made generation 2" || bad "upsert tie made err/tie/up@2"
# a tie that holds: stored once (head an alias of emb); a tie target that is
# byte-identical to an earlier tensor is stored, not made an alias itself
# (an alias cannot be a target)
mk_tensors "$tmp/good.safetensors" a:F32:4x8:7 emb:F32:4x8:7 head:F32:4x8:7 x:F32:2x2:r
out=$("$ctl" put --namespace err --resource tie --revision ok --tie head=emb "$tmp/good.safetensors" 2>&1); rc=$?
"$ctl" get err/tie/ok --out "$tmp/tieback" >/dev/null 2>&1 \
  && st_same "$tmp/good.safetensors" "$tmp/tieback/rank0-of-1.safetensors"; back=$?
[ $rc -eq 0 ] && [ $back -eq 0 ] && ok "a true tie is published and reads back whole: $out" \
  || bad "good tie: $rc $out (read back $back)"

# -- put_same_tensor_in_two_files ---------------------------------------------------------
mk_tensors "$tmp/one.safetensors" w:F32:2x2:3 u:F32:2x2:r
mk_tensors "$tmp/two.safetensors" w:F32:2x2:3 v:F32:2x2:r
mk_tensors "$tmp/three.safetensors" w:F32:2x2:4
refused "same tensor, same bytes, in two files" 1 \
  "weightctl: put: INVALID_ARGUMENT: tensor w is in both $tmp/one.safetensors and $tmp/two.safetensors: a revision holds each name once" \
  put --namespace err --resource dup --revision v1 "$tmp/one.safetensors" "$tmp/two.safetensors"
refused "same tensor, other bytes, in two files" 1 \
  "weightctl: put: INVALID_ARGUMENT: tensor w is in both $tmp/one.safetensors and $tmp/three.safetensors: a revision holds each name once" \
  put --namespace err --resource dup --revision v1 "$tmp/one.safetensors" "$tmp/three.safetensors"
absent err/dup/v1@1 && ok "no revision from the files with a tensor twice" || bad "dup made err/dup/v1"

# -- put_of_a_directory_or_missing_file ----------------------------------------------------
mkdir -p "$tmp/adir"
refused "put of a directory" 1 \
  "weightctl: put: $tmp/adir: Is a directory (a model directory is read with --from-dir DIR)" \
  put --namespace err --resource files --revision v1 "$tmp/adir"
refused "kv put of a directory" 1 "weightctl: kv put k: $tmp/adir: Is a directory" kv put k "$tmp/adir"
refused "put of a missing file: its name once" 1 \
  "weightctl: put: $tmp/missing.safetensors: No such file or directory" \
  put --namespace err --resource files --revision v1 "$tmp/missing.safetensors"
refused "kv put of a missing file" 1 \
  "weightctl: kv put k: $tmp/missing.bin: No such file or directory" kv put k "$tmp/missing.bin"

# -- put_of_a_file_of_another_kind ----------------------------------------------------------
printf '# notes\nnot tensors at all, just text\n' >"$tmp/notes.txt"
size=$(stat -c %s "$tmp/notes.txt")
hl=$("$py" -c 'import struct,sys; print(struct.unpack("<Q", open(sys.argv[1],"rb").read(8))[0])' "$tmp/notes.txt")
refused "put of a text file" 1 \
  "weightctl: put: $tmp/notes.txt: safetensors: not a safetensors file: its first 8 bytes give a header length of $hl, which runs past the end of the $size-byte file" \
  put --namespace err --resource files --revision v1 "$tmp/notes.txt"
"$py" -c 'import struct,sys; open(sys.argv[1],"wb").write(struct.pack("<Q", 12) + b"hello, world")' "$tmp/notjson"
err=$("$ctl" put --namespace err --resource files --revision v1 "$tmp/notjson" 2>&1); rc=$?
[ $rc -eq 1 ] && [[ "$err" == "weightctl: put: $tmp/notjson: safetensors: not a safetensors file: its header is not JSON: "* ]] \
  && ok "put of a file whose header is not JSON: '$err'" || bad "not JSON: $rc $err"
mk_tensors "$tmp/trailing.safetensors" w:F32:2x2:5
printf 'XYZ' >>"$tmp/trailing.safetensors"
refused "put of a file with bytes after its data" 1 \
  "weightctl: put: $tmp/trailing.safetensors: safetensors: 3 bytes after the last tensor's data (the tensors end at byte 16 of the 19 data bytes): a safetensors file ends with its data" \
  put --namespace err --resource files --revision v1 "$tmp/trailing.safetensors"
absent err/files/v1@1 && ok "no revision from the files refused" || bad "err/files/v1 exists"

# -- rm_wait_after_an_operation -----------------------------------------------------------
# rm --wait right after a migration: it waits for the operation, whose end
# moves the metadata generation it had read; without --expect it reads it
# again and removes (DELETED); with an --expect of a generation that moved,
# STALE_GENERATION as before.
mk_st "$tmp/big.safetensors" w0:2048:1024 w1:2048:1024 w2:2048:1024
for v in v1 v2; do
  "$ctl" put --namespace err --resource rm --revision $v "$tmp/big.safetensors" >/dev/null || bad "put rm $v"
done
"$ctl" migrate err/rm/v1@1 --to cold >/dev/null 2>&1 || bad "migrate err/rm/v1@1"
out=$("$ctl" rm err/rm/v1@1 --wait --timeout 60 2>"$tmp/rm.err"); rc=$?
info=$("$ctl" --json info err/rm/v1@1 2>&1)
if [ $rc -eq 0 ] && [[ "$out" == "err/rm/v1@1: DELETED "* ]] && grep -q '"availability":"DELETED"' <<<"$info"; then
  ok "migrate, then rm --wait at once: '$out' ($(tr '\n' ' ' <"$tmp/rm.err"))"
else
  bad "rm --wait after migrate: $rc [$out] [$(cat "$tmp/rm.err")] $info"
fi
gen=$("$ctl" --json info err/rm/v2@1 | sed -n 's/.*"metadata_generation":\([0-9]*\).*/\1/p')
"$ctl" migrate err/rm/v2@1 --to cold --wait >/dev/null 2>&1 || bad "migrate err/rm/v2@1"
err=$("$ctl" rm err/rm/v2@1 --wait --expect "$gen" --timeout 30 2>&1 >/dev/null); rc=$?
info=$("$ctl" --json info err/rm/v2@1 2>&1)
if [ $rc -eq 1 ] && grep -q "^weightctl: rm err/rm/v2@1: STALE_GENERATION: " <<<"$(tail -n 1 <<<"$err")" \
   && ! grep -q '"availability":"DELET' <<<"$info"; then
  ok "rm --wait --expect $gen after the generation moved: '$(tail -n 1 <<<"$err")', not removed"
else
  bad "rm --wait --expect stale: $rc [$err] $info"
fi

# -- identities: exists takes info's forms, generation 0 and long components refused ---------
out=$("$ctl" exists err/tie/ok); rc=$?
[ $rc -eq 0 ] && [ "$out" = "yes" ] && ok "exists without @GENERATION: the newest live one, '$out'" \
  || bad "exists without gen: $rc $out"
out=$("$ctl" exists err/tie/never 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$out" = "no" ] && ok "exists of a revision with no live generation: '$out', exit 1" \
  || bad "exists none: $rc $out"
zero="weightctl: 'err/tie/ok@0' is not NAMESPACE/RESOURCE/REVISION[@GENERATION]: generation 0 is not a generation (they start at 1)"
for form in "info ID" "exists ID" "size ID" "get ID --out $tmp/never0" "rm ID" "migrate ID --to cold" \
            "policy ID --mode auto" "repair ID" "upsert status ID" \
            "upsert ID --generation 2 $tmp/good.safetensors"; do
  read -r -a a <<<"${form/ID/err/tie/ok@0}"
  refused "${form%% ID*} NAME@0" 2 "$zero" "${a[@]}"
done
long=$(printf 'r%.0s' $(seq 300))
refused "put: over-long --revision" 2 \
  "weightctl: put: INVALID_ARGUMENT: the revision (--revision) is 300 bytes, over the 256-byte limit of an identity component" \
  put --namespace err --resource files --revision "$long" "$tmp/good.safetensors"
refused "put: over-long --tenant" 2 \
  "weightctl: put: INVALID_ARGUMENT: the tenant (--tenant) is 300 bytes, over the 256-byte limit of an identity component" \
  put --tenant "$long" --namespace err --resource files --revision v1 "$tmp/good.safetensors"
refused "put: empty --namespace" 2 "weightctl: put: INVALID_ARGUMENT: the namespace (--namespace) is empty" \
  put --namespace "" --resource files --revision v1 "$tmp/good.safetensors"
refused "info: over-long resource in the ID" 2 \
  "weightctl: 'err/$long/v1' is not NAMESPACE/RESOURCE/REVISION[@GENERATION]: the resource is 300 bytes, over the 256-byte limit of an identity component" \
  info "err/$long/v1"
refused "info: two components" 2 \
  "weightctl: 'err/v1' is not NAMESPACE/RESOURCE/REVISION[@GENERATION]: 2 components, not 3 (a '/' in one is written %2F)" \
  info err/v1

# -- get_of_a_missing_revision_makes_no_directory --------------------------------------------
err=$("$ctl" get err/none/v1@1 --out "$tmp/nf/deep/er" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "NOT_FOUND" <<<"$err" && [ ! -e "$tmp/nf" ] \
  && ok "get of a missing generation: '$err', no --out directory left" || bad "get missing @1: $rc $err $(ls -d "$tmp/nf" 2>&1)"
err=$("$ctl" get err/none/v1 --out "$tmp/nf2" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "NOT_FOUND" <<<"$err" && [ ! -e "$tmp/nf2" ] \
  && ok "get of a revision with no live generation: no --out directory" || bad "get missing: $rc $err"
mkdir -p "$tmp/keep/sub"
"$ctl" get err/none/v1@1 --out "$tmp/keep/sub" >/dev/null 2>&1
"$ctl" get err/none/v1@1 --out "$tmp/keep/new/er" >/dev/null 2>&1
[ -d "$tmp/keep/sub" ] && [ ! -e "$tmp/keep/new" ] \
  && ok "a failed get keeps the directories that were there, removes those it made" || bad "keep: $(ls -R "$tmp/keep")"
[ ! -e "$tmp/never0" ] && ok "get NAME@0 made no --out directory" || bad "get @0 made $tmp/never0"

# -- ls_header_only_with_an_answer ------------------------------------------------------------
for j in "" --json; do
  out=$("$ctl" $j ls --page-token not-a-token 2>"$tmp/ls.err"); rc=$?
  [ $rc -eq 1 ] && [ -z "$out" ] && [ "$(wc -l <"$tmp/ls.err")" -eq 1 ] && grep -q "^weightctl: ls: " "$tmp/ls.err" \
    && ok "ls $j with a bad page token: nothing on stdout, '$(cat "$tmp/ls.err")'" || bad "ls $j bad token: $rc [$out] $(cat "$tmp/ls.err")"
done

# -- a_peer_that_answers_http ------------------------------------------------------------------
# A peer that answers HTTP to anything (as an admin/metrics endpoint or a
# proxy does), on a Unix socket: weightctl says so instead of taking
# "HTTP" for a frame length of 1213486160 bytes.
"$py" - "$tmp/http.sock" <<'PY' &
import socket, sys, threading
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(8)
def serve(c):
    try:
        c.settimeout(2)
        try: c.recv(65536)
        except socket.timeout: pass
        c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    except OSError: pass
    finally: c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
http=$!
for _ in $(seq 100); do [ -S "$tmp/http.sock" ] && break; sleep 0.05; done
said="the peer answered HTTP, not the master's RPC protocol (is this the admin/metrics port?)"
for cmd in ls status "kv ls"; do
  err=$(env -u WEIGHTCTL_MASTER timeout 30 "$ctl" --master "$tmp/http.sock" $cmd 2>&1 >/dev/null); rc=$?
  [ $rc -eq 1 ] && [[ "$err" == "weightctl: "*": $said" ]] && [ "$(wc -l <<<"$err")" -eq 1 ] \
    && ok "$cmd against an HTTP peer: '$err'" || bad "$cmd against HTTP: $rc [$err]"
done
kill "$http"; wait "$http" 2>/dev/null; http=""

# -- help_says_what_is_there ----------------------------------------------------------------
out=$("$ctl" put --help)
grep -q "get wrote" <<<"$out" && bad "put --help: 'get wrote' is still there" \
  || ok "put --help: no 'The files get wrote'"
grep -q "^--payload-bytes N packs the tensors into payload objects of at most N bytes" <<<"$out" \
  && ok "put --help explains --payload-bytes" || bad "put --help: no --payload-bytes sentence"
grep -q "payload-bytes are put's" <<<"$("$ctl" upsert --help)" && ok "upsert --help points to put's --payload-bytes" \
  || bad "upsert --help: --payload-bytes"
grep -q "^  migrate ID --to hot|cold|mixed\[:RATIO\] \[--expect GEN\] \[--wait \[--timeout S\]\]" <<<"$("$ctl" --help)" \
  && ok "--help lists migrate --wait" || bad "--help: migrate without --wait"
# rm --help as the plugin's remove path is (wm_rpc_remove: BUSY for revision
# leases and operations; read leases hold members back, test_read_leases)
out=$("$ctl" rm --help)
grep -q "Refused (BUSY) while a revision lease" <<<"$out" && grep -q "read leases on the payload objects do not refuse it" <<<"$out" \
  && ok "rm --help: BUSY for a revision lease or an operation, not for read leases" || bad "rm --help: $out"

# -- gate_confirm_without_ha ----------------------------------------------------------------
out=$("$ctl" gate confirm weight_management_oplog_capability_confirmed 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "confirmed" <<<"$out" && grep -q "no effect on this master: gates are enforced with ha.enabled only" <<<"$out" \
  && ok "gate confirm without HA says it has no effect" || bad "gate confirm without HA: $rc $out"

# -- plugin_reload_relative_path -----------------------------------------------------------
# weightctl runs in $tmp/here, where here/plugins/wm.so is the library; the
# master runs elsewhere (this script's directory), where a relative path
# sent as given would name nothing.
mkdir -p "$tmp/here/plugins" && ln -s "$BUILD_DIR/lib/weight_mgmt.so" "$tmp/here/plugins/wm.so"
real=$(realpath "$BUILD_DIR/lib/weight_mgmt.so")
reloads() { "$ctl" plugin list | sed -n 's/^weight_mgmt .* reloads \([0-9]*\) .*/\1/p'; }
before=$(reloads)
out=$(cd "$tmp/here" && "$ctl" plugin reload weight_mgmt --path plugins/wm.so 2>&1); rc=$?
after=$(reloads)
[ $rc -eq 0 ] && [ "$after" = "$((before + 1))" ] && grep -q "path $real\$" <<<"$out" \
  && ok "plugin reload --path plugins/wm.so: resolved against weightctl's directory, reloaded" \
  || bad "relative --path: rc $rc, reloads $before -> $after: $out"
out=$(cd "$tmp" && "$ctl" plugin reload weight_mgmt --path=lib/weight_mgmt.so 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$out" = "weightctl: plugin reload: --path lib/weight_mgmt.so: No such file or directory (a relative --path is taken against weightctl's working directory and must exist here; for a library only the master's host has, give its absolute path there)" ] \
  && [ "$(reloads)" = "$after" ] && ok "a relative --path naming nothing here: exit 2, nothing sent" \
  || bad "missing relative --path: rc $rc: $out"
grep -q "^--path is opened by the master, on the master's host" <<<"$("$ctl" plugin --help)" \
  && ok "plugin --help says whose path --path is" || bad "plugin --help: --path"

# -- stale_import_listed_and_aborted ------------------------------------------------------
# The writer (two threads, 32 objects of 64 KiB) kills itself (SIGKILL) at
# its first progress report past half its bytes, before the commit: the
# IMPORTING revision stays behind with the objects it had ended (group
# members) and the writes it had started (taken back by the node after
# node.put_timeout_ms).
mk_st "$tmp/abort.safetensors" a.weight:16:16
"$ctl" put --namespace err --resource ready --revision v1 "$tmp/abort.safetensors" >/dev/null || bad "put err/ready"
used() { "$ctl" --json status | sed -n 's/.*"memory_used":\([0-9]*\).*/\1/p'; }
used0=$(used)
env "${pyenv[@]}" PYTHONPATH="$SOURCE_DIR/python" WEIGHTSTORE_LIB="$BUILD_DIR/lib/libweightclient.so" \
  "$py" - "$tmp/master.sock" <<'PY' 2>"$tmp/stale.err"
import ctypes, os, signal, sys
import numpy as np
from weightstore import WeightStore
s = WeightStore(sys.argv[1], payload_bytes=65536, threads=2)
CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64)
def die(ctx, done, total):
    if done >= total // 2 > 0:
        os.kill(os.getpid(), signal.SIGKILL)
fn = CB(die)
s._lib.weight_store_set_progress.argtypes = [ctypes.c_void_p, CB, ctypes.c_void_p]
s._lib.weight_store_set_progress(s._ptr(), fn, None)
w = s.weight_put("err/stale/v1@1")
w.weight_put_tensor("a.weight", np.ones((1024, 512), np.float32))
w.commit()
PY
rc=$?
used1=$(used)
[ $rc -eq 137 ] && [ "$used1" -gt "$used0" ] \
  && ok "a writer killed mid-put leaves its import holding $((used1 - used0)) segment bytes" \
  || bad "stale import setup: rc $rc, used $used0 -> $used1: $(cat "$tmp/stale.err")"
out=$("$ctl" ls --all --namespace err --resource stale)
grep -Eq '^err/stale/v1@1 +IMPORTING ' <<<"$out" && ok "ls --all lists the IMPORTING revision with its state" \
  || bad "ls --all: $out"
out=$("$ctl" ls --namespace err --resource stale)
! grep -q "err/stale/v1" <<<"$out" && ok "ls without --all does not list it" || bad "ls: $out"
out=$("$ctl" --json ls --all --namespace err --resource stale)
grep -q '"id":"err/stale/v1@1"' <<<"$out" && grep -q '"availability":"IMPORTING"' <<<"$out" \
  && ok "--json ls --all lists it as IMPORTING" || bad "--json ls --all: $out"
before=$(state)
out=$("$ctl" rm err/stale/v1@1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "CONFLICT: revision .* is IMPORTING" <<<"$out" \
  && grep -q "^weightctl: rm err/stale/v1@1: \`weightctl abort err/stale/v1@1\` aborts that import and frees what it wrote$" <<<"$out" \
  && [ "$(state)" = "$before" ] && ok "rm of an IMPORTING revision names weightctl abort, nothing changed" \
  || bad "rm of IMPORTING: rc $rc: $out"
before=$(state)
out=$("$ctl" abort err/ready/v1@1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "CONFLICT: revision .* is READY; only an import can be aborted" <<<"$out" \
  && [ "$(state)" = "$before" ] && ok "abort of a READY revision: CONFLICT naming its state, nothing changed" \
  || bad "abort READY: rc $rc: $out"
out=$("$ctl" abort err/ready/v1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "NOT_FOUND: no IMPORTING generation of that revision" <<<"$out" \
  && [ "$(state)" = "$before" ] && ok "abort without @GEN and nothing IMPORTING: NOT_FOUND, nothing changed" \
  || bad "abort no IMPORTING: rc $rc: $out"
keys=$("$ctl" kv ls | grep -c "/err/stale/v1/")
[ "$keys" -gt 0 ] && ok "the stale import holds $keys objects" || bad "no objects of the stale import: $("$ctl" kv ls)"
out=$("$ctl" abort err/stale/v1 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "^err/stale/v1@1: import aborted" <<<"$out" \
  && ok "abort err/stale/v1 (the newest IMPORTING generation): $(tail -1 <<<"$out")" || bad "abort: rc $rc: $out"
gone=0
for _ in $(seq 200); do
  "$ctl" info err/stale/v1@1 >/dev/null 2>&1 || { gone=1; break; }
  sleep 0.05
done
out=$("$ctl" info err/stale/v1@1 2>&1)
keys=$("$ctl" kv ls | grep -c "/err/stale/v1/")
used2=$(used)
# What the import had put is freed with it; the writes the killed writer had
# started but not ended are the node's to take back (node.put_timeout_ms).
[ $gone -eq 1 ] && grep -q "NOT_FOUND" <<<"$out" && [ "$keys" -eq 0 ] && [ "$used2" -lt "$used1" ] \
  && ok "the aborted import is forgotten, none of its objects is left (segment use $used1 -> $used2)" \
  || bad "after abort: $keys keys left, used $used1 -> $used2: $out"
out=$("$ctl" put --namespace err --resource stale --revision v1 "$tmp/abort.safetensors" 2>&1) \
  && ok "the aborted import's name takes a new put" || bad "put after abort: $out"
grep -q "^usage: weightctl abort ID" <<<"$("$ctl" abort --help)" && ok "abort --help" || bad "abort --help"

# -- upsert_abort_of_a_dead_trainers_claim ------------------------------------------------
mk_st "$tmp/lin.safetensors" a.weight:16:16
"$ctl" put --namespace err --resource lin --revision v1 "$tmp/lin.safetensors" >/dev/null || bad "put err/lin"
mg=$("$ctl" --json info err/lin/v1@1 | sed -n 's/.*"metadata_generation":\([0-9]*\).*/\1/p')
env "${pyenv[@]}" PYTHONPATH="$SOURCE_DIR/python" WEIGHTSTORE_LIB="$BUILD_DIR/lib/libweightclient.so" \
  "$py" - "$tmp/master.sock" "$mg" <<'PY' 2>"$tmp/trainer.err"
import os, sys
import numpy as np
from weightstore import WeightStore
s = WeightStore(sys.argv[1], payload_bytes=65536)
u = s.weight_upsert(2, replacing="err/lin/v1@1", expected_metadata_generation=int(sys.argv[2]))
u.weight_put_tensor("a.weight", np.ones((64, 64), np.float32))
os._exit(0)  # the trainer dies: no commit, no abort
PY
out=$("$ctl" upsert status err/lin/v1)
grep -Eq "phase (CLAIMED|IMPORTING_TARGET)" <<<"$out" && ok "a dead trainer's claim stays open: $(grep -o 'phase *[A-Z_]*' <<<"$out" | head -1)" \
  || bad "claim after the trainer died: $out $(cat "$tmp/trainer.err")"
out=$("$ctl" upsert err/lin/v1@1 --generation 3 "$tmp/lin.safetensors" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "CONFLICT" <<<"$out" && ok "the lineage is blocked: another target generation CONFLICT" \
  || bad "blocked lineage: rc $rc: $out"
out=$("$ctl" upsert abort err/lin/v1 2>&1); rc=$?
st=$("$ctl" upsert status err/lin/v1)
[ $rc -eq 0 ] && grep -q "ABORTED" <<<"$st" && grep -q "aborting claim" <<<"$out" \
  && "$ctl" exists err/lin/v1@1 >/dev/null && "$ctl" get err/lin/v1@1 --out "$tmp/lin1" >/dev/null \
  && st_same "$tmp/lin.safetensors" "$tmp/lin1/rank0-of-1.safetensors" \
  && ok "upsert abort: the claim ABORTED, the base READY and read back byte for byte" \
  || bad "upsert abort: rc $rc: $out / $st"
gone=0
for _ in $(seq 200); do
  "$ctl" info err/lin/v1@2 >/dev/null 2>&1 || { gone=1; break; }
  sleep 0.05
done
[ $gone -eq 1 ] && ok "the aborted claim's target is gone" || bad "target still there: $("$ctl" info err/lin/v1@2 2>&1)"
before=$(state)
out=$("$ctl" upsert abort err/lin/v1 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "^weightctl: upsert abort err/lin/v1: CONFLICT: the lineage has no open claim (claim .* is ABORTED); nothing to abort$" <<<"$out" \
  && [ "$(state)" = "$before" ] && ok "upsert abort without an open claim: CONFLICT, nothing changed" \
  || bad "upsert abort again: rc $rc: $out"
out=$("$ctl" upsert err/lin/v1@1 --generation 3 --wait "$tmp/lin.safetensors" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "COMMITTED" <<<"$out" && ok "the lineage takes another target after the abort" \
  || bad "upsert after abort: rc $rc: $out"

kill -9 $pid; wait $pid 2>/dev/null; pid=""
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
