#!/usr/bin/env bash
# bench-hier.sh: the hier benchmark (MEASURE.md) on the emulated cluster.
# All-to-all on NODES x RPN (default 2 x 4) at LINK (default 1gbit), per
# peer 1 KiB to 1 MiB (swy-bench coll sizes are what a rank sends in
# total: per peer x ranks): Switchyard's pairwise and hier algorithms
# (SWY_ALLTOALLV_ALGO) and Open MPI's MPI_Alltoallv, in turns, REPEAT
# times. With ALLREDUCE=1 instead: allreduce of 16-256 MiB on 2 x 2 and
# 2 x 4, Switchyard (SWY_ALLREDUCE_ALGO=auto) and Open MPI, against the
# hierarchical limit: reduce-scatter inside the node, an allreduce of 1/M
# of the buffer between the 2 nodes on each of the M rails, allgather
# inside; each node's uplink then carries the buffer's size each way, so
# the limit is size / uplink rate (the rate: UPLINK_MBPS, default 114 MB/s,
# what tbf at 1 gbit gives UCX over TCP, docs/architecture.md).
# Then a summary: per (implementation, size) the median of the runs'
# medians with the runs' min-max, and the ratios.
#
#   tools/bench-hier.sh
#
# Needs root (network namespaces); exits 77 without it. Builds nothing.
# Environment: BUILD_DIR (default build), REPEAT (default 5), LINK,
# NODES, RPN, ALLREDUCE, UPLINK_MBPS, MIN_PEER_KIB and MAX_PEER_KIB (the
# all-to-all's range per peer, default 1 and 1024), FACTOR (its step,
# default 4), OUT_DIR (keep the raw outputs there; default a temporary
# folder, removed). SWY_* and UCX_* reach every rank.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$here/build}
[[ $build == /* ]] || build=$PWD/$build
export SWY_PLUGIN_PATH=${SWY_PLUGIN_PATH:-$(cat "$build/plugin-path" 2>/dev/null || true)}
repeat=${REPEAT:-5}
link=${LINK:-1gbit}
nodes=${NODES:-2}
rpn=${RPN:-4}
allreduce=${ALLREDUCE:-0}
uplink=${UPLINK_MBPS:-114}

if [[ $(id -u) -ne 0 ]]; then
    echo "bench-hier: needs root (network namespaces); skipped" >&2
    exit 77
fi
swy_run=$build/tools/swy-run/swy-run
swy_bench=$build/tools/swy-bench/swy-bench
swy_bench_mpi=$build/tools/swy-bench-mpi/swy-bench-mpi
for exe in "$swy_run" "$swy_bench"; do
    [[ -x $exe ]] || { echo "bench-hier: $exe not found; build first" >&2
                       exit 2; }
done
if [[ -n ${OUT_DIR:-} ]]; then
    out=$OUT_DIR
    mkdir -p "$out"
else
    out=$(mktemp -d)
fi
cleanup() {
    if [[ -n $mpi_relay_pid ]]; then
        kill "$mpi_relay_pid" 2>/dev/null || true
        wait "$mpi_relay_pid" 2>/dev/null || true
    fi
    rm -f "$out"/node*.sock "$out"/node*.ready
    [[ -n ${OUT_DIR:-} ]] || rm -rf "$out"
}
. "$here/tools/mpi-cluster.sh"
trap cleanup EXIT
say() { printf '\n== %s\n' "$*"; }

say "command: $0 (REPEAT=$repeat LINK=$link NODES=$nodes RPN=$rpn" \
    "ALLREDUCE=$allreduce)"
say "commit $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo ?)," \
    "$(date -u '+%F %T') UTC, nproc $(nproc)," \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
    "load $(cut -d' ' -f1-3 /proc/loadavg)"

have_mpi=0
if [[ -x $swy_bench_mpi ]] && command -v mpirun >/dev/null; then
    mpi_relay_files "$out"
    if mpi_relays_start "$out" "$swy_run" "$link" "$nodes"; then
        have_mpi=1
    fi
fi
mpi_mca=(--mca pml ob1 --mca btl tcp,vader,self)

# one run: LABEL RPN ENV... -- BENCH_ARGS...
swy_once() {
    local label=$1 m=$2
    shift 2
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$swy_run" --nodes "$nodes" --ranks-per-node "$m" \
        --link "$link" --no-prefix --timeout 600 "$swy_bench" coll --json \
        --compare none "$@" | sed "s/^{\"bench\"/{\"label\":\"$label\",\"bench\"/"
}
mpi_once() {
    local label=$1 m=$2
    shift 2
    local hosts="" n
    for ((n = 0; n < nodes; n++)); do
        hosts+="${hosts:+,}198.18.0.$((n + 1)):$m"
    done
    mpi_relay_run "$out" -np $((nodes * m)) --host "$hosts" "${mpi_mca[*]}" \
        "$swy_bench_mpi" coll --json "$*" |
        sed "s/^{\"bench\"/{\"label\":\"$label\",\"bench\"/"
}

for ((run = 1; run <= repeat; run++)); do
    if ((allreduce)); then
        for m in 2 4; do
            args=(--op allreduce --min-size 16M --max-size 256M --factor 4
                  --iters 3 --warmup 1)
            say "run $run/$repeat switchyard allreduce ${nodes}x$m"
            swy_once "swy-${nodes}x$m" "$m" SWY_ALLREDUCE_ALGO=auto -- \
                "${args[@]}" | tee -a "$out/runs.txt"
            if ((have_mpi)); then
                say "run $run/$repeat openmpi allreduce ${nodes}x$m"
                mpi_once "ompi-${nodes}x$m" "$m" "${args[@]}" |
                    tee -a "$out/runs.txt"
            fi
        done
        continue
    fi
    w=$((nodes * rpn))
    args=(--op alltoallv --min-size $((w * ${MIN_PEER_KIB:-1}))K
          --max-size $((w * ${MAX_PEER_KIB:-1024}))K --factor "${FACTOR:-4}")
    for algo in pairwise hier; do
        say "run $run/$repeat switchyard $algo: SWY_ALLTOALLV_ALGO=$algo" \
            "swy-run --nodes $nodes --ranks-per-node $rpn --link $link" \
            "swy-bench coll ${args[*]}"
        swy_once "$algo" "$rpn" SWY_ALLTOALLV_ALGO=$algo -- "${args[@]}" |
            tee -a "$out/runs.txt"
    done
    if ((have_mpi)); then
        say "run $run/$repeat openmpi: mpirun -np $w ${mpi_mca[*]}" \
            "swy-bench-mpi coll ${args[*]}"
        mpi_once openmpi "$rpn" "${args[@]}" | tee -a "$out/runs.txt"
    else
        say "openmpi: skipped (swy-bench-mpi not built, no mpirun, or the" \
            "relays did not start)"
    fi
done

say "summary ($repeat runs; median of the runs' medians [min-max of them])"
/usr/bin/python3 - "$out/runs.txt" "$allreduce" "$uplink" "$nodes" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    try:
        j = json.loads(line)
    except ValueError:
        continue
    key = (j["label"], j["op"], j["bytes"], j["ranks"])
    rows.setdefault(key, []).append(j["time_us_median"])
allreduce, uplink, nodes = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
def stat(v):
    return statistics.median(v), min(v), max(v)
def fmt(t):
    return "%.0f [%.0f-%.0f]" % t
if allreduce:
    print("%-10s %6s %24s %24s %10s %10s" % ("config", "size", "switchyard us",
          "openmpi us", "swy/limit", "ompi/limit"))
    for (label, op, b, w), v in sorted(rows.items()):
        if not label.startswith("swy-"):
            continue
        cfg = label[4:]
        limit_us = b / (uplink * 1e6) * 1e6
        s = stat(v)
        o = rows.get(("ompi-" + cfg, op, b, w))
        os_ = stat(o) if o else None
        print("%-10s %5dM %24s %24s %9.0f%% %9s" % (
            cfg, b >> 20, fmt(s), fmt(os_) if os_ else "-",
            100 * limit_us / s[0],
            "%.0f%%" % (100 * limit_us / os_[0]) if os_ else "-"))
    sys.exit(0)
print("%8s %8s %24s %24s %24s %9s %9s" % ("per peer", "total", "pairwise us",
      "hier us", "openmpi us", "pw/hier", "ompi/hier"))
sizes = sorted({(k[2], k[3]) for k in rows})
for b, w in sizes:
    get = lambda l: rows.get((l, "alltoallv", b, w))
    p, h, o = get("pairwise"), get("hier"), get("openmpi")
    if not p or not h:
        continue
    ps, hs = stat(p), stat(h)
    os_ = stat(o) if o else None
    # the uplink limit: what one node's ranks send the other nodes
    limit = b / w * (w - w // nodes) * (w // nodes) / (uplink * 1e6) * 1e6
    print("%7dK %7dK %24s %24s %24s %8.2fx %8s   (uplink limit %.0f us)" % (
        b // w >> 10, b >> 10, fmt(ps), fmt(hs), fmt(os_) if os_ else "-",
        ps[0] / hs[0], "%.2fx" % (os_[0] / hs[0]) if os_ else "-", limit))
PY
