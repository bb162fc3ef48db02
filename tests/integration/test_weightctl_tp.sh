#!/usr/bin/env bash
# test_weightctl_tp.sh -- honest tensor-parallel imports (issue 17), against a
# real store_master with the real weight_mgmt.so (Unix socket, own data and
# /dev/shm directories, removed on exit). Each section is named after the
# bullet it pins:
#  - tp_files_carry_provenance: get --tp writes weight_mgmt.tp / rank /
#    source / split into each file's __metadata__;
#  - put_tp_refuses_swapped_duplicate_and_other_rules: put --tp checks them
#    (swapped files, one file twice, a copy of one, another revision's rank,
#    another --tp, other split rules, a rank file put whole), each refused
#    with the line naming file and cause, nothing published;
#  - put_tp_without_provenance_checked_by_shapes: files without it are joined
#    when their shapes agree with the rules, and refused (duplicates, shapes
#    against the rules, uneven parts out of rank order) when they do not;
#  - get_tp_without_rank_writes_all_ranks and
#    get_uneven_split_refused_without_allow_uneven;
#  - upsert_takes_rank_files: upsert --tp N with --split / --replicate as put
#    (generation 2 of a lineage from rank files, read back byte for byte),
#    its rank files checked as put's are (refusals name upsert, nothing
#    changed), a rank file upserted whole pointing to upsert --tp N.
set -uo pipefail
: "${BUILD_DIR:?}" "${SOURCE_DIR:?}"
ctl="$BUILD_DIR/bin/weightctl"
py=/usr/bin/python3
tmp=$(mktemp -d /tmp/wm-tp-XXXXXX)
shm=$(mktemp -d /dev/shm/wm-tp-XXXXXX)
pass=0 fail=0
ok()  { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }
pid=""
cleanup() {
  [ -n "$pid" ] && { kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
  rm -rf "$tmp" "$shm"
}
trap cleanup EXIT
cat >"$tmp/master.yaml" <<YAML
listen:
  tcp: ""
  unix: "$tmp/master.sock"
  admin: ""
data_dir: "$tmp/data"
node:
  embedded: true
  id: "tp$$"
  segment_dir: "$shm"
  segment_bytes: 33554432
cluster:
  default_weight_preferred_residency: hot
  default_weight_migration_mode: manual
plugins:
  - path: "$BUILD_DIR/lib/weight_mgmt.so"
YAML
. "$(dirname "$0")/weightctl_lib.sh"
start_master "$tmp/master.yaml"

# Safetensors files written here, independently of the client library.
# mk_st PATH [KEY=VALUE...] NAME:D0xD1...: F32 random, KEY=VALUE pairs go to
# __metadata__.
mk_st() {
  "$py" - "$@" <<'PY'
import json, os, struct, sys
path, header, meta, blobs, at = sys.argv[1], {}, {}, [], 0
for spec in sorted(sys.argv[2:]):
    if "=" in spec:
        k, v = spec.split("=", 1); meta[k] = v; continue
    name, dims = spec.split(":")
    shape = [int(d) for d in dims.split("x")]
    n = 4
    for d in shape: n *= d
    header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + n]}
    blobs.append(os.urandom(n)); at += n
if meta: header["__metadata__"] = meta
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for b in blobs: f.write(b)
PY
}
# meta PATH: the file's __metadata__ as sorted JSON.
meta() {
  "$py" -c 'import json,struct,sys; d=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",d[:8])[0]; print(json.dumps(json.loads(d[8:8+n]).get("__metadata__",{}),sort_keys=True))' "$1"
}
# strip IN OUT: IN without its __metadata__ (what another tool would write).
strip() {
  "$py" - "$1" "$2" <<'PY'
import json, struct, sys
d = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n]); h.pop("__metadata__", None)
t = json.dumps(h, separators=(",", ":")).encode(); t += b" " * (-len(t) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(t)) + t + d[8 + n:])
PY
}
# st_same A B: the same tensors, byte for byte (metadata aside).
st_same() {
  "$py" - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    d = open(p, "rb").read()
    n = struct.unpack("<Q", d[:8])[0]
    h = json.loads(d[8:8 + n]); h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], d[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items()}
