#!/usr/bin/env bash
# bench-torch.sh: the torch benchmark (docs/measuring.md) on the emulated cluster
# — NODES x RANKS_PER_NODE ranks (2 x 2), a tbf-shaped link between the
# nodes — the training script (plugins/torch/examples/train.py, DDP + MoE) on
# gloo, on switchyard under lina and under fair, REPEAT times alternating,
# then per configuration the median and range over runs of each run's
# median step time, the ratios, and the per-phase profile of the median
# run (--phases: a2a : compute : allreduce, and the CPU floor).
#
#   tools/bench-torch.sh [train.py options...]
#
# e.g. tools/bench-torch.sh --ep 4 --layers 4 --hidden 256 --ffn 512
# Ranks get torchrun's variables from swy-run's (switchyard.launch), one
# intra-op thread each (OMP_NUM_THREADS=1, as torchrun sets), gloo's
# socket on the nodes' eth0. Prints the 1-minute load before each run.
# Needs root (network namespaces); exits 77 without it. Builds nothing.
# Environment: BUILD_DIR (default build), REPEAT (default 3), LINK
# (default 1gbit), STEPS (default 30), CONFIGS (default gloo,lina,fair),
# NODES and RANKS_PER_NODE (default 2 and 2; RANKS_PER_NODE=1 gives every
# rank a core of the 2), OUT_DIR (keep the raw outputs there; default a
# temporary folder).
set -euo pipefail

prog=bench-torch
source "$(dirname "${BASH_SOURCE[0]}")/bench-torch-env.sh"
repeat=${REPEAT:-3}
link=${LINK:-1gbit}
steps=${STEPS:-30}
configs=${CONFIGS:-gloo,lina,fair}
out=${OUT_DIR:-$(mktemp -d)}
[[ -n ${OUT_DIR:-} ]] || trap 'rm -rf "$out"' EXIT
mkdir -p "$out"

for ((i = 1; i <= repeat; i++)); do
    for c in ${configs//,/ }; do
        backend=switchyard policy=$c
        [[ $c == gloo ]] && backend=gloo policy=
        echo "run $i $c: load $(cut -d' ' -f1 /proc/loadavg), $(date -u +%T)"
        SWY_POLICY=$policy "$swy_run" --nodes "$nodes" --ranks-per-node "$rpn" \
            --link "$link" --timeout 900 "$torch_python" "$here/plugins/torch/examples/train.py" \
            --backend "$backend" --steps "$steps" --phases --json "$@" \
            >"$out/$c.$i.log" 2>&1 || { cat "$out/$c.$i.log"; exit 1; }
    done
done

/usr/bin/python3 - "$out" "$configs" "$((nodes * rpn))" "$(getconf _NPROCESSORS_ONLN)" <<'PY'
import glob, json, statistics, sys
out, configs = sys.argv[1], sys.argv[2].split(",")
ranks, cores = int(sys.argv[3]), int(sys.argv[4])
runs = {}
for c in configs:
    for path in sorted(glob.glob(f"{out}/{c}.*.log")):
        line = [l for l in open(path) if l.startswith("[0] {")][-1]
        runs.setdefault(c, []).append(json.loads(line[4:]))
med = {}
for c, rs in runs.items():
    ms = [r["step_ms_median"] for r in rs]
    med[c] = statistics.median(ms)
    mid = sorted(rs, key=lambda r: r["step_ms_median"])[len(rs) // 2]
    p = mid["phases"]
    # The ranks share the machine's cores: no step is shorter than their
    # CPU time over the cores (rank 0's for each of them).
    floor = p["cpu"] * max(1.0, ranks / cores)
    cpu = (f"; rank 0's CPU {p['cpu']:.1f} ms per step, CPU floor "
           f"{floor:.1f} ms ({ranks} ranks on {cores} cores)")
    if p["a2a_fwd_n"]:
        prof = (f"a2a : compute : allreduce = {p['a2a']:.1f} : "
                f"{p['compute']:.1f} : {p['allreduce']:.1f} ms, a2a per "
                f"backward exchange {p['a2a_bwd'] / p['a2a_bwd_n']:.2f} ms,"
                f" per forward one (routes too) "
                f"{p['a2a_fwd'] / p['a2a_fwd_n']:.2f} ms")
    else:  # the exchanges over torch's all_to_all_single are not timed
        prof = (f"compute with a2a : allreduce = {p['compute']:.1f} : "
                f"{p['allreduce']:.1f} ms")
    print(f"{c:5s} ms/step per run {', '.join(f'{x:.1f}' for x in ms)}; "
          f"median {med[c]:.1f}, range {min(ms):.1f}-{max(ms):.1f}; loss "
          f"{mid['losses'][0]:.6f} -> {mid['losses'][-1]:.6f}; median run: "
          + prof + cpu)
for a, b in (("lina", "fair"), ("lina", "gloo"), ("fair", "gloo")):
    if a in med and b in med:
        print(f"{a} over {b}: {med[b] / med[a]:.2f}x")
PY
