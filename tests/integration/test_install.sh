#!/usr/bin/env bash
# test_install.sh -- `make install` (cmake --install) into a fresh prefix gives
# a working set: the programs run from there, a C program builds against the
# installed header and library with nothing but pkg-config, and weightctl's
# bash completion completes commands.
set -uo pipefail
: "${BUILD_DIR:?}" "${SOURCE_DIR:?}"
prefix=$(mktemp -d /tmp/wm-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT
pass=0 fail=0
ok()  { echo "ok: $1"; pass=$((pass + 1)); }
bad() { echo "FAIL: $1"; fail=$((fail + 1)); }

cmake --install "$BUILD_DIR" --prefix "$prefix" >"$prefix/install.log" 2>&1 \
  && ok "cmake --install" || bad "install: $(tail -5 "$prefix/install.log")"
pc=$(find "$prefix" -name weightclient.pc | head -1)
for f in bin/store_master bin/store_node bin/weightctl include/weightclient.h \
         share/bash-completion/completions/weightctl; do
  [ -e "$prefix/$f" ] && ok "installed $f" || bad "missing $f"
done
[ -n "$pc" ] && ok "installed $(basename "$pc")" || bad "no weightclient.pc"
libdir=$(dirname "$(dirname "$pc")")
[ -e "$libdir/libweightclient.so" ] && ok "installed libweightclient.so" || bad "no libweightclient.so in $libdir"
[ -e "$libdir/weight_mgmt/weight_mgmt.so" ] && ok "installed weight_mgmt.so" || bad "no weight_mgmt.so"

# The installed weightctl finds its library (no LD_LIBRARY_PATH) and says
# why it cannot reach a master that is not there.
out=$(env -u LD_LIBRARY_PATH "$prefix/bin/weightctl" --master "$prefix/none.sock" status 2>&1); rc=$?
[ $rc -eq 1 ] && ! grep -q "shared object" <<<"$out" && ok "installed weightctl runs (exit 1: $out)" \
  || bad "installed weightctl: exit $rc: $out"

# A program of a user's, built with pkg-config only.
cat >"$prefix/prog.c" <<'C'
#include <stdio.h>
#include <weightclient.h>
int main(int argc, char **argv)
{
    weight_store *s = NULL;
    char err[256] = "";
    int rc = weight_store_open(argc > 1 ? argv[1] : "/nonexistent.sock", "t", NULL, &s, err, sizeof err);
    printf("open: %s (%s)\n", weight_error_name(rc), err);
    weight_store_close(s);
    return rc != 0 ? 0 : 1;
}
C
flags=$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs weightclient 2>&1) \
  && ok "pkg-config weightclient: $flags" || bad "pkg-config: $flags"
# A sanitizer build's library needs its runtime in the program too.
san=""
grep -q "^WM_SANITIZE:BOOL=ON" "$BUILD_DIR/CMakeCache.txt" 2>/dev/null && san="-fsanitize=address,undefined"
if cc -std=c11 -Wall -Werror $san -o "$prefix/prog" "$prefix/prog.c" $flags -Wl,-rpath,"$libdir" 2>"$prefix/cc.log"; then
  ok "a C program builds against the installed header and library"
  out=$("$prefix/prog" "$prefix/none.sock" 2>&1) && ok "and runs: $out" || bad "prog: $out"
else
  bad "cc: $(cat "$prefix/cc.log")"
fi

# Completion: "weightctl st<TAB>" offers status; "weightctl kv <TAB>" its verbs.
comp=$(bash -c 'source "$1"; COMP_WORDS=(weightctl st); COMP_CWORD=1; _weightctl; echo "${COMPREPLY[*]}";
                COMP_WORDS=(weightctl kv ""); COMP_CWORD=2; _weightctl; echo "${COMPREPLY[*]}"' _ \
       "$prefix/share/bash-completion/completions/weightctl" 2>&1)
grep -q "^status" <<<"$comp" && ok "completes weightctl st -> status" || bad "completion: $comp"
grep -q "put get ls rm" <<<"$comp" && ok "completes weightctl kv verbs" || bad "completion: $comp"

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
