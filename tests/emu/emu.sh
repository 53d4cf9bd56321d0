#!/usr/bin/env bash
# Tests of the emulated cluster (swy-run --nodes). One CASE per meson test.
# Usage: emu.sh CASE SWY_RUN [TEST_ENV SWY_INFO [SWY_BENCH]]
# Exits 77 (skipped) without root, ip, tc or unshare. What the namespaces
# look like is checked from the outside with ip/tc, independently of
# swy-run's own view.
set -u
case_name=$1 swy_run=$2 test_env=${3:-} swy_info=${4:-} swy_bench=${5:-}
export PATH=$PATH:/usr/sbin:/sbin

[ "$(id -u)" = 0 ] || { echo "skip: needs root"; exit 77; }
for tool in ip tc unshare flock; do
    command -v $tool >/dev/null || { echo "skip: needs $tool"; exit 77; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# swy-run's own exit status 77: it could not build namespaces here.
skip_if_unsupported() {
    [ "$1" = 77 ] && { echo "skip: swy-run cannot build namespaces here"; cat "$work/err"; exit 77; }
}

# Namespaces and root-namespace links of run <pid>: nothing may be left.
assert_clean() {
    local pid=$1
    if ip netns list | grep -q "^swy-$pid-"; then
        fail "namespaces of run $pid left: $(ip netns list | grep "^swy-$pid-" | tr '\n' ' ')"
    fi
    assert_root_links_untouched
}
# swy-run never creates links in the root namespace: no br0, no v<i>.
assert_root_links_untouched() {
    if ip -o link show | awk -F': ' '{print $2}' | grep -Eq '^(br0|v[0-9]+)(@|$)'; then
        fail "a swy-run link is in the root namespace: $(ip -o link show | awk -F': ' '{print $2}' | tr '\n' ' ')"
    fi
}

run_cluster() { # args...: runs swy-run in the background; sets $pid
    "$swy_run" "$@" >"$work/out" 2>"$work/err" &
    pid=$!
}

# ---- fault tests (fault_*): $test_env is fault_rank here ----
# Shared-memory segments a rank in a fresh PID namespace would name
# (/swy-<small pid>-...): none may be left on the host.
ns_segments() { ls /dev/shm 2>/dev/null | grep -E '^swy-[0-9]{1,3}-' | sort; }
fault_start() { # fault_start ENV... -- STEPS PACE_MS: 2 nodes x 2 ranks
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    segs_before=$(ns_segments)
    fault_t0=$(date +%s%N)
    # The grace outlasts a failed op's wait for its peers to stop reading
    # its buffers (5 s at most, lib/sched), so every rank reports its own
    # outcome after the first one exits.
    env "${envs[@]}" "$swy_run" --timeout 150 --grace 12 --nodes 2 \
        --ranks-per-node 2 "$test_env" "$@" >"$work/out" 2>"$work/err" &
    pid=$!
    for i in $(seq 600); do
        [ "$(grep -c ': started$' "$work/out")" = 4 ] && return 0
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    wait $pid; rc=$?; skip_if_unsupported $rc
    cat "$work/out" "$work/err"; fail "the ranks did not start (status $rc)"
    exit 1
}
rank_pid() { # the fault_rank process of rank $1 (global pid)
    local p
    for p in $(pgrep -f "^$test_env "); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SWY_RANK=$1" &&
            { echo "$p"; return; }
    done
}
node_ns() { echo "swy-$pid-n$1"; }
# fault_end EXPECT: ok (every rank completes) or error (every rank still
# alive reports an error from the library; none hangs, none is wrong).
fault_end() {
    wait $pid; rc=$?
    local secs=$(( ($(date +%s%N) - fault_t0) / 1000000 ))
    cat "$work/out"; grep -v '^$' "$work/err" | tail -n 20
    echo "swy-run exit $rc after $secs ms"
    [ $rc = 124 ] && fail "hang: swy-run's --timeout stopped the job"
    grep -q WRONG "$work/out" && fail "a wrong result"
    local finals
    finals=$(grep -cE '^\[[0-9]\] rank [0-9]: (ok|error)' "$work/out")
    case $1 in
    ok)
        [ $rc = 0 ] || fail "exit status $rc, expected 0"
        [ "$(grep -c ': ok [0-9]* steps$' "$work/out")" = 4 ] ||
            fail "not every rank completed"
        ;;
    error)
        [ $rc != 0 ] || fail "exit status 0 after a fatal fault"
        [ "$finals" -ge "$2" ] ||
            fail "$finals ranks reported an outcome, expected $2"
        grep -E '^\[[0-9]\] rank [0-9]: error' "$work/out" |
            grep -vqE "error (${3}) at" &&
            fail "an error other than ${3}"
        ;;
    esac
    [ -z "$(pgrep -f "^$test_env ")" ] ||
        fail "rank processes left: $(pgrep -f "^$test_env " | tr '\n' ' ')"
    local segs_after
    segs_after=$(ns_segments)
    [ "$segs_after" = "$segs_before" ] ||
        fail "/dev/shm segments left: $(comm -13 <(echo "$segs_before") <(echo "$segs_after") | tr '\n' ' ')"
    assert_clean $pid
}