sys.exit(0 if load(sys.argv[1]) == load(sys.argv[2]) else 1)
PY
}
state() { "$ctl" --json ls --all | sed "s/\"last_access_ms\":[0-9]*//g"; } # a lease moves last access
# refused NAME EXPECTED_LINE ARGS...: put exits 1 with exactly that line on
# stderr; cli/m/bad is not there and nothing changed on the master.
refused() {
  local name=$1 want=$2
  shift 2
  local before after err rc
  before=$(state)
  "$ctl" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  err=$(cat "$tmp/err")
  after=$(state)
  if [ $rc -eq 1 ] && [ "$err" = "$want" ] && [ ! -s "$tmp/out" ] && [ "$before" = "$after" ] \
     && ! "$ctl" exists cli/m/bad@1 >/dev/null 2>&1 && ! grep -q 'cli/m/bad' <<<"$after"; then
    ok "$name: '$err'"
  else
    bad "$name: rc $rc, stderr [$err], want [$want]"
  fi
}
put_bad() { echo put --namespace cli --resource m --revision bad "$@"; }

mk_st "$tmp/v1.safetensors" format=pt a.weight:8x6 b.weight:4x10 norm:10
mk_st "$tmp/v2.safetensors" format=pt a.weight:8x6 b.weight:4x10 norm:10
mk_st "$tmp/odd.safetensors" c.weight:5x4 norm:3
for v in v1 v2 odd; do
  "$ctl" put --namespace cli --resource m --revision $v "$tmp/$v.safetensors" >/dev/null || bad "put $v"
done
src=cli/m/v1@1

# -- get_tp_without_rank_writes_all_ranks --------------------------------------------
d2="$tmp/d2"
out=$("$ctl" get cli/m/v1@1 --out "$d2" --tp 2); rc=$?
"$ctl" get cli/m/v1@1 --out "$tmp/one" --tp 2 --rank 1 >/dev/null
[ $rc -eq 0 ] && [ "$(ls "$d2" | tr '\n' ' ')" = "rank0-of-2.safetensors rank1-of-2.safetensors " ] \
  && [ "$(grep -c '^wrote ' <<<"$out")" -eq 2 ] && cmp -s "$d2/rank1-of-2.safetensors" "$tmp/one/rank1-of-2.safetensors" \
  && ok "get --tp 2 without --rank writes both ranks (rank 1 as --rank 1 does)" || bad "get --tp 2 all: $rc $out"

# -- get_uneven_split_refused_without_allow_uneven -------------------------------------
before=$(state)
err=$("$ctl" get cli/m/odd@1 --out "$tmp/odd" --tp 2 2>&1 >/dev/null); rc=$?
want="weightctl: get cli/m/odd@1: INVALID_ARGUMENT: tensor c.weight: dimension 0 (5) does not split evenly into 2 parts; --allow-uneven gives the first 1 rank(s) one more, or --replicate it or --split it along another dimension"
[ $rc -eq 1 ] && [ "$err" = "$want" ] && [ -z "$(ls -A "$tmp/odd")" ] && [ "$before" = "$(state)" ] \
  && grep -q '"active_leases":0' <<<"$("$ctl" --json info cli/m/odd@1)" \
  && ok "an uneven split refused: '$err'; no file, no lease left" || bad "uneven: $rc [$err]"
"$ctl" get cli/m/odd@1 --out "$tmp/odd" --tp 2 --allow-uneven >/dev/null \
  && "$py" - "$tmp/odd" <<'PY' && ok "--allow-uneven: rank 0 holds 3 rows of c.weight, rank 1 2" || bad "allow-uneven"
import json, struct, sys
def shape(p):
    d = open(p, "rb").read(); n = struct.unpack("<Q", d[:8])[0]
    return json.loads(d[8:8 + n])["c.weight"]["shape"]
sys.exit(0 if shape(sys.argv[1] + "/rank0-of-2.safetensors") == [3, 4]
         and shape(sys.argv[1] + "/rank1-of-2.safetensors") == [2, 4] else 1)
PY
"$ctl" get cli/m/odd@1 --out "$tmp/oddrep" --tp 2 --replicate 'c.*' >/dev/null \
  && ok "an uneven tensor replicated by the rules needs no --allow-uneven" || bad "uneven replicated"

