#!/usr/bin/env bash
# A rank of alltoallv/hier killed (test_hier.c, cases kill1 and kill2) on
# the emulated cluster, 2 nodes x 2 ranks: swy-run exits with the killed
# rank's status, so this script reads what each rank said: every other
# rank must report SWY_ERR_REMOTE, and none anything else; with kill2 at
# least one inside the op (the victim's partner across the hosts).
# Usage: hier_kill.sh SWY_RUN TEST_HIER CASE LINK
# Exits 77 where swy-run cannot build the cluster (no root).
set -u
swy_run=$1 test_hier=$2 case=$3 link=$4
out=$("$swy_run" --nodes 2 --ranks-per-node 2 --link "$link" --timeout 60 \
    --grace 20 "$test_hier" "$case" 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 77 ] && exit 77
ok=$(echo "$out" | grep -c 'remote peer failed as expected')
if [ "$ok" -ne 3 ] || echo "$out" | grep -q ', want '; then
    echo "FAIL: $ok of 3 surviving ranks reported the death (swy-run: $rc)"
    exit 1
fi
if [ "$case" = kill2 ] && ! echo "$out" | grep -q 'the op failed'; then
    echo "FAIL: no rank failed inside the op (the second stage)"
    exit 1
fi
[ "$rc" -eq 137 ] || { echo "FAIL: swy-run exited $rc, not 137"; exit 1; }
echo "PASS: every surviving rank got SWY_ERR_REMOTE"
