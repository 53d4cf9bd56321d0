#!/usr/bin/env bash
# A /dev/shm too small for the shared-memory channels: every rank goes on
# without them (the automatic algorithms of one-host comms without a
# channel) and every collective still matches the serial reference;
# nothing dies of SIGBUS. Runs test_coll on 4 ranks in a private mount namespace with a
# 2 MiB tmpfs on /dev/shm (the channel wants 10 MiB), UCX restricted to
# SysV shared memory and CMA (its posix transport would want 16 MiB of
# /dev/shm per rank). Needs root (unshare, mount): exits 77 otherwise.
# Usage: shm_small.sh TEST_COLL
set -u
prog=$1
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
    echo "needs root and unshare: skipped"
    exit 77
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
SWY_LOG_LEVEL=info UCX_TLS=self,sysv,cma unshare --mount --propagation private sh -c '
    mount -t tmpfs -o size=2m swy-small-shm /dev/shm || exit 77
    exec "$0" 4 100000' "$prog" >"$log" 2>&1
rc=$?
if [ $rc = 77 ]; then
    echo "cannot mount a tmpfs here: skipped"
    exit 77
fi
grep -E "shared-memory channel|PASS|FAIL" "$log" | head -8
if [ $rc != 0 ]; then
    tail -30 "$log"
    echo "FAIL: test_coll exited $rc"
    exit 1
fi
for what in allreduce alltoallv; do
    n=$(grep -c "no shared-memory $what channel" "$log")
    if [ "$n" != 4 ]; then
        echo "FAIL: $n of 4 ranks said they run without the $what channel"
        exit 1
    fi
done
echo "PASS: 4 ranks without the channels"
