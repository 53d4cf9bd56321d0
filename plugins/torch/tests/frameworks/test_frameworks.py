"""A framework's own MoE layer, unmodified, trained on backend
"switchyard" and on "gloo" (the oracle) from the same seed: every rank's
loss at every step must agree within float tolerance (the all-to-alls move
the same bytes; the gradient allreduces may sum in another order).

    python test_frameworks.py --framework deepspeed|fairscale [args of
        moe_frameworks.py]

Exits 77 when the python running it lacks the framework.
"""
import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = {"deepspeed": "deepspeed", "fairscale": "fairscale",
          "megatron": "megatron.core"}


def run(framework, backend, extra):
    cmd = [sys.executable, os.path.join(HERE, "moe_frameworks.py"),
           "--framework", framework, "--backend", backend, *extra]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    lines = [ln for ln in proc.stdout.splitlines()
             if ln.startswith('{"framework"')]
    if proc.returncode != 0 or len(lines) != 1:
        sys.exit(f"FAIL: {framework} on {backend} exited {proc.returncode}:"
                 f" {' '.join(cmd)}")
    return json.loads(lines[0])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", choices=sorted(MODULE), required=True)
    p.add_argument("--rtol", type=float, default=1e-4)
    args, extra = p.parse_known_args()
    try:
        found = importlib.util.find_spec(MODULE[args.framework]) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        print(f"SKIP: {sys.executable} has no {args.framework} "
              "(tools/venv.sh installs it)")
        return 77

    results = {b: run(args.framework, b, extra)
               for b in ("gloo", "switchyard")}
    bad = []
    for backend, r in results.items():
        print(f"{args.framework} on {backend}: world {r['world_size']}, "
              f"expert-parallel groups of {r['ep_size']}, expert-data-"
              f"parallel groups of {r['edp_size']}, groups on "
              f"{r['backends']}")
        for rank, losses in enumerate(r["losses"]):
            print(f"  rank {rank}: " + " ".join(f"{x:.6f}" for x in losses))
        if r["backends"] != [backend]:
            bad.append(f"{backend} run used backends {r['backends']}")
        if not all(math.isfinite(x) for ls in r["losses"] for x in ls):
            bad.append(f"{backend} run has a non-finite loss")
    ref, got = results["gloo"]["losses"], results["switchyard"]["losses"]
    worst = 0.0
    for rank, (lr, lg) in enumerate(zip(ref, got)):
        for step, (a, b) in enumerate(zip(lr, lg)):
            err = abs(a - b) / max(abs(a), 1e-12)
            worst = max(worst, err)
            if err > args.rtol:
                bad.append(f"rank {rank} step {step}: switchyard {b!r} vs "
                           f"gloo {a!r} (relative {err:.2e})")
    if len(got) != len(ref) or any(len(a) != len(b)
                                   for a, b in zip(ref, got)):
        bad.append("the runs differ in ranks or steps")
    # A run whose ranks all see the same loss would hide a broken
    # all-to-all: the ranks' tokens differ, so their losses must.
    if len({tuple(ls) for ls in ref}) != len(ref):
        bad.append("gloo's ranks report identical losses")
    print(f"largest relative difference: {worst:.2e} (tolerance "
          f"{args.rtol:.0e})")
    for b in bad:
        print("FAIL:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
