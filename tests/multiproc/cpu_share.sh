#!/usr/bin/env bash
# Whether the ranks share CPUs (lib/coll/shm_setup.c, setup_channel): true
# when the CPUs all ranks may run on, together, are fewer than the ranks. It
# picks alltoallv's algorithm and where results are streamed, so every
# rank must agree, and ranks pinned to a core each do not share.
# Usage: cpu_share.sh SWY_RUN PROG (PROG: test_env, any program that
# makes a communicator). Needs 2 CPUs and taskset: exits 77 otherwise.
set -u
swy_run=$1 prog=$2
command -v taskset >/dev/null || { echo "no taskset: skipped"; exit 77; }
ncpu=$(nproc)
((ncpu >= 2)) || { echo "needs 2 CPUs: skipped"; exit 77; }
# Two CPUs this process may use.
mapfile -t two < <(/usr/bin/python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2], sep="\n")')
fail=0
# expect N PIN_SCRIPT WORD: N ranks, each pinned by PIN_SCRIPT (a shell
# expression of $SWY_RANK giving a CPU list, or "" for none), and every
# rank's log must say "ranks WORD CPUs".
expect() {
    local n=$1 pin=$2 word=$3 out
    out=$(SWY_LOG_LEVEL=debug SWY_LOG_SUBSYS=coll "$swy_run" -n "$n" \
        --timeout 60 sh -c "
            cpu=\$($pin)
            if [ -n \"\$cpu\" ]; then exec taskset -c \"\$cpu\" \"\$0\"; fi
            exec \"\$0\"" "$prog" 2>&1)
    local got
    got=$(grep -c "ranks $word CPUs" <<<"$out")
    if [[ $got != "$n" ]]; then
        echo "FAIL: $n ranks, pinned by '$pin': expected 'ranks $word CPUs'" \
             "on every rank, got it on $got:"
        grep "CPUs\|FAIL\|error" <<<"$out" | head -20
        fail=1
    else
        echo "ok: $n ranks, pinned by '$pin': ranks $word CPUs"
    fi
}
# One CPU each, different ones: they do not share.
expect 2 "echo \$(( SWY_RANK == 0 ? ${two[0]} : ${two[1]} ))" "do not share"
# Both on one CPU: they share.
expect 2 "echo ${two[0]}" share
# Three ranks on two CPUs, one of them alone: the three share two.
expect 3 "echo \$(( SWY_RANK == 0 ? ${two[0]} : ${two[1]} ))" share
# Unpinned: they share exactly where there are more ranks than CPUs.
nall=$(/usr/bin/python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
n=4
if ((n > nall)); then expect $n "echo" share; else expect $n "echo" "do not share"; fi
exit $fail