case $case_name in
fault_loss)
    # 10% of the packets of node 1 dropped both ways (nftables, in its
    # namespace): TCP retransmits; every result stays right.
    command -v nft >/dev/null || { echo "skip: needs nft (nftables)"; exit 77; }
    fault_start -- 60 20
    ip netns exec "$(node_ns 1)" nft -f - <<'NFT' || fail "nft failed"
table inet swyloss {
    chain in { type filter hook input priority 0; numgen random mod 100 < 10 counter drop; }
    chain out { type filter hook output priority 0; numgen random mod 100 < 10 counter drop; }
}
NFT
    sleep 3
    dropped=$(ip netns exec "$(node_ns 1)" nft list table inet swyloss 2>/dev/null |
        sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}')
    echo "packets dropped in the first 3 s: $dropped"
    [ "${dropped:-0}" -gt 0 ] || fail "nftables dropped nothing"
    fault_end ok
    ;;
fault_flap_short)
    # Node 1's link down for 12 s, under the tolerated outage that
    # SWY_TIMEOUT_S's default (300 s) gives (30 s), and over the 10 s (5
    # heartbeats) that was once fatal whatever SWY_TIMEOUT_S said:
    # survived, every result right.
    fault_start -- 150 30
    sleep 0.5
    ip -n "$(node_ns 1)" link set eth0 down
    sleep 12
    ip -n "$(node_ns 1)" link set eth0 up
    fault_end ok
    ;;
fault_flap_long)
    # Down for longer than the 4 s outage: every rank fails with
    # SWY_ERR_TIMEOUT (the silent side named), none hangs.
    fault_start SWY_OUTAGE_S=4 SWY_TIMEOUT_S=60 -- 400 30
    sleep 0.5
    ip -n "$(node_ns 1)" link set eth0 down
    sleep 12
    ip -n "$(node_ns 1)" link set eth0 up 2>/dev/null
    fault_end error 4 "timed out|remote peer failed"
    grep -q 'SWY_OUTAGE_S' "$work/out" || fail "no rank names the outage"
    ;;
fault_sigkill)
    # Rank 3 killed mid-collective: the other three report the death.
    # Mostly as SWY_ERR_REMOTE from the control plane; a rank whose UCX
    # endpoint to rank 3 fails first (about one run in ten) returns
    # SWY_ERR_TRANSPORT naming rank 3 instead. Either names rank 3.
    fault_start -- 400 30
    sleep 0.5
    kill -KILL "$(rank_pid 3)"
    fault_end error 3 "remote peer failed|transport error"
    grep -q 'rank 3 (pid [0-9]* on node1) died' "$work/out" ||
        fail "no rank names rank 3's death"
    grep -E '^\[[0-9]\] rank [0-9]: error' "$work/out" | grep -v 'rank 3' &&
        fail "an error that does not name rank 3"
    ;;
