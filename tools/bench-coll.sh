#!/usr/bin/env bash
# bench-coll.sh: the coll benchmark (docs/measuring.md) — Switchyard beside its
# peers on the same machine, in one run:
#   1. swy-bench coll on NRANKS local ranks (swy-run),
#   2. swy-bench-mpi (MPI_Alltoallv / MPI_Allreduce) under mpirun, same sizes,
#   3. PyTorch gloo (all_to_all_single / all_reduce on CPU tensors, what
#      an ML user would pick without GPUs) under swy-run, same sizes, when
#      the project venv (tools/venv.sh; SWY_VENV) or Debian's
#      /usr/bin/python3 has torch (tools/swy-bench/gloo_coll.py; GLOO=0
#      leaves it out),
#   4. swy-bench-mpi --with-switchyard under mpirun: Open MPI and
#      Switchyard in one job, every iteration running both (PAIRED=0
#      leaves it out),
#   5. ucx_perftest tag_bw, 16 MiB, between two local processes (the limit),
#      whose median over the runs the bus bandwidths are compared with,
#   6. swy-bench c2c before and after each run (a cache line's round trip
#      between two CPUs: on a VM, whether the host placed them near),
# then a comparison for every size (the target is for >= 1 MiB): median
# times, their ratios (openmpi / switchyard and gloo / switchyard: > 1
# means Switchyard is faster) and allreduce bus bandwidth as a share of
# ucx_perftest's; and from the paired job the medians of the
# per-iteration ratios, which a noisy machine's slow phases cannot put on
# one side only.
#
#   tools/bench-coll.sh [NRANKS=4] [swy-bench coll options...]
#   (--mem shared: each library on its own allocation: swy_mem_alloc,
#   MPI_Alloc_mem; the paired job on swy_mem_alloc buffers; gloo, which
#   has no such allocation, on ordinary tensors)
#
# Builds nothing. Environment: BUILD_DIR (default build), REPEAT (default 1:
# run all of the above alternately this many times; the comparison then
# takes, per size, the median over the runs of each run's median, and
# shows the range of the per-run ratios — on a shared, noisy machine the
# alternation keeps slow phases from landing on one side only), OUT_DIR
# (keep the raw outputs there; default a temporary folder, removed).
# SWY_* and UCX_* variables reach every program.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$here/build}
[[ $build == /* ]] || build=$PWD/$build
# The library compiles in no build-tree path: name the build's plugins.
export SWY_PLUGIN_PATH=${SWY_PLUGIN_PATH:-$(cat "$build/plugin-path" 2>/dev/null || true)}
nranks=4
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
    nranks=$1
    shift
fi
extra=("$@")
# gloo on the project venv's torch, else on Debian's python3-torch.
python=${SWY_VENV:-$HOME/.cache/switchyard/venv}/bin/python
[[ -x $python ]] || python=/usr/bin/python3

swy_run=$build/tools/swy-run/swy-run
swy_bench=$build/tools/swy-bench/swy-bench
swy_bench_mpi=$build/tools/swy-bench-mpi/swy-bench-mpi
for exe in "$swy_run" "$swy_bench"; do
    if [[ ! -x $exe ]]; then
        echo "bench-coll: $exe not found; build first (ninja -C $build)" >&2
        exit 2
    fi
done

if [[ -n ${OUT_DIR:-} ]]; then
    out=$OUT_DIR
    mkdir -p "$out"
else
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi

say() { printf '\n== %s\n' "$*"; }

repeat=${REPEAT:-1}
have_mpi=0
[[ -x $swy_bench_mpi ]] && command -v mpirun >/dev/null && have_mpi=1
gloo_coll=$here/tools/swy-bench/gloo_coll.py
have_gloo=0
if [[ ${GLOO:-1} != 0 ]] &&
    "$python" -c 'import torch.distributed as d; assert d.is_gloo_available()' \
        2>/dev/null; then
    have_gloo=1
fi
# ucx_perftest (the limit), into $out/perftest-RUN.txt: the server serves
# one run and exits. A port of our own so two benchmarks on one machine do
# not meet. Run with every repeat, so that its median comes from the same
# phases of a noisy machine as the others'.
perftest() {
    local run=$1 port=$((20000 + RANDOM % 20000)) server ok=0
    local perf_args=(-t tag_bw -s 16777216 -n 100 -w 10 -p "$port")
    if ! command -v ucx_perftest >/dev/null; then
        say "ucx_perftest: not installed (ucx-utils)"
        : >"$out/perftest-$run.txt"
        return
    fi
    say "run $run/$repeat ucx_perftest ${perf_args[*]} (server and client," \
        "127.0.0.1)"
    ucx_perftest "${perf_args[@]}" >"$out/perftest-server-$run.txt" 2>&1 &
    server=$!
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        sleep 0.5
        if ucx_perftest 127.0.0.1 "${perf_args[@]}" -f \
            >"$out/perftest-$run.txt" 2>&1; then
            ok=1
            break
        fi
    done
    if ((ok)); then
        wait "$server" || true
    else
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    cat "$out/perftest-$run.txt"
}

# swy-bench c2c (a cache line's round trip between two CPUs) before and
# after each run, into $out/c2c-RUN.txt: on a virtual machine the host may
# move the CPUs apart and back while the benchmark runs, which the
# shared-memory algorithms feel most (docs/performance.md, "coll").
c2c() {
    "$swy_bench" c2c --json >>"$out/c2c-$1.txt" 2>&1 || true
}

for ((run = 1; run <= repeat; run++)); do
    c2c "$run"
    say "run $run/$repeat switchyard: swy-run -n $nranks swy-bench coll" \
        "--compare none --json ${extra[*]}"
    "$swy_run" -n "$nranks" --no-prefix "$swy_bench" coll --compare none --json \
        "${extra[@]}" | tee "$out/switchyard-$run.txt"

    if ((have_mpi)); then
        say "run $run/$repeat openmpi: mpirun -np $nranks swy-bench-mpi" \
            "--json ${extra[*]}"
        mpirun --allow-run-as-root --oversubscribe -np "$nranks" \
            "$swy_bench_mpi" --json "${extra[@]}" \
            | tee "$out/openmpi-$run.txt"
    else
        say "openmpi: skipped (swy-bench-mpi not built or no mpirun)"
        : >"$out/openmpi-$run.txt"
    fi

    if ((have_mpi && ${PAIRED:-1})); then
        say "run $run/$repeat paired: mpirun -np $nranks swy-bench-mpi" \
            "--with-switchyard --json ${extra[*]}"
        mpirun --allow-run-as-root --oversubscribe -np "$nranks" \
            "$swy_bench_mpi" --with-switchyard --json "${extra[@]}" \
            | tee "$out/paired-$run.txt"
    else
        : >"$out/paired-$run.txt"
    fi

    if ((have_gloo)); then
        say "run $run/$repeat gloo: swy-run -n $nranks $python gloo_coll.py" \
            "--json ${extra[*]}"
        "$swy_run" -n "$nranks" --no-prefix "$python" "$gloo_coll" --json \
            "${extra[@]}" | tee "$out/gloo-$run.txt"
    else
        say "gloo: skipped (GLOO=0, or no torch for $python: tools/venv.sh)"
        : >"$out/gloo-$run.txt"
    fi

    perftest "$run"
    c2c "$run"
done

say "comparison ($nranks ranks; the target is for sizes >= 1 MiB)"
"$python" - "$out" "$repeat" <<'EOF'
import json, re, statistics, sys

out, repeat = sys.argv[1], int(sys.argv[2])

def results(name, run, bench="coll", impl=None):
    table = {}
    with open(f"{out}/{name}-{run}.txt") as f:
        for line in f:
            start = line.find('{"bench":"' + bench + '"')
            if start >= 0:
                r = json.loads(line[start:])
                if impl is None or r.get("impl") == impl:
                    table[(r["op"], r["bytes"])] = r
    return table

swy_runs = [results("switchyard", k) for k in range(1, repeat + 1)]
mpi_runs = [results("openmpi", k) for k in range(1, repeat + 1)]
gloo_runs = [results("gloo", k) for k in range(1, repeat + 1)]
have_gloo = any(gloo_runs)

# ucx_perftest's result line (with -f, without the "Final:" word): iters,
# overhead p50 / average / overall, bandwidth average / overall (MB/s, MB
# = 2^20 bytes), message rate average / overall.
perf_runs = []
for run in range(1, repeat + 1):
    with open(f"{out}/perftest-{run}.txt") as f:
        for line in f:
            fields = line.replace("Final:", "").split()
            if len(fields) == 8 and all(re.fullmatch(r"[0-9.]+", x)
                                        for x in fields):
                perf_runs.append(float(fields[5]) * 2**20 / 1e9)
perf_GBps = statistics.median(perf_runs) if perf_runs else None
if perf_GBps is None:
    print("ucx_perftest: no bandwidth line (see its output above)")
elif repeat > 1:
    print(f"ucx_perftest tag_bw 16 MiB: {perf_GBps:.3f} GB/s (median of "
          f"{len(perf_runs)} runs: "
          + " ".join(f"{x:.3f}" for x in perf_runs) + ")")
else:
    print(f"ucx_perftest tag_bw 16 MiB: {perf_GBps:.3f} GB/s")
c2c_runs = []
for run in range(1, repeat + 1):
    with open(f"{out}/c2c-{run}.txt") as f:
        c2c_runs.append([json.loads(line)["round_trip_ns_median"]
                         for line in f if line.startswith('{"bench":"c2c"')])
if any(c2c_runs):
    print("core-to-core round trip (swy-bench c2c), before/after each run, "
          "ns: " + "  ".join("/".join(f"{x:.0f}" for x in r) or "-"
                             for r in c2c_runs))
if repeat > 1:
    print(f"times: median over {repeat} alternating runs of each run's "
          "median; range: the per-run ratios")

def size_name(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)

def median_of(runs, key, field):
    values = [run[key][field] for run in runs if key in run]
    return statistics.median(values) if values else None

print(f"{'op':<10} {'size':>6} {'swy med(us)':>12} {'mpi med(us)':>12} "
      f"{'mpi/swy':>8} {'range':>11} {'swy busbw':>10} {'mpi busbw':>10} "
      f"{'swy %perf':>10}"
      + (f" {'gloo med(us)':>13} {'gloo/swy':>9} {'range':>11}"
         if have_gloo else ""))
keys = sorted({k for run in swy_runs for k in run},
              key=lambda k: (k[0] != "alltoallv", k[1]))
for key in keys:
    op, nbytes = key
    swy_t = median_of(swy_runs, key, "time_us_median")
    mpi_t = median_of(mpi_runs, key, "time_us_median")
    swy_bw = median_of(swy_runs, key, "busbw_GBps")
    mpi_bw = median_of(mpi_runs, key, "busbw_GBps")
    ratios = [m[key]["time_us_median"] / s[key]["time_us_median"]
              for s, m in zip(swy_runs, mpi_runs) if key in s and key in m]
    line = f"{op:<10} {size_name(nbytes):>6} {swy_t:>12.1f} "
    if mpi_t is not None:
        line += (f"{mpi_t:>12.1f} {mpi_t / swy_t:>7.2f}x "
                 f"{min(ratios):>5.2f}-{max(ratios):<5.2f}")
    else:
        line += f"{'-':>12} {'-':>8} {'-':>11}"
    line += f" {swy_bw:>10.3f} "
    line += f"{mpi_bw:>10.3f} " if mpi_bw is not None else f"{'-':>10} "
    if op == "allreduce" and perf_GBps:
        line += f"{100.0 * swy_bw / perf_GBps:>9.0f}%"
    else:
        line += f"{'':>10}"
    gloo_t = median_of(gloo_runs, key, "time_us_median")
    if have_gloo and gloo_t is not None:
        gratios = [g[key]["time_us_median"] / s[key]["time_us_median"]
                   for s, g in zip(swy_runs, gloo_runs)
                   if key in s and key in g]
        line += (f" {gloo_t:>13.1f} {gloo_t / swy_t:>8.2f}x "
                 f"{min(gratios):>5.2f}-{max(gratios):<5.2f}")
    print(line.rstrip())
pair_runs = [results("paired", k, "coll_pair") for k in range(1, repeat + 1)]
pair_swy_runs = [results("paired", k, "coll", "switchyard")
                 for k in range(1, repeat + 1)]
pair_mpi_runs = [results("paired", k, "coll", "openmpi")
                 for k in range(1, repeat + 1)]
if any(pair_runs):
    print()
    print("paired (one job; every iteration runs Open MPI and Switchyard, "
          "in turn first):")
    print("ratio: openmpi / switchyard per iteration, median"
          + (f" over {repeat} runs of each run's median; range: the runs'"
             " medians; quartiles: medians of the runs' quartiles"
             if repeat > 1 else "; quartiles of the iterations"))
    print(f"{'op':<10} {'size':>6} {'swy med(us)':>12} {'mpi med(us)':>12} "
          f"{'ratio':>7} {'range':>11} {'quartiles':>11} {'swy busbw':>10} "
          f"{'swy %perf':>10}")
    for key in sorted({k for run in pair_runs for k in run},
                      key=lambda k: (k[0] != "alltoallv", k[1])):
        op, nbytes = key
        meds = [run[key]["ratio_median"] for run in pair_runs if key in run]
        q1 = statistics.median(run[key]["ratio_q1"] for run in pair_runs
                               if key in run)
        q3 = statistics.median(run[key]["ratio_q3"] for run in pair_runs
                               if key in run)
        swy_bw = median_of(pair_swy_runs, key, "busbw_GBps")
        line = (f"{op:<10} {size_name(nbytes):>6} "
                f"{median_of(pair_swy_runs, key, 'time_us_median'):>12.1f} "
                f"{median_of(pair_mpi_runs, key, 'time_us_median'):>12.1f} "
                f"{statistics.median(meds):>6.2f}x "
                f"{min(meds):>5.2f}-{max(meds):<5.2f} "
                f"{q1:>5.2f}-{q3:<5.2f} {swy_bw:>10.3f} ")
        if op == "allreduce" and perf_GBps:
            line += f"{100.0 * swy_bw / perf_GBps:>9.0f}%"
        print(line.rstrip())
wrong = [(k, r["impl"])
         for run in swy_runs + mpi_runs + gloo_runs + pair_swy_runs
         + pair_mpi_runs
         for k, r in run.items() if r.get("check", "ok") != "ok"]
if wrong:
    print("WRONG results:", wrong)
    sys.exit(1)
EOF
