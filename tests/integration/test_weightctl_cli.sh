#!/usr/bin/env bash
# test_weightctl_cli.sh -- weightctl's command-line habits, each against a
# real store_master with the real weight_mgmt.so (Unix socket, own data and
# /dev/shm directories, removed on exit): --version; `CMD --help` with
# examples for every command; global flags after the command; bad values
# refused in exactly one line naming the flag and the value (exit 2), with
# nothing changed on the master; `-` for stdin/stdout in kv put/get; sizes in
# KiB/MiB in status and errors, --bytes for raw numbers; --progress
# plain|none; ls --limit N rows; upsert status; rm --wait for a lease, with
# --timeout; get creating its output directory, refusing a bad one before any
# lease, writing as it receives (peak RSS of the weightctl process, from
# wait4's rusage, against the file's size) and --all-ranks (--tp without a
# rank and uneven splits: test_weightctl_tp.sh); migrate --wait and op --wait
# on a migration stuck retrying (the cold tier's directory replaced by a
# file): --progress plain lines with its progress, attempts and last error,
# --timeout ending the wait with a line naming the operation still running
# (which goes on); a migration that ends: its last line says SUCCEEDED.
set -uo pipefail
: "${BUILD_DIR:?}" "${SOURCE_DIR:?}"
ctl="$BUILD_DIR/bin/weightctl"
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/wm-cli-XXXXXX)
shm=$(mktemp -d /dev/shm/wm-cli-XXXXXX)
pass=0 fail=0
ok()  { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
pid=""
holder=""
# A sanitizer build: its shadow memory makes RSS meaningless (the ratio is
# reported, not judged), and the Python reader needs the ASan runtime first.
sanitized=0
grep -q '^WM_SANITIZE:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null && sanitized=1
pyenv=()
[ $sanitized -eq 1 ] && pyenv=(LD_PRELOAD="$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0)
cleanup() {
  [ -n "$holder" ] && kill -9 "$holder" 2>/dev/null
  [ -n "$pid" ] && { kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
  rm -rf "$tmp" "$shm"
}
trap cleanup EXIT
. "$(dirname "$0")/weightctl_lib.sh"
weight_master_yaml "$tmp/master.yaml" "cli$$" 100663296
start_master "$tmp/master.yaml"

# one_line_refusal NAME EXPECTED_LINE ARGS...: exit 2, exactly that one line
# on stderr, nothing on stdout, nothing changed.
one_line_refusal() {
  local name=$1 want=$2
  shift 2
  local before after out err rc
  before=$(state)
  out=$("$ctl" "$@" 2>"$tmp/err"); rc=$?
  err=$(cat "$tmp/err")
  after=$(state)
  if [ $rc -eq 2 ] && [ "$err" = "$want" ] && [ -z "$out" ] && [ "$before" = "$after" ]; then
    ok "$name: '$err'"
  else
    bad "$name: rc $rc, stderr [$err], stdout [$out], want [$want]"
  fi
}

# -- --version and CMD --help ---------------------------------------------------
out=$("$ctl" --version); rc=$?
[ $rc -eq 0 ] && grep -Eq '^weightctl [0-9]+\.[0-9]+\.[0-9]+ ' <<<"$out" && ok "--version: $out" || bad "--version: $rc $out"
for cmd in put ls info exists size get policy migrate op rm abort upsert status gate kv; do
  out=$("$ctl" "$cmd" --help 2>&1); rc=$?
  if [ $rc -eq 0 ] && grep -q "^usage: weightctl $cmd" <<<"$out" && grep -q "^examples:" <<<"$out" \
     && grep -q "^  weightctl $cmd\|^  echo .* | weightctl $cmd" <<<"$out"; then
    ok "$cmd --help: usage and examples"
  else
    bad "$cmd --help: $rc $out"
  fi
done
out=$("$ctl" --help); [ $? -eq 0 ] && grep -q "kv put KEY FILE|-" <<<"$out" && ok "--help lists the commands" || bad "--help"

# -- a revision to work with ------------------------------------------------------
mk_st "$tmp/model.safetensors" a.weight:256:128 b.weight:300:64 c.norm:1:640
for v in v1 v2 v3; do
  "$ctl" put --namespace cli --resource tiny --revision $v "$tmp/model.safetensors" >/dev/null \
    || bad "put $v"
done

# -- global flags after the command -------------------------------------------------
a=$(env -u WEIGHTCTL_MASTER "$ctl" --master "$tmp/master.sock" --json ls --namespace cli)
b=$(env -u WEIGHTCTL_MASTER "$ctl" ls --namespace cli --json --master "$tmp/master.sock")
c=$(env -u WEIGHTCTL_MASTER "$ctl" ls --namespace=cli --master="$tmp/master.sock" --json)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && grep -q '"id":"cli/tiny/v3@1"' <<<"$a" \
  && ok "--master and --json after the command answer as before it" || bad "globals after: [$a] [$b] [$c]"
out=$("$ctl" info cli/tiny/v1 --tenant other 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "NOT_FOUND" <<<"$out" && ok "--tenant after the command is used" || bad "--tenant after: $rc $out"

# -- bad values: one line naming the flag and the value, nothing changed ----------------
one_line_refusal "put --generation" "weightctl: put: --generation: 'abc' is not a positive integer" \
  put --namespace cli --resource tiny --revision v9 --generation abc "$tmp/model.safetensors"
one_line_refusal "put --policy" \
  "weightctl: put: --policy: 'warm' is not hot, cold, mixed or mixed:RATIO (0 < RATIO < 1)" \
  put --namespace cli --resource tiny --revision v9 --policy warm "$tmp/model.safetensors"
one_line_refusal "put --mode" "weightctl: put: --mode: 'fast' is not pinned, manual or auto" \
  put --namespace cli --resource tiny --revision v9 --mode fast "$tmp/model.safetensors"
one_line_refusal "put without --revision" \
  "weightctl: put: --namespace, --resource and --revision are required (weightctl put --help)" \
  put --namespace cli --resource tiny "$tmp/model.safetensors"
one_line_refusal "unknown option" "weightctl: put: unknown option --frobnicate (weightctl put --help)" \
  put --frobnicate --namespace cli --resource tiny --revision v9 "$tmp/model.safetensors"
one_line_refusal "ls --limit" "weightctl: ls: --limit: '0' is not a positive number of rows" ls --limit 0
one_line_refusal "migrate --to" \
  "weightctl: migrate: --to: 'lukewarm' is not hot, cold, mixed or mixed:RATIO (0 < RATIO < 1)" \
  migrate cli/tiny/v1 --to lukewarm
one_line_refusal "migrate --to mixed:1.5" \
  "weightctl: migrate: --to: 'mixed:1.5' is not hot, cold, mixed or mixed:RATIO (0 < RATIO < 1)" \
  migrate cli/tiny/v1 --to mixed:1.5
one_line_refusal "policy --mode" "weightctl: policy: --mode: 'often' is not pinned, manual or auto" \
  policy cli/tiny/v1 --mode often
one_line_refusal "rm --timeout" "weightctl: rm: --timeout: '-3' is not a number of seconds from 1 to 604800" \
  rm cli/tiny/v1 --wait --timeout -3
one_line_refusal "rm --timeout without --wait" \
  "weightctl: rm: --timeout bounds --wait: give both (weightctl rm --help)" rm cli/tiny/v1 --timeout 5
one_line_refusal "op id" "weightctl: op: OPERATION_ID: 'seven' is not a positive integer" op seven
one_line_refusal "get --rank beyond --tp" "weightctl: get: --rank: '2' is not a rank below --tp 2" \
  get cli/tiny/v1 --out "$tmp/never" --tp 2 --rank 2
one_line_refusal "get --split" \
  "weightctl: get: --split: 'w' is not PATTERN=DIM (DIM 0..7, at most 128 rules)" \
  get cli/tiny/v1 --out "$tmp/never" --tp 2 --rank 0 --split w
one_line_refusal "--progress" "weightctl: --progress: 'fancy' is not auto, plain or none" \
  get cli/tiny/v1 --out "$tmp/never" --progress fancy
one_line_refusal "--master" \
  "weightctl: --master / \$WEIGHTCTL_MASTER: master list 'a:1,': item 2 is empty" ls --master a:1,
one_line_refusal "unknown command" "weightctl: unknown command 'frob' (weightctl --help lists them)" frob
one_line_refusal "kv sub-command" "weightctl: kv: 'cp' is not ls, put, get or rm (weightctl kv --help)" kv cp a b
[ ! -e "$tmp/never" ] && ok "refused gets created no directory" || bad "refused get made $tmp/never"

# -- kv put/get with - -------------------------------------------------------------
head -c 200000 /dev/urandom >"$tmp/blob"
"$ctl" kv put piped/blob - <"$tmp/blob" && ok "kv put KEY - reads stdin" || bad "kv put -"
"$ctl" kv get piped/blob - >"$tmp/blob.back" && cmp -s "$tmp/blob" "$tmp/blob.back" \
  && ok "kv get KEY - writes stdout, the same bytes" || bad "kv get -"
"$ctl" kv put piped/empty - </dev/null && "$ctl" kv get piped/empty - >"$tmp/empty.back" \
  && [ ! -s "$tmp/empty.back" ] && ok "empty object through stdin and stdout" || bad "empty via -"
one_line_refusal "kv get - with --json" \
  "weightctl: kv get: --json and '-' both want stdout; give a FILE" --json kv get piped/blob -

# -- sizes for people in status and errors, --bytes raw --------------------------------
out=$("$ctl" status)
grep -Eq '^memory +[0-9.]+ (B|KiB|MiB) of 96.0 MiB used' <<<"$out" && ok "status: $(grep ^memory <<<"$out")" \
  || bad "status sizes: $out"
out=$("$ctl" status --bytes)
grep -Eq '^memory +[0-9]+ of 100663296 bytes used' <<<"$out" && ok "status --bytes: $(grep ^memory <<<"$out")" \
  || bad "status --bytes: $out"
head -c 120000000 /dev/zero >"$tmp/huge"
err=$("$ctl" kv put huge/x "$tmp/huge" 2>&1); rc=$?
errb=$("$ctl" kv put huge/x "$tmp/huge" --bytes 2>&1)
# the master's answer names the bytes needed, the room there is and the
# setting to raise; weightctl adds the object's size and the memory in use
used=$(grep -o '[0-9.]* [KM]iB of' <<<"$("$ctl" status)" | cut -d' ' -f1-2)
usedb=$("$ctl" status --bytes | sed -n 's/^memory *\([0-9]*\) of.*/\1/p')
if [ $rc -eq 1 ] && [[ "$err" == "weightctl: kv put huge/x: put start 'huge/x': SMP_ENOSPC: no memory segment has room: 114.4 MiB needed, the largest free range is "*" MiB, "*" MiB short ("*" free in all, of 96.0 MiB on 1 nodes); raise node.segment_bytes"*" (putting 114.4 MiB; memory: 96.0 MiB, $used used)" ]] \
   && [[ "$errb" == "weightctl: kv put huge/x: put start 'huge/x': SMP_ENOSPC: no memory segment has room: 120000000 bytes needed, the largest free range is "*" bytes, "*" bytes short ("*" bytes free in all, of 100663296 bytes on 1 nodes); raise node.segment_bytes"*" (putting 120000000 bytes; memory: 100663296 bytes, $usedb bytes used)" ]]; then
  ok "error sizes: '$err' / --bytes: '$errb'"
else
  bad "error sizes: $rc [$err] [$errb]"
fi
rm -f "$tmp/huge"

# -- --progress ---------------------------------------------------------------------
"$ctl" get cli/tiny/v1 --out "$tmp/p" --progress plain >/dev/null 2>"$tmp/plain"
want=$(for s in $(seq 0 5 100); do printf 'get: %3d%% of\n' "$s"; done)
[ "$(cut -c1-12 "$tmp/plain")" = "$want" ] && ok "--progress plain: 21 lines, 0 % to 100 % by 5" \
  || bad "--progress plain: $(cat "$tmp/plain")"
"$ctl" --progress=none get cli/tiny/v1 --out "$tmp/p" >/dev/null 2>"$tmp/none"
"$ctl" get cli/tiny/v1 --out "$tmp/p" >/dev/null 2>"$tmp/auto"
[ ! -s "$tmp/none" ] && [ ! -s "$tmp/auto" ] && ok "--progress none, and auto off a terminal: silent" \
  || bad "progress none/auto: $(cat "$tmp/none" "$tmp/auto")"

# -- ls --limit N rows ------------------------------------------------------------------
out=$("$ctl" ls --namespace cli --limit 2)
rows=$(grep -c '^cli/tiny/' <<<"$out")
token=$(sed -n 's/^next page: --page-token //p' <<<"$out")
rest=$("$ctl" ls --namespace cli --limit 2 --page-token "$token" | grep -c '^cli/tiny/')
[ "$rows" -eq 2 ] && [ -n "$token" ] && [ "$rest" -eq 1 ] && ok "ls --limit 2: 2 rows, then the third from the token" \
  || bad "ls --limit: $rows rows, token [$token], rest $rest: $out"
out=$("$ctl" --json ls --namespace cli --limit 1)
[ "$(grep -o '"id":"cli/tiny' <<<"$out" | wc -l)" -eq 1 ] && ! grep -q '"next_page_token":""' <<<"$out" \
  && ok "ls --json --limit 1: one revision and a token" || bad "ls --json --limit 1: $out"

# -- upsert status ----------------------------------------------------------------------
"$ctl" upsert cli/tiny/v2@1 --generation 2 --wait --request-id roll-v2 "$tmp/model.safetensors" >/dev/null || bad "upsert"
out=$("$ctl" upsert status cli/tiny/v2); rc=$?
[ $rc -eq 0 ] && grep -q "cli/tiny/v2@1 -> cli/tiny/v2@2 (put-first) phase COMMITTED" <<<"$out" \
  && ok "upsert status: $out" || bad "upsert status: $rc $out"
# The same command again (its answer lost, say): the claim, not a CONFLICT --
# though the base it was made at is deleted by now
out=$("$ctl" upsert cli/tiny/v2@1 --generation 2 --wait --request-id roll-v2 "$tmp/model.safetensors" 2>&1); rc=$?
[ $rc -eq 0 ] && grep -qF "weightctl: upsert: request roll-v2 is the lineage's claim (phase COMMITTED): retried with its arguments" <<<"$out" \
  && grep -q "phase COMMITTED" <<<"$out" && [ "$("$ctl" ls --namespace cli --all | grep -c "cli/tiny/v2@")" -eq 2 ] \
  && grep -qF "weightctl: upsert: the target of request roll-v2 is written already: the files given now are not sent (nor compared with it)" <<<"$out" \
  && ok "upsert retried with its request id answers the committed claim" || bad "upsert retry: $rc $out"
out=$("$ctl" upsert cli/tiny/v2@1 --generation 2 --request-id other "$tmp/model.safetensors" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "STALE_GENERATION\|CONFLICT\|NOT_FOUND" <<<"$out" \
  && ok "upsert with another request id over a committed claim is refused" || bad "upsert other id: $rc $out"
out=$("$ctl" upsert status cli/tiny/v3 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "NOT_FOUND" <<<"$out" && ok "upsert status without a claim: NOT_FOUND" \
  || bad "upsert status none: $rc $out"

# -- rm --wait for a lease, --timeout ----------------------------------------------------
# A Python reader (weightstore, zero-copy) holds v3's lease until told to go.
env "${pyenv[@]}" PYTHONPATH="$SOURCE_DIR/python" WEIGHTSTORE_LIB="$BUILD_DIR/lib/libweightclient.so" "$py" - \
  "$tmp/master.sock" "$tmp/go" >"$tmp/holder.out" 2>&1 <<'PY' &
import os, sys, time
import weightstore as ws
with ws.WeightStore(sys.argv[1]) as store:
    with store.weight_get("cli/tiny/v3@1") as load:
        print("held", flush=True)
        while not os.path.exists(sys.argv[2]):
            time.sleep(0.05)
PY
holder=$!
for _ in $(seq 200); do grep -q held "$tmp/holder.out" 2>/dev/null && break; sleep 0.05; done
err=$("$ctl" rm cli/tiny/v3@1 --wait --timeout 1 2>&1 >/dev/null); rc=$?
last=$(tail -n 1 <<<"$err")
info=$("$ctl" --json info cli/tiny/v3@1)
if [ $rc -eq 1 ] && [ "$last" = "weightctl: rm cli/tiny/v3@1: TIMEOUT: after 1 s (--timeout) 1 active lease(s); nothing was removed" ] \
   && grep -q '"availability":"READY"' <<<"$info"; then
  ok "rm --wait --timeout 1 with a lease held: '$last', still READY"
else
  bad "rm timeout: $rc [$err] $info"
fi
(sleep 1; touch "$tmp/go") &
out=$("$ctl" rm cli/tiny/v3@1 --wait --timeout 60 2>"$tmp/rm.err"); rc=$?
wait "$holder"; holder=""
[ $rc -eq 0 ] && grep -q "cli/tiny/v3@1: DELETED" <<<"$out" \
  && grep -q "waiting for 1 active lease(s) to end" "$tmp/rm.err" \
  && ok "rm --wait: waited for the lease, then DELETED" || bad "rm --wait: $rc $out $(cat "$tmp/rm.err")"

# -- get: the output directory ----------------------------------------------------------
"$ctl" get cli/tiny/v1 --out "$tmp/deep/er/dir" >/dev/null && st_same "$tmp/model.safetensors" \
  "$tmp/deep/er/dir/rank0-of-1.safetensors" && [ -z "$(ls -A "$tmp/deep/er/dir" | grep -v '^rank0-of-1')" ] \
  && ok "get --out creates the parents; the file holds the model; no temporary left" || bad "get deep dir"
: >"$tmp/plainfile"
before=$(state)
err=$("$ctl" get cli/tiny/v1 --out "$tmp/plainfile/sub" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$err" = "weightctl: get: --out $tmp/plainfile/sub: Not a directory" ] \
  && [ "$before" = "$(state)" ] && grep -q '"active_leases":0' <<<"$("$ctl" --json info cli/tiny/v1)" \
  && ok "get into a path under a file: '$err', before any lease" || bad "get bad dir: $rc $err"

# -- get --all-ranks and --tp N --rank R agree --------------------------------------------
# (c.norm is 1 x 640: its one row does not split evenly into 2 parts)
"$ctl" get cli/tiny/v1 --out "$tmp/all" --tp 2 --all-ranks --allow-uneven >/dev/null \
  && "$ctl" get cli/tiny/v1 --out "$tmp/one" --tp 2 --rank 1 --allow-uneven >/dev/null \
  && [ -f "$tmp/all/rank0-of-2.safetensors" ] \
  && cmp -s "$tmp/all/rank1-of-2.safetensors" "$tmp/one/rank1-of-2.safetensors" \
  && ok "get --tp 2 --all-ranks writes both ranks (rank 1 as --rank 1 does)" || bad "all ranks"

# -- get writes as it receives: peak RSS against the file's size --------------------------------
mk_st "$tmp/big.safetensors" w0:2048:1024 w1:2048:1024 w2:2048:1024 w3:2048:1024 w4:2048:1024 w5:2048:1024
"$ctl" put --namespace cli --resource big --revision v1 "$tmp/big.safetensors" >/dev/null || bad "put big"
ratio=$("$py" - "$ctl" "$tmp/rss" <<'PY'
import os, sys
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.execv(sys.argv[1], [sys.argv[1], "get", "cli/big/v1", "--out", sys.argv[2]])
_, status, ru = os.wait4(pid, 0)
size = os.path.getsize(os.path.join(sys.argv[2], "rank0-of-1.safetensors"))
print("%.3f %d %d %d" % (ru.ru_maxrss * 1024 / size, ru.ru_maxrss * 1024, size, os.waitstatus_to_exitcode(status)))
PY
)
read -r r rss size code <<<"$ratio"
if [ $sanitized -eq 1 ] && [ "$code" = 0 ] && st_same "$tmp/big.safetensors" "$tmp/rss/rank0-of-1.safetensors"; then
  ok "get of a $size-byte file (sanitizer build: peak RSS $r x the file, not judged)"
elif [ "$code" = 0 ] && "$py" -c "import sys; sys.exit(0 if $r <= 1.2 else 1)" \
   && st_same "$tmp/big.safetensors" "$tmp/rss/rank0-of-1.safetensors"; then
  ok "get of a $size-byte file: peak RSS $rss bytes, $r x the file (<= 1.2)"
else
  bad "get RSS: ratio $r (rss $rss, file $size, exit $code)"
fi

# -- put --from-dir: a Hugging Face model directory, back as a loadable one ---------------
hf="$tmp/hf"
mkdir -p "$hf/original"
mk_st "$hf/model-00001-of-00002.safetensors" model.embed.weight:64:32 model.layers.0.q.weight:32:32
mk_st "$hf/model-00002-of-00002.safetensors" model.layers.0.k.weight:32:32 model.norm.weight:1:32
cat >"$hf/model.safetensors.index.json" <<'JSON'
{"metadata": {"total_size": 16512}, "weight_map": {
  "model.embed.weight": "model-00001-of-00002.safetensors",
  "model.layers.0.q.weight": "model-00001-of-00002.safetensors",
  "model.layers.0.k.weight": "model-00002-of-00002.safetensors",
  "model.norm.weight": "model-00002-of-00002.safetensors"}}
JSON
echo '{"architectures": ["TinyForCausalLM"], "hidden_size": 32}' >"$hf/config.json"
echo '{"max_new_tokens": 16}' >"$hf/generation_config.json"
head -c 300000 /dev/urandom >"$hf/tokenizer.json"
: >"$hf/special_tokens_map.json"
echo x >"$hf/.gitattributes"
out=$("$ctl" put --namespace cli --resource hf --revision v1 --from-dir "$hf" 2>"$tmp/hf.err"); rc=$?
[ $rc -eq 0 ] && grep -q "2 tensor file(s) and 4 attachment(s)" <<<"$out" \
  && grep -q "not stored: .gitattributes (hidden), original (a directory)" "$tmp/hf.err" \
  && ok "put --from-dir: $out; $(cat "$tmp/hf.err")" || bad "put --from-dir: $rc $out $(cat "$tmp/hf.err")"
"$ctl" get cli/hf/v1 --out "$tmp/hfback" >/dev/null || bad "get of the hf revision"
same=1
for f in config.json generation_config.json tokenizer.json special_tokens_map.json; do
  cmp -s "$hf/$f" "$tmp/hfback/$f" || same=0
done
"$py" - "$hf" "$tmp/hfback/model.safetensors" <<'PY' || same=0
import json, struct, sys
def tensors(p):
    d = open(p, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n]); h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
src = {}
for f in set(json.load(open(sys.argv[1] + "/model.safetensors.index.json"))["weight_map"].values()):
    src.update(tensors(sys.argv[1] + "/" + f))
sys.exit(0 if tensors(sys.argv[2]) == src else 1)
PY
[ $same -eq 1 ] && [ "$(ls -A "$tmp/hfback" | tr '\n' ' ')" = "config.json generation_config.json model.safetensors special_tokens_map.json tokenizer.json " ] \
  && ok "get --out: every file byte for byte, the shards' tensors in model.safetensors, nothing else" \
  || bad "hf round trip: $(ls -A "$tmp/hfback")"
"$ctl" get cli/hf/v1 --out "$tmp/hftp" --tp 2 --all-ranks --replicate '*norm*' >/dev/null && cmp -s "$hf/config.json" "$tmp/hftp/config.json" \
  && [ -f "$tmp/hftp/rank1-of-2.safetensors" ] && ok "get --tp 2 --all-ranks: the rank files and the attachments" \
  || bad "hf tp2"
echo '{"architectures": ["TinyForCausalLM"], "hidden_size": 32, "v": 2}' >"$hf/config.json"
out=$("$ctl" upsert cli/hf/v1@1 --generation 2 --wait --from-dir "$hf" 2>&1); rc=$?
"$ctl" get cli/hf/v1@2 --out "$tmp/hf2" >/dev/null && cmp -s "$hf/config.json" "$tmp/hf2/config.json" \
  && cmp -s "$hf/tokenizer.json" "$tmp/hf2/tokenizer.json" && st_same "$tmp/hfback/model.safetensors" "$tmp/hf2/model.safetensors" \
  && [ $rc -eq 0 ] && grep -q "phase COMMITTED" <<<"$out" \
  && ok "upsert --from-dir: generation 2 from the directory, its new config.json and the tensors back" || bad "upsert --from-dir: $rc $out"
one_line_refusal "upsert --from-dir with a FILE" \
  "weightctl: upsert: --from-dir takes the files of the directory: BASE_ID, no FILE (weightctl upsert --help)" \
  upsert cli/hf/v1@2 --generation 3 --from-dir "$hf" "$tmp/model.safetensors"
mv "$hf/model-00002-of-00002.safetensors" "$tmp/aside.safetensors"
before=$(state)
err=$("$ctl" put --namespace cli --resource hf --revision v2 --from-dir "$hf" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$err" = "weightctl: put: --from-dir $hf: model-00002-of-00002.safetensors, named by model.safetensors.index.json, is missing" ] \
  && [ "$before" = "$(state)" ] && ok "an incomplete shard set refused: '$err', nothing changed" || bad "missing shard: $rc $err"
mv "$tmp/aside.safetensors" "$hf/model-00002-of-00002.safetensors"
truncate -s 70M "$hf/big.bin"
err=$("$ctl" put --namespace cli --resource hf --revision v2 --from-dir "$hf" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$err" = "weightctl: put: --from-dir $hf: big.bin is 70.0 MiB, over the 64.0 MiB an attachment may hold" ] \
  && [ "$before" = "$(state)" ] && ok "an attachment over the cap refused: '$err', nothing changed" || bad "big attachment: $rc $err"
rm -f "$hf/big.bin" "$hf/model.safetensors.index.json"
err=$("$ctl" put --namespace cli --resource hf --revision v2 --from-dir "$hf" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$err" = "weightctl: put: --from-dir $hf: neither model.safetensors.index.json nor model.safetensors is there" ] \
  && [ "$before" = "$(state)" ] && ok "a directory without safetensors refused: '$err'" || bad "no shards: $rc $err"

# -- migrate --wait / op --wait: progress lines and --timeout -----------------------------
one_line_refusal "op --timeout without --wait" \
  "weightctl: op: --timeout bounds --wait: give both (weightctl op --help)" op 1 --timeout 5
one_line_refusal "migrate --timeout" \
  "weightctl: migrate: --timeout: '0' is not a number of seconds from 1 to 604800" \
  migrate cli/tiny/v1 --to cold --wait --timeout 0
one_line_refusal "migrate --timeout without --wait" \
  "weightctl: migrate: --timeout bounds --wait: give both (weightctl migrate --help)" \
  migrate cli/tiny/v1 --to cold --timeout 5
"$ctl" put --namespace cli --resource moved --revision v1 "$tmp/model.safetensors" >/dev/null || bad "put cli/moved/v1"
out=$("$ctl" --progress plain migrate cli/moved/v1 --to cold --wait --timeout 300 2>"$tmp/err"); rc=$?
[ $rc -eq 0 ] && grep -q "^operation   [0-9]* MIGRATING SUCCEEDED" <<<"$out" \
  && tail -1 "$tmp/err" | grep -Eq "^weightctl: migrate cli/moved/v1@1: operation [0-9]+ MIGRATING SUCCEEDED: ([0-9]+)/\1 members, " \
  && ok "migrate --wait --progress plain: its last line says SUCCEEDED, exit 0" \
  || bad "migrate --wait to its end: rc $rc, out [$out], err [$(cat "$tmp/err")]"
for v in v1 v2; do # bytes of their own: no cold file of theirs exists yet
  mk_st "$tmp/stuck-$v.safetensors" a.weight:64:64
  "$ctl" put --namespace cli --resource stuck --revision $v "$tmp/stuck-$v.safetensors" >/dev/null || bad "put stuck $v"
done
# The cold tier's directory is gone (a file in its place): every cold write
# fails and is retried, to the end of this script.
# (the node may be writing a temporary there as rm walks it: rm again)
for _ in $(seq 100); do rm -rf "$tmp/data/cold" 2>/dev/null && break; sleep 0.05; done
touch "$tmp/data/cold"
[ -f "$tmp/data/cold" ] || bad "the cold directory could not be replaced by a file"
"$ctl" migrate cli/stuck/v1 --to cold >/dev/null 2>&1 || bad "migrate cli/stuck/v1"
opid=$("$ctl" --json info cli/stuck/v1 | sed -n 's/.*"operation_id":\([0-9]*\).*/\1/p')
for _ in $(seq 300); do
  "$ctl" op "$opid" | grep -q "error .*cold replica" && break
  sleep 0.05
done
out=$("$ctl" --progress plain op "$opid" --wait --timeout 1 2>"$tmp/err"); rc=$?
err=$(cat "$tmp/err")
[ $rc -eq 1 ] && [ -z "$out" ] \
  && grep -Eq "^weightctl: op $opid: operation $opid MIGRATING RUNNING: 0/[0-9]+ members, .*, [1-9][0-9]* attempt\(s\); last error: cold replica of .* failed" <<<"$err" \
  && grep -Eq "^weightctl: op $opid: TIMEOUT: after 1 s \(--timeout\) operation $opid \(MIGRATING\) is still RUNNING: .* attempt\(s\); last error: cold replica .*; it goes on \(weightctl op $opid shows it\)$" <<<"$err" \
  && "$ctl" op "$opid" | grep -q "MIGRATING RUNNING" \
  && ok "op --wait --timeout on a stuck migration: its attempts and last error, then TIMEOUT naming it (still running)" \
  || bad "op --wait --timeout: rc $rc, out [$out], err [$err]"
out=$("$ctl" --progress plain migrate cli/stuck/v2 --to cold --wait --timeout 1 2>"$tmp/err"); rc=$?
err=$(cat "$tmp/err")
op2=$("$ctl" --json info cli/stuck/v2 | sed -n 's/.*"operation_id":\([0-9]*\).*/\1/p')
[ $rc -eq 1 ] && [ -z "$out" ] && [ -n "$op2" ] \
  && grep -Eq "^weightctl: migrate cli/stuck/v2@1: operation $op2 MIGRATING RUNNING: 0/[0-9]+ members, " <<<"$err" \
  && grep -q "^weightctl: migrate cli/stuck/v2@1: TIMEOUT: after 1 s (--timeout) operation $op2 (MIGRATING) is still RUNNING: " <<<"$err" \
  && ok "migrate --wait --timeout: progress lines, then TIMEOUT naming operation $op2" \
  || bad "migrate --wait --timeout: rc $rc, out [$out], err [$err]"
out=$("$ctl" --progress none op "$opid" --wait --timeout 1 2>"$tmp/err"); rc=$?
[ $rc -eq 1 ] && [ "$(grep -c "" "$tmp/err")" -eq 1 ] && grep -q "TIMEOUT" "$tmp/err" \
  && ok "--progress none: only the TIMEOUT line" || bad "--progress none: rc $rc: $(cat "$tmp/err")"

kill -9 $pid; wait $pid 2>/dev/null; pid=""
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
