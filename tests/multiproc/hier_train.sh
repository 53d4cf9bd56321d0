#!/usr/bin/env bash
# The MoE exchanges of moe.h over alltoallv/hier: swy-train on the emulated
# 2 x 4 cluster (its small blocks go through the forwarders) must give the
# same losses, to the last printed digit, as with pairwise.
# Usage: hier_train.sh SWY_RUN SWY_TRAIN
# Exits 77 where swy-run cannot build the cluster (no root).
set -u
swy_run=$1 swy_train=$2
losses() { # ALGO: "loss_first loss_last" of rank 0's summary
    local out rc
    out=$(SWY_ALLTOALLV_ALGO=$1 "$swy_run" --nodes 2 --ranks-per-node 4 \
        --link 10gbit --timeout 100 --no-prefix "$swy_train" --steps 8 \
        --layers 2 --hidden 64 --ffn 128 --tokens-per-rank 64 \
        --experts-per-rank 2 --json 2>&1)
    rc=$?
    [ "$rc" -eq 77 ] && exit 77
    # On stderr: stdout is the caller's $(...).
    [ "$rc" -eq 0 ] || { echo "$out" >&2; echo "FAIL: $1 exited $rc" >&2; exit 1; }
    echo "$out" | grep -m1 '"bench":"train"' |
        sed -E 's/.*"loss_first":([^,]*).*"loss_last":([^,]*).*/\1 \2/'
}
pairwise=$(losses pairwise) || exit $?
hier=$(losses hier) || exit $?
echo "losses (first, last): pairwise $pairwise, hier $hier"
[ -n "$pairwise" ] && [ "$pairwise" = "$hier" ] ||
    { echo "FAIL: the losses differ"; exit 1; }
echo PASS