fault_sigstop)
    # Rank 2 stopped mid-collective (alive, silent): the others fail with
    # SWY_ERR_TIMEOUT naming it after the 4 s outage; swy-run then kills
    # the stopped one.
    fault_start SWY_OUTAGE_S=4 SWY_TIMEOUT_S=60 -- 400 30
    sleep 0.5
    kill -STOP "$(rank_pid 2)"
    fault_end error 3 "timed out|remote peer failed"
    grep -q 'rank 2 (pid [0-9]* on node1) timed out' "$work/out" ||
        fail "no rank names rank 2 as timed out"
    ;;
bench_compare)
    # swy-bench coll runs its peers where rank 0 is, so a job over two
    # nodes has nothing to compare there: auto says so and succeeds,
    # require fails with the reason.
    run_cluster --timeout 60 --nodes 2 --ranks-per-node 2 "$swy_bench" \
        coll --max-size 16K --iters 2
    wait $pid; rc=$?
    skip_if_unsupported $rc
    cat "$work/out" "$work/err"
    [ $rc = 0 ] || fail "auto: exit status $rc"
    [ "$(grep -cE '^\[0\] (alltoallv|allreduce) .* ok$' "$work/out")" = 4 ] ||
        fail "auto: expected 4 rows of results"
    grep -q '^\[0\] # compare: no peer run: the ranks are on more than one host' "$work/out" ||
        fail "auto: no word that the peers were not run"
    grep -q '# openmpi:' "$work/out" && fail "auto: Open MPI ran for a job across nodes"
    assert_clean $pid
    run_cluster --timeout 60 --nodes 2 --ranks-per-node 1 "$swy_bench" \
        coll --max-size 4K --iters 2 --compare require
    wait $pid; rc=$?
    cat "$work/out" "$work/err"
    [ $rc != 0 ] || fail "require: exit status 0 for a job across nodes"
    grep -q 'compare require: the ranks are on more than one host' "$work/out" "$work/err" ||
        fail "require: no reason given"
    assert_clean $pid
    ;;
setup)
    # Each rank reports what it sees from inside its node.
    cat >"$work/helper.sh" <<'EOF'
#!/bin/sh
addr=$(ip -4 -o addr show dev eth0 | awk '{print $4}')
echo "host=$(hostname) rank=$SWY_RANK node=$SWY_NODE local=$SWY_LOCAL_RANK localsize=$SWY_LOCAL_WORLD_SIZE nnodes=$SWY_NNODES size=$SWY_WORLD_SIZE root=$SWY_ROOT addr=$addr ipc=$(readlink /proc/self/ns/ipc) pid1=$(cat /proc/1/comm)"
EOF
    chmod +x "$work/helper.sh"
    run_cluster --nodes 2 --ranks-per-node 2 --link 1gbit "$work/helper.sh"
    wait $pid; rc=$?
    skip_if_unsupported $rc
    cat "$work/out" "$work/err"
    [ $rc = 0 ] || fail "exit status $rc"
    [ "$(grep -c 'host=' "$work/out")" = 4 ] || fail "expected 4 ranks"
    for r in 0 1 2 3; do
        n=$((r / 2))
        line=$(grep "^\[$r\] " "$work/out")
        echo "$line" | grep -q "host=node$n rank=$r node=$n local=$((r % 2)) localsize=2 nnodes=2 size=4 root=198.18.0.1:[0-9]* addr=198.18.0.$((n + 1))/24 " ||
            fail "rank $r: wrong view: $line"
        # PID 1 of the node is the namespace holder (a swy-run clone).
        echo "$line" | grep -q "pid1=swy-run" || fail "rank $r: not in the node's PID namespace: $line"
    done
    # One IPC namespace per node, shared by its ranks, none shared across.
    ipc() { grep "^\[$1\] " "$work/out" | sed 's/.*ipc=\([^ ]*\).*/\1/'; }
    [ "$(ipc 0)" = "$(ipc 1)" ] || fail "ranks 0 and 1 in different IPC namespaces"
    [ "$(ipc 2)" = "$(ipc 3)" ] || fail "ranks 2 and 3 in different IPC namespaces"
    [ "$(ipc 0)" != "$(ipc 2)" ] || fail "nodes 0 and 1 share an IPC namespace"
    [ "$(ipc 0)" != "$(readlink /proc/self/ns/ipc)" ] || fail "node 0 shares the host's IPC namespace"
    assert_clean $pid
    ;;
