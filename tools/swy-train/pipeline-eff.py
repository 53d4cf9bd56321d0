#!/usr/bin/env python3
"""Pipelining efficiency from bench-train.sh's JSON lines (stdin or files).

For each packing p and each repetition, T_comm = the MoE segment at
pipeline degree 1 minus its expert compute; for each degree d > 1,
eff(d) = (T_comm + T_comp(d) - T_layer(d)) / min(T_comm, T_comp(d)),
with T_layer the MoE segment and T_comp its expert compute (medians over
steps, as swy-train reports them). 0% is no overlap, 100% hides the
shorter of the two completely; negative means pipelining made it slower.
Prints one row per (p, d): medians over repetitions and each repetition's
eff. docs/performance.md, "pipeline", has the runs.

    tools/swy-train/bench-train.sh ... | tools/swy-train/pipeline-eff.py
"""
import statistics
import sys

from bench_lines import json_lines


def main():
    runs = {}
    for j in json_lines(sys.argv[1:]):
        runs[(j["packing"], j["pipeline"], j.get("rep", 1))] = j
    if not runs:
        sys.exit("pipeline-eff: no swy-train --json lines")
    packings = sorted({k[0] for k in runs})
    print("p  d  step_ms  T_comm  T_layer  T_comp  eff(d)  per repetition")
    for p in packings:
        reps = sorted({k[2] for k in runs if k[0] == p})
        degrees = sorted({k[1] for k in runs if k[0] == p and k[1] > 1})
        for d in degrees:
            effs, rows = [], []
            for r in reps:
                one, dd = runs.get((p, 1, r)), runs.get((p, d, r))
                if one is None or dd is None:
                    continue
                t_comm = one["moe_segment_ms_median"] - one["expert_ms_median"]
                t_layer = dd["moe_segment_ms_median"]
                t_comp = dd["expert_ms_median"]
                shorter = min(t_comm, t_comp)
                eff = (t_comm + t_comp - t_layer) / shorter if shorter > 0 else 0
                effs.append(eff)
                rows.append((dd["step_ms_median"], t_comm, t_layer, t_comp))
            if not effs:
                continue
            med = [statistics.median(x) for x in zip(*rows)]
            print(f"{p}  {d}  {med[0]:7.1f}  {med[1]:6.1f}  {med[2]:7.1f}  "
                  f"{med[3]:6.1f}  {100 * statistics.median(effs):5.0f}%  "
                  + ", ".join(f"{100 * e:.0f}%" for e in effs))


if __name__ == "__main__":
    main()
