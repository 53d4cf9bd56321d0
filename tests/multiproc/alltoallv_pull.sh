#!/usr/bin/env bash
# alltoallv/shm's pulls (SWY_SHM_PULL, coll.h): with always, every block
# is read by its receiver with process_vm_readv; with never, none is and
# the ranks do not even try at init. test_coll checks the results against
# a serial reference either way; strace counts the calls. UCX's own CMA
# rendezvous reads with process_vm_readv too (the sends lina holds back
# go by it), so UCX runs without cma here: only the channel's pulls count.
# Needs strace
# (and the kernel's leave to trace): exits 77 otherwise.
# Usage: alltoallv_pull.sh TEST_COLL
set -u
test_coll=$(realpath "$1")
command -v strace >/dev/null || { echo "no strace: skipped"; exit 77; }
strace -f -qq -e trace=none true 2>/dev/null ||
    { echo "strace cannot trace here: skipped"; exit 77; }
fail=0
# count runs in a command substitution, a subshell: it marks a failure in
# a file, which the shell that decides reads.
failed_mark=failed
# LeakSanitizer stops the world with ptrace, which strace holds already:
# an ASan build leaves leaks to the runs that are not traced.
asan_options="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
count() { # MODE: process_vm_readv calls of a 4-rank test_coll run
    local log=$1.strace out
    out=$(SWY_SHM_PULL=$1 SWY_ALLTOALLV_ALGO=shm SWY_LOG_LEVEL=debug UCX_TLS=^cma \
        SWY_LOG_SUBSYS=coll ASAN_OPTIONS=$asan_options \
        strace -f -qq -c -o "$log" \
        -e trace=process_vm_readv "$test_coll" 4 300000 2>&1)
    local rc=$?
    echo "$out" | grep -E "PASS|FAIL|pulled" | head -3 >&2
    if [[ $rc != 0 ]]; then
        echo "FAIL: test_coll with SWY_SHM_PULL=$1 exited $rc" >&2
        echo "$out" | tail -20 >&2
        touch "$failed_mark"
    fi
    if [[ $1 == always && $out != *"every block is pulled"* ]]; then
        echo "FAIL: SWY_SHM_PULL=always: rank 0 did not say it pulls" >&2
        touch "$failed_mark"
    fi
    awk '$NF == "process_vm_readv" { print $4 }' "$log" | grep . || echo 0
    rm -f "$log"
}
tmp=$(mktemp -d)
cd "$tmp" || exit 1
always=$(count always)
never=$(count never)
echo "process_vm_readv calls: always $always, never $never"
# The probes at init are 4 x 3 calls; the ops after the first pull every
# block (about 80 calls in all).
((always > 50)) || { echo "FAIL: too few pulls with always"; fail=1; }
((never == 0)) || { echo "FAIL: reads with never"; fail=1; }
[[ -e $failed_mark ]] && fail=1
cd / && rm -rf "$tmp"
exit $fail