collective)
    run_cluster --timeout 60 --nodes 2 --ranks-per-node 2 --link 1gbit "$test_env"
    wait $pid; rc=$?
    skip_if_unsupported $rc
    cat "$work/out" "$work/err"
    [ $rc = 0 ] || fail "exit status $rc"
    [ "$(grep -c ': ok$' "$work/out")" = 4 ] || fail "expected 4 ranks ok"
    assert_clean $pid
    ;;
transports)
    # Same node: UCX shared memory; across nodes: tcp over eth0 only.
    run_cluster --timeout 60 --nodes 2 --ranks-per-node 2 --link 1gbit "$swy_info" --peers
    wait $pid; rc=$?
    skip_if_unsupported $rc
    cat "$work/out" "$work/err"
    [ $rc = 0 ] || fail "exit status $rc"
    for r in 0 1 2 3; do
        for p in 0 1 2 3; do
            [ $r = $p ] && continue
            line=$(grep -E "^\[$r\] +peer $p " "$work/out")
            [ -n "$line" ] || { fail "rank $r: no line for peer $p"; continue; }
            if [ $((r / 2)) = $((p / 2)) ]; then
                echo "$line" | grep -Eq '(posix|sysv|cma|mm|xpmem|knem)/' ||
                    fail "rank $r -> $p (same node) not over shared memory: $line"
                echo "$line" | grep -q cross_node && fail "rank $r -> $p (same node) classed cross_node: $line"
            else
                echo "$line" | grep -q 'tcp/' ||
                    fail "rank $r -> $p (other node) not over tcp: $line"
                echo "$line" | grep -Eq '(posix|sysv|cma|mm|xpmem|knem)/' &&
                    fail "rank $r -> $p (other node) over shared memory: $line"
                echo "$line" | grep -q cross_node || fail "rank $r -> $p (other node) not cross_node: $line"
            fi
        done
    done
    assert_clean $pid
    ;;
shaped)
    # ucx_perftest tag_bw over tcp from node 1 to node 0 through the two
    # tbf qdiscs (node 1's eth0, the bridge's end toward node 0), and back.
    command -v ucx_perftest >/dev/null || { echo "skip: needs ucx_perftest"; exit 77; }
    cat >"$work/perf.sh" <<'EOF'
#!/bin/sh
# perf.sh SERVER_NODE: the other node's rank sends to it.
export UCX_TLS=tcp,self UCX_WARN_UNUSED_ENV_VARS=n
args="-t tag_bw -s 1048576 -n 150 -w 10 -p 23456"
if [ "$SWY_NODE" = "$1" ]; then
    exec ucx_perftest $args
else
    sleep 1
    exec ucx_perftest 198.18.0.$(($1 + 1)) $args
fi
EOF
    chmod +x "$work/perf.sh"
    # At 1 gbit: 119.2 MiB/s (ucx_perftest's MB is MiB); accept 0.5x-1.05x.
    # The upper bound shows the shaping holds (loopback alone runs at GB/s);
    # the lower one only that the link carries traffic at all: a busy
    # 2-core machine took 81.7 MiB/s from one direction once.
    lo=59.6 hi=125.2
    for server in 0 1; do
        run_cluster --timeout 60 --nodes 2 --link 1gbit "$work/perf.sh" $server
        wait $pid; rc=$?
        skip_if_unsupported $rc
        grep -E 'Final|rror' "$work/out" "$work/err"
        [ $rc = 0 ] || fail "exit status $rc (to node $server)"
        # [r] Final: iterations, latency 50%, average, overall, bandwidth
        # average (of the last interval), overall, ...
        bw=$(awk '/Final:/ {print $8}' "$work/out" | head -1)
        [ -n "$bw" ] || { fail "no result (to node $server)"; cat "$work/out" "$work/err"; continue; }
        echo "1gbit link, node $((1 - server)) -> node $server: $bw MiB/s (accepting $lo..$hi)"
        awk -v b="$bw" -v lo=$lo -v hi=$hi 'BEGIN {exit !(b >= lo && b <= hi)}' ||
            fail "throughput $bw MiB/s outside $lo..$hi"
        assert_clean $pid
    done
    ;;
