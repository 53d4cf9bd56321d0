#!/bin/sh
# Build the libFuzzer harnesses of tests/fuzz with clang (meson builds the
# project with the default compiler; libFuzzer needs clang): every lib
# source compiled with coverage, ASan and UBSan into one archive, each
# harness linked to it. Only what is older than its sources is rebuilt.
#   build.sh SOURCE_ROOT OUT_DIR     (prints the harness paths)
set -eu
src=$1
out=$2
cc=${CLANG:-clang}
command -v "$cc" >/dev/null 2>&1 || { echo "no $cc" >&2; exit 77; }
mkdir -p "$out/obj" "$out/include/switchyard"
# switchyard/version.h, as include/switchyard/meson.build makes it.
version=$(sed -n "s/^  version: '\\([0-9.]*\\)',$/\\1/p" "$src/meson.build")
IFS=. read -r major minor patch <<EOF_V
$version
EOF_V
sed -e "s/@MAJOR@/$major/" -e "s/@MINOR@/$minor/" -e "s/@PATCH@/$patch/" \
    "$src/include/switchyard/version.h.in" >"$out/include/switchyard/version.h"
deps="ucx hwloc libevent libevent_pthreads"
cflags="-g -O1 -fno-omit-frame-pointer -std=gnu11 -D_GNU_SOURCE \
 -fsanitize=address,undefined -fno-sanitize-recover=undefined \
 -I$src/include -I$out/include -I$src/lib $(pkg-config --cflags $deps) \
 -DSWY_PLUGIN_INSTALL_DIR=\"/nonexistent\" -DSWY_PLUGIN_BUILD_DIRS=\"\" \
 -DSWY_VERSION_STRING=\"fuzz\""
libs="$(pkg-config --libs $deps) -lpthread -ldl -lm"

# The library, instrumented for coverage (fuzzer-no-link); two at a time.
n=0
for c in "$src"/lib/*/*.c; do
    o="$out/obj/$(basename "$(dirname "$c")")_$(basename "$c" .c).o"
    [ "$o" -nt "$c" ] && continue
    # shellcheck disable=SC2086
    $cc $cflags -fsanitize=fuzzer-no-link -c "$c" -o "$o" >&2 &
    n=$((n + 1))
    [ $((n % 2)) -eq 0 ] && wait
done
wait
lib="$out/libswy_fuzz.a"
newest=$(ls -t "$out"/obj/*.o | head -n 1)
if [ ! -f "$lib" ] || [ "$newest" -nt "$lib" ]; then
    rm -f "$lib"
    ar rcs "$lib" "$out"/obj/*.o
fi

for h in "$src"/tests/fuzz/fuzz_*.c; do
    name=$(basename "$h" .c)
    exe="$out/$name"
    # The boot client harness includes client_loop.c itself.
    if [ ! -x "$exe" ] || [ "$h" -nt "$exe" ] || [ "$lib" -nt "$exe" ]; then
        $cc $cflags -fsanitize=fuzzer "$h" "$lib" $libs -o "$exe" \
            -Wl,--allow-multiple-definition >&2
    fi
    echo "$exe"
done
