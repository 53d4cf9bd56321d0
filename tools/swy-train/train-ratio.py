#!/usr/bin/env python3
"""Step-time ratios from bench-train.sh's JSON lines (stdin or files).

The train benchmark's summary (docs/measuring.md): per configuration, each
repetition's median step time (swy-train's "step_ms_median"), their
median and range, the median all-to-all, compute, allreduce span and the
next forward's wait for the allreduce; then each configuration's ratio
against the first one (its median over the first's median, > 1: the
first is faster), with the ratio of every repetition, and whether every
run ended on the same loss (the same model, seed and data give the same
curve under every policy). docs/performance.md, "train", has the runs.

    tools/swy-train/bench-train.sh "--policy lina" "--policy fair" -- ... \\
        | tools/swy-train/train-ratio.py
"""
import statistics
import sys

from bench_lines import json_lines

PHASES = (("a2a", "a2a_ms_median"), ("compute", "compute_ms_median"),
          ("allreduce", "allreduce_ms_median"),
          ("ar wait", "allreduce_wait_ms_median"))


def read_runs(paths):
    runs, configs = {}, []
    for j in json_lines(paths):
        config = j.get("config", j.get("policy", "?"))
        if config not in configs:
            configs.append(config)
        runs[(config, j.get("rep", 1))] = j
    return runs, configs


def main():
    runs, configs = read_runs(sys.argv[1:])
    if not runs:
        sys.exit("train-ratio: no swy-train --json lines")
    step = {c: {r: j["step_ms_median"] for (cc, r), j in runs.items()
                if cc == c} for c in configs}
    med = {c: statistics.median(step[c].values()) for c in configs}
    print("config | step ms median [min-max] | per repetition | "
          + " : ".join(name for name, _ in PHASES) + " (medians)")
    for c in configs:
        s = step[c]
        phases = " : ".join(
            "%.1f" % statistics.median(runs[(c, r)][key] for r in s)
            for _, key in PHASES)
        print("%s | %.1f [%.1f-%.1f] | %s | %s" % (
            c, med[c], min(s.values()), max(s.values()),
            " / ".join("%.1f" % s[r] for r in sorted(s)), phases))
    base = configs[0]
    for c in configs[1:]:
        both = sorted(set(step[c]) & set(step[base]))
        per = [step[c][r] / step[base][r] for r in both]
        text = (" [%.2f-%.2f], per repetition %s" % (
            min(per), max(per), " ".join("%.2f" % x for x in per))
            if per else "")
        print("%s / %s: %.2fx%s" % (c, base, med[c] / med[base], text))
    losses = {j["loss_last"] for j in runs.values()}
    print("loss: %s" % ("identical in every run (%.6f)" % losses.pop()
                        if len(losses) == 1 else
                        "DIFFERS: " + ", ".join("%.6f" % x
                                                for x in sorted(losses))))


if __name__ == "__main__":
    main()