sigterm)
    run_cluster --nodes 2 --ranks-per-node 2 --link 1gbit sleep 30
    # Wait until the ranks run (the namespaces exist and hold sleeps).
    for i in $(seq 100); do
        [ "$(ip netns pids swy-$pid-n1 2>/dev/null | wc -l)" -ge 3 ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    if ! kill -0 $pid 2>/dev/null; then
        wait $pid; rc=$?; skip_if_unsupported $rc
        fail "swy-run ended early with status $rc"; cat "$work/err"
    fi
    echo "while running:"; ip netns list | grep "^swy-$pid-"
    for ns in br n0 n1; do
        ip netns list | grep -q "^swy-$pid-$ns\b" || fail "namespace swy-$pid-$ns missing"
    done
    # Both ends of each uplink are shaped.
    for i in 0 1; do
        tc -n swy-$pid-n$i qdisc show dev eth0 | grep -q 'tbf.*rate 1Gbit' ||
            fail "node $i: eth0 not shaped: $(tc -n swy-$pid-n$i qdisc show dev eth0)"
        tc -n swy-$pid-br qdisc show dev v$i | grep -q 'tbf.*rate 1Gbit' ||
            fail "bridge end v$i not shaped: $(tc -n swy-$pid-br qdisc show dev v$i)"
        ip -n swy-$pid-n$i -4 -o addr show dev eth0 | grep -q "198.18.0.$((i + 1))/24" ||
            fail "node $i: no address"
    done
    ip -4 -o addr show | grep -q ' 198\.18\.' && fail "a 198.18 address in the root namespace"
    assert_root_links_untouched
    start=$(date +%s%N)
    kill -TERM $pid
    wait $pid; rc=$?
    echo "swy-run exited $rc after SIGTERM in $(( ($(date +%s%N) - start) / 1000000 )) ms"
    cat "$work/out" "$work/err"
    [ $rc = 143 ] || fail "exit status $rc, expected 143 (SIGTERM)"
    assert_clean $pid
    ;;
stale)
    # A dead run's namespace goes; one named after a live process stays.
    [ -d /run/netns ] && had_dir=1 || had_dir=0
    true & dead=$!; wait $dead
    while kill -0 $dead 2>/dev/null; do true & dead=$!; wait $dead; done
    live=$$
    # Under swy-run's lock: a swy-run ending meanwhile may remove an empty
    # /run/netns under `ip netns add`. (A concurrent run may also remove
    # the stale name first; that is fine.)
    lock=/run/swy-run-netns.lock
    flock $lock ip netns add swy-$dead-n0 || { echo "skip: ip netns add failed"; exit 77; }
    flock $lock ip netns add swy-$live-n7
    run_cluster --nodes 1 true
    wait $pid; rc=$?
    cat "$work/out" "$work/err"
    if ip netns list | grep -q "^swy-$dead-n0\b"; then
        fail "stale swy-$dead-n0 not removed"
        ip netns delete swy-$dead-n0
    fi
    ip netns list | grep -q "^swy-$live-n7\b" || fail "swy-$live-n7 of a live process removed"
    ip netns delete swy-$live-n7 2>/dev/null
    # Undo what `ip netns add` did above when the directory was not there.
    if [ $had_dir = 0 ]; then
        flock $lock sh -c '[ -z "$(ls -A /run/netns 2>/dev/null)" ] &&
            umount /run/netns 2>/dev/null && rmdir /run/netns'
    fi
    skip_if_unsupported $rc
    [ $rc = 0 ] || fail "exit status $rc"
    assert_clean $pid
    ;;
*)
    echo "unknown case $case_name"; exit 2 ;;
esac

[ $failures = 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "ok: $case_name"