# -- tp_files_carry_provenance ---------------------------------------------------------
m1=$(meta "$d2/rank1-of-2.safetensors")
want="{\"format\": \"pt\", \"weight_mgmt.rank\": \"1\", \"weight_mgmt.source\": \"$src\", \"weight_mgmt.split\": \"{\\\"a.weight\\\":0,\\\"b.weight\\\":0}\", \"weight_mgmt.tp\": \"2\"}"
[ "$m1" = "$want" ] && ok "rank 1's __metadata__, the source's own kept: $m1" || bad "provenance: [$m1] want [$want]"
"$ctl" get cli/m/v1@1 --out "$tmp/whole" >/dev/null || bad "get whole"
mw=$(meta "$tmp/whole/rank0-of-1.safetensors")
want="{\"format\": \"pt\", \"weight_mgmt.rank\": \"0\", \"weight_mgmt.source\": \"$src\", \"weight_mgmt.split\": \"{}\", \"weight_mgmt.tp\": \"1\"}"
[ "$mw" = "$want" ] && ok "at TP 1 too: $mw" || bad "tp 1 meta: [$mw] want [$want]"
mo=$(meta "$tmp/odd/rank0-of-2.safetensors")
grep -qv '"format"' <<<"$mo" && ! grep -q '"format"' <<<"$mo" && ok "a source without __metadata__ gets only the provenance: $mo" \
  || bad "odd meta: $mo"
"$ctl" get cli/m/v1@1 --out "$tmp/d3" --tp 2 --split 'b.*=1' --replicate 'a.*' >/dev/null || bad "get d3"
m0=$(meta "$tmp/d3/rank0-of-2.safetensors")
grep -qF '"weight_mgmt.split": "{\"b.weight\":1}"' <<<"$m0" && grep -qF '"weight_mgmt.rank": "0"' <<<"$m0" \
  && ok "the split recorded is the one the rules resolved to: $m0" || bad "d3 meta: $m0"

# -- put_tp_refuses_swapped_duplicate_and_other_rules -----------------------------------
r0="$d2/rank0-of-2.safetensors" r1="$d2/rank1-of-2.safetensors"
refused "swapped rank files" \
  "weightctl: put: INVALID_ARGUMENT: $r1: holds rank 1 (weight_mgmt.rank in its __metadata__) but is given as rank 0: give the files in rank order" \
  $(put_bad --tp 2 "$r1" "$r0")
refused "the same file twice" \
  "weightctl: put: INVALID_ARGUMENT: $r0: the same file as rank 0's $r0: give each rank's file once, in rank order" \
  $(put_bad --tp 2 "$r0" "$r0")
cp "$r0" "$tmp/copy.safetensors"
refused "a copy of rank 0's file as rank 1" \
  "weightctl: put: INVALID_ARGUMENT: $tmp/copy.safetensors: holds rank 0 (weight_mgmt.rank in its __metadata__) as $r0 does: the same rank's file twice" \
  $(put_bad --tp 2 "$r0" "$tmp/copy.safetensors")
refused "split along another dimension" \
  "weightctl: put: INVALID_ARGUMENT: $r0: tensor b.weight was cut split along dimension 0 (weight_mgmt.split in its __metadata__), the --split / --replicate rules given split it along dimension 1: give the rules the files were cut with" \
  $(put_bad --tp 2 --split 'b.*=1' "$r0" "$r1")
refused "a split tensor replicated by the rules" \
  "weightctl: put: INVALID_ARGUMENT: $r0: tensor a.weight was cut split along dimension 0 (weight_mgmt.split in its __metadata__), the --split / --replicate rules given replicate it: give the rules the files were cut with" \
  $(put_bad --tp 2 --replicate 'a.*' "$r0" "$r1")
t0="$tmp/d3/rank0-of-2.safetensors" t1="$tmp/d3/rank1-of-2.safetensors"
refused "a replicated tensor split by the rules" \
  "weightctl: put: INVALID_ARGUMENT: $t0: tensor a.weight was cut replicated (weight_mgmt.split in its __metadata__), the --split / --replicate rules given split it along dimension 0: give the rules the files were cut with" \
  $(put_bad --tp 2 "$t0" "$t1")
"$ctl" get cli/m/v2@1 --out "$tmp/dv2" --tp 2 >/dev/null || bad "get v2"
refused "another revision's rank" \
  "weightctl: put: INVALID_ARGUMENT: $tmp/dv2/rank1-of-2.safetensors: cut from cli/m/v2@1, rank 0's $r0 from $src (weight_mgmt.source in their __metadata__)" \
  $(put_bad --tp 2 "$r0" "$tmp/dv2/rank1-of-2.safetensors")
