#!/bin/sh
# A plugin's own variables (swy_transport_v1_t.config): swy-info -c lists
# them with their values from the environment or the SWY_CONFIG file, and
# the unknown-variable warning fires for typos, under the plugin's prefix
# (once the plugin registered) as elsewhere, never for its variables.
# usage: config_vars.sh SWY_INFO   (env: SWY_PLUGIN_PATH to the abi plugins)
set -u
info=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
check() { # what, command...
    what=$1
    shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

printf 'SWY_ABIOLD_DEPTH=5\nSWY_ABIOLD_WIDTH=2\n' >"$dir/file.conf"
SWY_TRANSPORT_PLUGINS=abiold SWY_ABIOLD_DEPHT=1 SWY_TYPOED_VAR=1 \
SWY_CONFIG="$dir/file.conf" "$info" -c >"$dir/out" 2>"$dir/err"
check "swy-info -c runs" test $? -eq 0
check "the plugin's variable is listed, its value from SWY_CONFIG" \
    grep -q '^SWY_ABIOLD_DEPTH *= 5 .*default: 3; integer 1\.\.10' "$dir/out"
check "a typo under the plugin's prefix warns" \
    grep -q 'unknown configuration variable SWY_ABIOLD_DEPHT' "$dir/err"
check "a typo in the file under the plugin's prefix warns" \
    grep -q 'unknown configuration variable SWY_ABIOLD_WIDTH' "$dir/err"
check "another typo warns" \
    grep -q 'unknown configuration variable SWY_TYPOED_VAR' "$dir/err"
check "the plugin's own variable does not warn" \
    sh -c "! grep -q 'SWY_ABIOLD_DEPTH' '$dir/err'"

SWY_TRANSPORT_PLUGINS=abiold SWY_ABIOLD_DEPTH=7 "$info" -c >"$dir/out" \
    2>"$dir/err"
check "from the environment" grep -q '^SWY_ABIOLD_DEPTH *= 7 ' "$dir/out"
check "nothing to warn about" sh -c "! grep -q 'unknown' '$dir/err'"

# A plugin that is not configured: its variables are not the library's.
SWY_TRANSPORT_PLUGINS=ucx SWY_ABIOLD_DEPTH=7 "$info" -c >"$dir/out" \
    2>"$dir/err"
check "not listed when not loaded" \
    sh -c "! grep -q '^SWY_ABIOLD_DEPTH' '$dir/out'"
check "and unknown then" \
    grep -q 'unknown configuration variable SWY_ABIOLD_DEPTH' "$dir/err"
# A configured plugin that is not there: its names are typos too.
SWY_TRANSPORT_PLUGINS=abiold,nosuch SWY_NOSUCH_DEPTH=1 "$info" -c \
    >"$dir/out" 2>"$dir/err"
check "a missing plugin's names warn" \
    grep -q 'unknown configuration variable SWY_NOSUCH_DEPTH' "$dir/err"

if [ $fail -ne 0 ]; then
    echo "--- stderr:"; cat "$dir/err"
fi
exit $fail
