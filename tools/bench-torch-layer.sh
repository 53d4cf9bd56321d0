#!/usr/bin/env bash
# bench-torch-layer.sh: a framework's own MoE layer (fairscale's MOELayer,
# with DDP over the dense parameters; plugins/torch/examples/
# bench_moe_layer.py) on the emulated cluster — NODES x RANKS_PER_NODE
# ranks (2 x 2), a tbf-shaped link between the nodes — on gloo and on
# switchyard under lina and fair, REPEAT times alternating; then per
# configuration the median and range over runs of each run's median step,
# the CPU floor (rank 0's CPU per step times the ranks over the cores: the
# shortest step the cores allow), the ratios to gloo, and the compute-only
# step of the same shape (--ep 1 --no-sync on switchyard), from which the
# communication share of gloo's step follows.
#
#   tools/bench-torch-layer.sh [bench_moe_layer.py options...]
#
# Needs root (network namespaces); exits 77 without it. Builds nothing.
# Environment: BUILD_DIR (default build), REPEAT (default 3), LINK
# (default 1gbit), CONFIGS (default gloo,lina,fair,compute), NODES and
# RANKS_PER_NODE (default 2 and 2).
set -euo pipefail

prog=bench-torch-layer
source "$(dirname "${BASH_SOURCE[0]}")/bench-torch-env.sh"
repeat=${REPEAT:-3}
link=${LINK:-1gbit}
configs=${CONFIGS:-gloo,lina,fair,compute}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "bench-torch-layer: $(git -C "$here" rev-parse --short HEAD)," \
     "nproc $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)," \
     "${nodes} x ${rpn} at $link, options: $*"

for ((i = 1; i <= repeat; i++)); do
    for c in ${configs//,/ }; do
        backend=switchyard policy=$c extra=()
        [[ $c == gloo ]] && backend=gloo policy=
        [[ $c == compute ]] && policy=lina extra=(--ep 1 --no-sync)
        echo "run $i $c: load $(cut -d' ' -f1 /proc/loadavg), $(date -u +%T)"
        SWY_POLICY=$policy "$swy_run" --nodes "$nodes" --ranks-per-node "$rpn" \
            --link "$link" --timeout 900 "$torch_python" \
            "$here/plugins/torch/examples/bench_moe_layer.py" \
            --backend "$backend" "$@" "${extra[@]}" \
            >"$out/$c.$i.log" 2>&1 || { cat "$out/$c.$i.log"; exit 1; }
    done
done

/usr/bin/python3 - "$out" "$configs" "$((nodes * rpn))" "$(getconf _NPROCESSORS_ONLN)" <<'PY'
import glob, json, statistics, sys
out, configs = sys.argv[1], sys.argv[2].split(",")
ranks, cores = int(sys.argv[3]), int(sys.argv[4])
med, runs = {}, {}
for c in configs:
    for path in sorted(glob.glob(f"{out}/{c}.*.log")):
        line = [l for l in open(path) if '"bench": "moe_layer"' in l][-1]
        runs.setdefault(c, []).append(json.loads(line[line.index("{"):]))
# The ranks share the machine's cores: no step is shorter than their CPU
# time over the cores (rank 0's for each of them).
print("\nconfig   median step ms  [range of run medians]  CPU floor ms"
      "  final loss")
for c, rs in runs.items():
    ms = [r["step_ms_median"] for r in rs]
    med[c] = statistics.median(ms)
    floor = statistics.median(r["cpu_ms_per_step"] for r in rs) * ranks / cores
    print(f"{c:8} {med[c]:10.1f}      [{min(ms):.1f}-{max(ms):.1f}]"
          f"          {floor:8.1f}     {rs[-1]['final_loss']:.6f}")
if "gloo" in med:
    for c in med:
        if c not in ("gloo", "compute"):
            per = [g["step_ms_median"] / r["step_ms_median"]
                   for g, r in zip(runs["gloo"], runs[c])]
            print(f"gloo / {c}: {med['gloo'] / med[c]:.2f}x (per run "
                  + ", ".join(f"{x:.2f}" for x in per) + ")")
    if "compute" in med:
        share = 1 - med["compute"] / med["gloo"]
        print(f"compute-only step {med['compute']:.1f} ms: communication is "
              f"{100 * share:.0f}% of gloo's step (communication : compute = "
              f"{med['gloo'] - med['compute']:.0f} : {med['compute']:.0f} ms)")
if "lina" in med and "fair" in med:
    print(f"fair / lina: {med['fair'] / med['lina']:.2f}x")
losses = {round(r["final_loss"], 5) for c in ("gloo", "lina", "fair")
          for r in runs.get(c, [])}
print("same final loss on every backend and policy:", len(losses) == 1)
PY
