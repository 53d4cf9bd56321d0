#!/usr/bin/env bash
# Install into a temporary root and build an outside program against it with
# `pkg-config --cflags --libs switchyard` alone, then run it with nothing of
# the build tree in its environment: no SWY_PLUGIN_PATH, so the policy
# plugin it asks for must be found beside the installed library. Also: the
# installed library names no build-tree path.
# A tool (swy-info) builds the same way, from its source alone, and runs.
# Usage: test_install.sh BUILD_ROOT PREFIX LIBDIR OUTSIDE_C TOOL_C
set -euo pipefail
build=$1 prefix=$2 libdir=$3 src=$4 tool_src=$5
for tool in pkg-config cc; do
    command -v "$tool" >/dev/null || { echo "SKIP: no $tool"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --no-rebuild --destdir "$tmp/root" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; echo "FAIL: meson install"; exit 1; }
[[ $libdir == /* ]] || libdir=$prefix/$libdir
root=$tmp/root
lib=$root$libdir

# The sysroot makes pkg-config put the temporary root in front of -I and -L.
export PKG_CONFIG_PATH=$lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$root
export PKG_CONFIG_LIBDIR=$lib/pkgconfig
flags=$(pkg-config --cflags --libs switchyard) ||
    { echo "FAIL: pkg-config switchyard"; exit 1; }
echo "pkg-config --cflags --libs switchyard: $flags"
# shellcheck disable=SC2086  # the flags are words
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/outside" "$src" $flags ||
    { echo "FAIL: the outside program does not build"; exit 1; }
# shellcheck disable=SC2086
cc -std=gnu11 -Wall -Wextra -Werror -o "$tmp/swy-info" "$tool_src" $flags ||
    { echo "FAIL: swy-info does not build against the installed tree"; exit 1; }
env -u SWY_PLUGIN_PATH LD_LIBRARY_PATH="$lib" "$tmp/swy-info" -c >"$tmp/info.out" ||
    { cat "$tmp/info.out"; echo "FAIL: the installed-tree swy-info -c"; exit 1; }
grep -q "SWY_PARTITION_BYTES" "$tmp/info.out" ||
    { cat "$tmp/info.out"; echo "FAIL: swy-info -c lists no variables"; exit 1; }
echo "swy-info built from $tool_src against the installed tree and ran"

so=$(readlink -f "$lib/libswitchyard.so")
if grep -q -F -- "$(cd "$build" && pwd -P)" "$so"; then
    echo "FAIL: $so names the build directory $build"
    exit 1
fi
[[ -f $lib/switchyard/swy-policy-aging.so ]] ||
    { echo "FAIL: no swy-policy-aging.so in $lib/switchyard"; exit 1; }

# Only the installed tree: no build-tree plugins, no build-tree library.
env -u SWY_PLUGIN_PATH LD_LIBRARY_PATH="$lib" SWY_POLICY=aging \
    "$tmp/outside" aging
# Moved elsewhere, it still finds its plugins beside itself.
mv "$root" "$tmp/moved"
env -u SWY_PLUGIN_PATH LD_LIBRARY_PATH="$tmp/moved$libdir" SWY_POLICY=aging \
    "$tmp/outside" aging
