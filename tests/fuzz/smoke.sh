#!/bin/sh
# Smoke run of the libFuzzer harnesses (the suite's 'fuzz_smoke'): build
# them (build.sh), then run each for SECONDS over a scratch copy of its
# seed corpus; a crash, a sanitizer report or a leak fails.
#   smoke.sh SOURCE_ROOT OUT_DIR [SECONDS]
set -u
src=$1
out=$2
secs=${3:-5}
harnesses=$("$src/tests/fuzz/build.sh" "$src" "$out") || exit $?
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail=0
for exe in $harnesses; do
    name=$(basename "$exe")
    corpus="$src/tests/fuzz/corpus/${name#fuzz_}"
    mkdir -p "$scratch/$name"
    (cd "$scratch" && "$exe" "-max_total_time=$secs" -print_final_stats=1 \
        "$scratch/$name" "$corpus") >"$scratch/$name.log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' \
        "$scratch/$name.log")
    echo "$name: exit $rc, ${execs:-?} executions"
    if [ $rc -ne 0 ]; then
        tail -n 40 "$scratch/$name.log"
        fail=1
    fi
done
exit $fail