"$ctl" get cli/m/v1@1 --out "$tmp/d4" --tp 4 >/dev/null || bad "get tp 4"
refused "files of another --tp" \
  "weightctl: put: INVALID_ARGUMENT: $tmp/d4/rank0-of-4.safetensors: cut for --tp 4 (weight_mgmt.tp in its __metadata__), not --tp 2" \
  $(put_bad --tp 2 "$tmp/d4/rank0-of-4.safetensors" "$tmp/d4/rank1-of-4.safetensors")
refused "one rank's file put as a whole model" \
  "weightctl: put: INVALID_ARGUMENT: $r1: rank 1 of a 2-way split (weight_mgmt.tp in its __metadata__), not a whole model: put every rank's file with --tp 2" \
  $(put_bad "$r1")
strip "$r1" "$tmp/r1-bare.safetensors"
refused "a file without provenance among files with it" \
  "weightctl: put: INVALID_ARGUMENT: $tmp/r1-bare.safetensors: no weight_mgmt.tp in its __metadata__, which rank 0's $r0 has (files of different gets?)" \
  $(put_bad --tp 2 "$r0" "$tmp/r1-bare.safetensors")
"$ctl" put --namespace cli --resource m --revision joined --tp 2 "$r0" "$r1" >/dev/null \
  && "$ctl" put --namespace cli --resource m --revision joined3 --tp 2 --split 'b.*=1' --replicate 'a.*' "$t0" "$t1" >/dev/null \
  && "$ctl" get cli/m/joined@1 --out "$tmp/j" >/dev/null && st_same "$tmp/v1.safetensors" "$tmp/j/rank0-of-1.safetensors" \
  && "$ctl" get cli/m/joined3@1 --out "$tmp/j3" >/dev/null && st_same "$tmp/v1.safetensors" "$tmp/j3/rank0-of-1.safetensors" \
  && ok "the files with the rules they were cut with: joined, read back byte for byte" || bad "joined"

mk_st "$tmp/fmt-a.safetensors" format=pt x.weight:4x4
mk_st "$tmp/fmt-b.safetensors" format=np y.weight:4x4
refused "source metadata that disagrees between files" \
  "weightctl: put: INVALID_ARGUMENT: $tmp/fmt-b.safetensors: __metadata__ 'format' is 'np', but 'pt' in $tmp/fmt-a.safetensors" \
  $(put_bad "$tmp/fmt-a.safetensors" "$tmp/fmt-b.safetensors")
m=$(meta "$tmp/j/rank0-of-1.safetensors")
grep -qF '"format": "pt"' <<<"$m" && grep -qF "\"weight_mgmt.source\": \"cli/m/joined@1\"" <<<"$m" \
  && ok "a revision joined from rank files keeps their source's metadata, not their provenance: $m" || bad "joined meta: $m"

# -- put_tp_without_provenance_checked_by_shapes -----------------------------------------
strip "$r0" "$tmp/s0.safetensors"; strip "$r1" "$tmp/s1.safetensors"; cp "$tmp/s0.safetensors" "$tmp/s0copy.safetensors"
refused "without provenance: a copy of rank 0's file" \
  "weightctl: put: INVALID_ARGUMENT: $tmp/s0copy.safetensors: holds the same bytes as rank 0's $tmp/s0.safetensors in every split tensor: the same rank's file twice" \
  $(put_bad --tp 2 "$tmp/s0.safetensors" "$tmp/s0copy.safetensors")
refused "without provenance: a split tensor replicated by the rules" \
  "weightctl: put: INVALID_ARGUMENT: $tmp/s1.safetensors: tensor a.weight: replicated by the rules but its bytes differ from rank 0's (name its split with --split PATTERN=DIM)" \
  $(put_bad --tp 2 --replicate 'a.*' "$tmp/s0.safetensors" "$tmp/s1.safetensors")
strip "$tmp/odd/rank0-of-2.safetensors" "$tmp/o0.safetensors"; strip "$tmp/odd/rank1-of-2.safetensors" "$tmp/o1.safetensors"
refused "without provenance: uneven shards in the wrong order" \
  "weightctl: put: INVALID_ARGUMENT: $tmp/o1.safetensors: tensor c.weight: rank 0 holds 2 of dimension 0's 5; a 2-way split gives it 3 (files of another --tp, or not in rank order?)" \
  $(put_bad --tp 2 "$tmp/o1.safetensors" "$tmp/o0.safetensors")
