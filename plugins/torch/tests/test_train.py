#!/usr/bin/python3
"""The training script (python3 -m switchyard.train) on switchyard against
gloo: the same seed must give the same loss curve (within float
tolerance), on 2 ranks and on 4 ranks in two expert-parallel groups; one
rank must start from the same loss as two (the model and the global batch
do not depend on the number of ranks); and the loss must fall. Exits 77
when torch or the switchyard package cannot be imported.
"""
import json
import subprocess
import sys

try:
    import torch  # noqa: F401
    import switchyard.torch  # noqa: F401
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)


def run(*flags):
    cmd = [sys.executable, "-m", "switchyard.train", "--json"] + list(flags)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        print(proc.stdout)
        raise SystemExit(f"FAIL: {' '.join(cmd)} exited {proc.returncode}")
    result = json.loads(lines[-1])
    print(f"{' '.join(flags)}: losses {[round(l, 6) for l in result['losses']]}"
          f", {result['step_ms_mean']:.1f} ms/step")
    return result["losses"]


def close(a, b, rel, what):
    bad = [(i, x, y) for i, (x, y) in enumerate(zip(a, b))
           if abs(x - y) > rel * abs(y)]
    if len(a) != len(b) or bad:
        raise SystemExit(f"FAIL: {what}: steps (step, a, b) differ: {bad}")
    print(f"ok: {what} (within {rel:g})")


def main():
    steps = ["--steps", "8"]
    for ranks in (["--nproc", "2"], ["--nproc", "4", "--ep", "2"]):
        swy = run("--backend", "switchyard", *ranks, *steps)
        gloo = run("--backend", "gloo", *ranks, *steps)
        close(swy, gloo, 1e-5, f"switchyard vs gloo, {' '.join(ranks)}")
    one = run("--backend", "switchyard", "--nproc", "1", *steps)
    two = run("--backend", "switchyard", "--nproc", "2", *steps)
    close(one[:1], two[:1], 1e-6, "first loss, 1 rank vs 2")
    # Later steps differ a little: the balance loss is per rank.
    close(one, two, 1e-3, "loss curve, 1 rank vs 2")
    longer = run("--backend", "switchyard", "--nproc", "2", "--steps", "40")
    if not sum(longer[-5:]) < sum(longer[:5]) - 5 * 0.1:
        raise SystemExit(f"FAIL: the loss did not fall: {longer}")
    print("ok: the loss falls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
