#!/bin/sh
# The library's edges (docs/architecture.md): lib/moe reaches the rest of
# Switchyard through the public API and lib/util only, plus the process's
# device services (lib/transport/device.h) for plans with device rows;
# nothing under lib/
# includes a UCX header, and libswitchyard does not need a UCX library
# (only the UCX plugin links UCX).
# Usage: boundaries.sh SOURCE_ROOT LIBSWITCHYARD
set -u
src=$1 lib=$2
fail=0
bad=$(grep -H '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' \
        "$src"/lib/moe/*.c "$src"/lib/moe/*.h |
      grep -v '"\(switchyard\|util\|moe\)/' |
      grep -v '"transport/device\.h"')
if [ -n "$bad" ]; then
    echo "FAIL: lib/moe includes a header of another layer:"
    echo "$bad"
    fail=1
fi
bad=$(grep -rlE '#[[:space:]]*include[[:space:]]*[<"](ucp|uct|ucs|ucm)/' \
        "$src"/lib)
if [ -n "$bad" ]; then
    echo "FAIL: UCX headers included under lib/: $bad"
    fail=1
fi
needed=$(readelf -d "$lib" | grep NEEDED)
if [ -z "$needed" ]; then
    echo "FAIL: readelf -d $lib listed no NEEDED entry"
    fail=1
elif echo "$needed" | grep -q 'libuc[ptsm]'; then
    echo "FAIL: $lib needs UCX:"
    echo "$needed"
    fail=1
fi
[ $fail = 0 ] && echo "PASS: lib/moe, lib/ and libswitchyard keep their edges"
exit $fail