refused "without provenance: shards split along another dimension than the rules" \
  "weightctl: put: INVALID_ARGUMENT: $tmp/o1.safetensors: tensor c.weight: dimension 0 is 2, rank 0 has 3 (only dimension 1 may differ)" \
  $(put_bad --tp 2 --split 'c.*=1' "$tmp/o0.safetensors" "$tmp/o1.safetensors")
"$ctl" put --namespace cli --resource m --revision bare --tp 2 "$tmp/s0.safetensors" "$tmp/s1.safetensors" >/dev/null \
  && "$ctl" get cli/m/bare@1 --out "$tmp/b" >/dev/null && st_same "$tmp/v1.safetensors" "$tmp/b/rank0-of-1.safetensors" \
  && "$ctl" put --namespace cli --resource m --revision bareodd --tp 2 "$tmp/o0.safetensors" "$tmp/o1.safetensors" >/dev/null \
  && "$ctl" get cli/m/bareodd@1 --out "$tmp/bo" >/dev/null && st_same "$tmp/odd.safetensors" "$tmp/bo/rank0-of-1.safetensors" \
  && ok "without provenance, shards that agree with the rules: joined, read back byte for byte" || bad "bare join"

# -- upsert_takes_rank_files -----------------------------------------------------------
refused "upsert: swapped rank files" \
  "weightctl: upsert: INVALID_ARGUMENT: $r1: holds rank 1 (weight_mgmt.rank in its __metadata__) but is given as rank 0: give the files in rank order" \
  upsert cli/m/joined@1 --generation 2 --tp 2 "$r1" "$r0"
refused "upsert: one rank's file upserted whole" \
  "weightctl: upsert: INVALID_ARGUMENT: $r1: rank 1 of a 2-way split (weight_mgmt.tp in its __metadata__), not a whole model: upsert every rank's file with --tp 2" \
  upsert cli/m/joined@1 --generation 2 "$r1"
before=$(state)
err=$("$ctl" upsert cli/m/joined@1 --generation 2 --split 'b.*=1' "$r0" 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$err" = "weightctl: upsert: --split and --replicate describe rank files: give --tp N (weightctl upsert --help)" ] \
  && [ "$(state)" = "$before" ] && ok "upsert --split without --tp: '$err'" || bad "upsert --split without --tp: $rc $err"
err=$("$ctl" upsert cli/m/joined@1 --generation 2 --tp 2 "$r0" 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$err" = "weightctl: upsert: --tp 2 takes one file per rank, in rank order; 1 given" ] \
  && [ "$(state)" = "$before" ] && ok "upsert --tp 2 with one file: '$err'" || bad "upsert --tp one file: $rc $err"
"$ctl" get cli/m/v2@1 --out "$tmp/dv2s" --tp 2 --split 'b.*=1' --replicate 'a.*' >/dev/null || bad "get v2 --split"
out=$("$ctl" upsert cli/m/joined@1 --generation 2 --tp 2 --wait "$tmp/dv2/rank0-of-2.safetensors" \
      "$tmp/dv2/rank1-of-2.safetensors" 2>"$tmp/err"); rc=$?
out3=$("$ctl" upsert cli/m/joined3@1 --generation 2 --tp 2 --split 'b.*=1' --replicate 'a.*' --wait \
       "$tmp/dv2s/rank0-of-2.safetensors" "$tmp/dv2s/rank1-of-2.safetensors" 2>>"$tmp/err"); rc3=$?
[ $rc -eq 0 ] && [ $rc3 -eq 0 ] && grep -q "COMMITTED" <<<"$out" && grep -q "COMMITTED" <<<"$out3" \
  && "$ctl" get cli/m/joined@2 --out "$tmp/u2" >/dev/null && st_same "$tmp/v2.safetensors" "$tmp/u2/rank0-of-1.safetensors" \
  && "$ctl" get cli/m/joined3@2 --out "$tmp/u3" >/dev/null && st_same "$tmp/v2.safetensors" "$tmp/u3/rank0-of-1.safetensors" \
  && ! "$ctl" exists cli/m/joined@1 >/dev/null 2>&1 \
  && ok "upsert --tp 2 (and with --split / --replicate): generation 2 from rank files, read back byte for byte" \
  || bad "upsert --tp: rc $rc/$rc3, out [$out] [$out3], err [$(cat "$tmp/err")]"

kill -9 $pid; wait $pid 2>/dev/null; pid=""
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
