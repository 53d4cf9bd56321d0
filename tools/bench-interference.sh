#!/usr/bin/env bash
# bench-interference.sh: the interference benchmark (docs/measuring.md) on the
# emulated cluster — 2 nodes x 2 ranks, a tbf-shaped 1 gbit link between
# the nodes — Switchyard (every policy and the partition sweep, one run)
# beside Open MPI (MPI_Ialltoallv under an MPI_Iallreduce backlog), then a
# summary: per policy the all-to-all slowdown and the allreduce throughput
# relative to fair, against the targets (lina slowdown <= 1.15x and below
# fair's and Open MPI's; lina allreduce throughput >= 90% of fair's).
#
#   tools/bench-interference.sh [swy-bench interference options...]
#
# Needs root (network namespaces); exits 77 without it. Builds nothing.
# Environment: BUILD_DIR (default build), REPEAT (default 1: run Switchyard
# and Open MPI alternately this many times; the summary takes per
# configuration the median over runs of each run's median), OUT_DIR (keep
# the raw outputs there; default a temporary folder, removed), POLICIES
# (default fifo,fair,lina,credit,lina+hint), LINK (default 1gbit),
# MPI_LOCAL=1 (run Open MPI on 4 local ranks over TCP instead of inside the
# emulated cluster). UCX_TCP_SNDBUF reaches Switchyard's UCX and, as
# btl_tcp_sndbuf, Open MPI's TCP BTL, so both run with the same socket
# buffer. SWY_* and UCX_* variables reach every program.
#
# Open MPI inside the emulated nodes: mpirun starts its remote daemon
# through an rsh agent. Here swy-run starts one exec relay per node (a
# small Python server on a unix socket under the output folder: a path
# socket is reachable from every network namespace, and the nodes share
# /tmp); mpirun runs in node0 through node0's relay, and its rsh agent runs
# orted in node1 through node1's relay. The ranks thus sit in the same
# namespaces, behind the same shaped link, as Switchyard's ranks.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$here/build}
[[ $build == /* ]] || build=$PWD/$build
# The library compiles in no build-tree path: name the build's plugins.
export SWY_PLUGIN_PATH=${SWY_PLUGIN_PATH:-$(cat "$build/plugin-path" 2>/dev/null || true)}
extra=("$@")
python=/usr/bin/python3
policies=${POLICIES:-fifo,fair,lina,credit,lina+hint}
link=${LINK:-1gbit}
repeat=${REPEAT:-1}

if [[ $(id -u) -ne 0 ]]; then
    echo "bench-interference: needs root (network namespaces); skipped" >&2
    exit 77
fi
swy_run=$build/tools/swy-run/swy-run
swy_bench=$build/tools/swy-bench/swy-bench
swy_bench_mpi=$build/tools/swy-bench-mpi/swy-bench-mpi
for exe in "$swy_run" "$swy_bench"; do
    if [[ ! -x $exe ]]; then
        echo "bench-interference: $exe not found; build first" \
             "(ninja -C $build)" >&2
        exit 2
    fi
done

if [[ -n ${OUT_DIR:-} ]]; then
    out=$OUT_DIR
    mkdir -p "$out"
else
    out=$(mktemp -d)
fi
relay_pid=
cleanup() {
    if [[ -n $relay_pid ]]; then
        kill "$relay_pid" 2>/dev/null || true
        wait "$relay_pid" 2>/dev/null || true
    fi
    rm -f "$out"/node*.sock "$out"/node*.ready
    [[ -n ${OUT_DIR:-} ]] || rm -rf "$out"
}
trap cleanup EXIT

say() { printf '\n== %s\n' "$*"; }

# The options Open MPI's run shares with Switchyard's (no policies there).
mpi_extra=()
for ((i = 0; i < ${#extra[@]}; i++)); do
    case ${extra[i]} in
    --a2a-size | --allreduce-size | --delay-ms | --reps | --warmup)
        mpi_extra+=("${extra[i]}" "${extra[i + 1]:-}")
        i=$((i + 1))
        ;;
    --json) ;;
    esac
done
mpi_mca=(--mca pml ob1 --mca btl tcp,vader,self)
if [[ -n ${UCX_TCP_SNDBUF:-} ]]; then
    mpi_mca+=(--mca btl_tcp_sndbuf "$UCX_TCP_SNDBUF")
fi

# The exec relay (see the top of this file; tools/mpi-cluster.sh).
. "$here/tools/mpi-cluster.sh"
mpi_relay_files "$out"
mpi_cluster_run() {
    mpi_relay_run "$out" -np 4 --host 198.18.0.1:2,198.18.0.2:2 \
        "${mpi_mca[@]}" "$swy_bench_mpi" interference --nodes 2 --json \
        "${mpi_extra[@]}"
}
relays_start() {
    mpi_relays_start "$out" "$swy_run" "$link" && relay_pid=$mpi_relay_pid
}
mpi_local_run() {
    # Both on 4 local ranks over TCP (loopback, unshaped): the fallback.
    mpirun --allow-run-as-root --oversubscribe -np 4 \
        --mca btl_tcp_if_include lo "${mpi_mca[@]}" \
        "$swy_bench_mpi" interference --json "${mpi_extra[@]}" </dev/null
}

have_mpi=0
[[ -x $swy_bench_mpi ]] && command -v mpirun >/dev/null && have_mpi=1
mpi_where=cluster
if ((have_mpi)) && [[ ${MPI_LOCAL:-0} == 1 ]]; then
    mpi_where=local
elif ((have_mpi)) && ! relays_start; then
    echo "bench-interference: Open MPI falls back to 4 local ranks" >&2
    mpi_where=local
fi

for ((run = 1; run <= repeat; run++)); do
    if [[ $mpi_where == local ]]; then
        say "run $run/$repeat switchyard: swy-run -n 4 (UCX_TLS=tcp, local)" \
            "swy-bench interference --policies $policies ${extra[*]}"
        UCX_TLS=tcp "$swy_run" -n 4 --no-prefix "$swy_bench" interference \
            --json --policies "$policies" "${extra[@]}" \
            | tee "$out/switchyard-$run.txt"
    else
        say "run $run/$repeat switchyard: swy-run --nodes 2" \
            "--ranks-per-node 2 --link $link swy-bench interference" \
            "--policies $policies ${extra[*]}"
        "$swy_run" --nodes 2 --ranks-per-node 2 --link "$link" --no-prefix \
            "$swy_bench" interference --json --policies "$policies" \
            "${extra[@]}" | tee "$out/switchyard-$run.txt"
    fi
    if ((have_mpi)); then
        say "run $run/$repeat openmpi ($mpi_where): mpirun -np 4 ${mpi_mca[*]}" \
            "swy-bench-mpi interference ${mpi_extra[*]}"
        if [[ $mpi_where == cluster ]]; then
            mpi_cluster_run | tee "$out/openmpi-$run.txt"
        else
            mpi_local_run | tee "$out/openmpi-$run.txt"
        fi
    else
        say "openmpi: skipped (swy-bench-mpi not built or no mpirun)"
        : >"$out/openmpi-$run.txt"
    fi
done

say "summary ($repeat run(s); Open MPI: $mpi_where;" \
    "UCX_TCP_SNDBUF=${UCX_TCP_SNDBUF:-default})"
"$python" - "$out" "$repeat" <<'EOF'
import json, statistics, sys

out, repeat = sys.argv[1], int(sys.argv[2])

def results(name, run):
    rows = {}
    with open(f"{out}/{name}-{run}.txt") as f:
        for line in f:
            start = line.find('{"bench":"interference"')
            if start >= 0:
                r = json.loads(line[start:])
                key = (r["policy"], r["sweep"], r["partition_bytes"],
                       r["credit_bytes"])
                rows[key] = r
    return rows

runs = [{**results("switchyard", k), **results("openmpi", k)}
        for k in range(1, repeat + 1)]
keys = []
for run in runs:
    keys += [k for k in run if k not in keys]

def med(key, field):
    values = [run[key][field] for run in runs if key in run]
    return statistics.median(values) if values else float("nan")

def rng(key, field):
    values = [run[key][field] for run in runs if key in run]
    return f"{min(values):.2f}-{max(values):.2f}" if len(values) > 1 else ""

def size(n):
    if n == 0:
        return "-"
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)

fair = next((k for k in keys if k[0] == "fair" and k[1] == "policies"), None)
fair_bw = med(fair, "allreduce_MBps") if fair else float("nan")
print(f"{'policy':<10} {'sweep':<9} {'part':>5} {'credit':>6} "
      f"{'alone ms':>9} {'loaded ms':>10} {'p95 ms':>8} {'slowdown':>9} "
      f"{'(range)':>11} {'ar MB/s':>8} {'vs fair':>8} {'overlap':>8} "
      f"{'check':>5}")
for k in keys:
    bw = med(k, "allreduce_MBps")
    checks = {run[k]["check"] for run in runs if k in run}
    print(f"{k[0]:<10} {k[1]:<9} {size(k[2]):>5} {size(k[3]):>6} "
          f"{med(k, 'a2a_alone_ms'):>9.2f} {med(k, 'a2a_loaded_ms'):>10.2f} "
          f"{med(k, 'a2a_loaded_p95_ms'):>8.2f} "
          f"{med(k, 'slowdown'):>8.2f}x {rng(k, 'slowdown'):>11} "
          f"{bw:>8.1f} {bw / fair_bw * 100:>7.0f}% "
          f"{med(k, 'backlog_overlap') * 100:>7.0f}% "
          f"{'ok' if checks == {'ok'} else 'WRONG':>5}")

def verdict(ok):
    return "met" if ok else "NOT met"

lina = next((k for k in keys if k[0] == "lina" and k[1] == "policies"), None)
mpi = next((k for k in keys if k[0] == "openmpi"), None)
print("\ntargets (docs/measuring.md):")
if lina and fair:
    ls, fs = med(lina, "slowdown"), med(fair, "slowdown")
    print(f"  lina slowdown {ls:.2f}x <= 1.15x: {verdict(ls <= 1.15)}")
    print(f"  lina slowdown below fair's ({fs:.2f}x): {verdict(ls < fs)}")
    if mpi:
        ms = med(mpi, "slowdown")
        print(f"  lina slowdown below Open MPI's ({ms:.2f}x): "
              f"{verdict(ls < ms)}")
    lb = med(lina, "allreduce_MBps")
    print(f"  lina allreduce {lb:.1f} MB/s >= 90% of fair's {fair_bw:.1f}: "
          f"{lb / fair_bw * 100:.0f}%: {verdict(lb >= 0.9 * fair_bw)}")
hint = next((k for k in keys if k[0] == "lina+hint"), None)
if hint and fair:
    hs, hb = med(hint, "slowdown"), med(hint, "allreduce_MBps")
    print(f"  (lina+hint: slowdown {hs:.2f}x, allreduce "
          f"{hb / fair_bw * 100:.0f}% of fair's)")
bad = [k for k in keys for run in runs if k in run and run[k]["check"] != "ok"]
if bad:
    print("WRONG results:", bad)
    sys.exit(1)
EOF
