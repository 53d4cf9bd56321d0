#!/usr/bin/env python3
"""swy-sim checks (suite sim): test_sim.py SWY_SIM CHECK.

CHECK is one of determinism, alltoallv, allreduce, priority,
priority_split, bad_files,
tune (then SWY_TUNE follows: swy-tune --sim on the emulated cluster).
Without swy-sim (SimGrid missing: -Dsimgrid) every check exits 77."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def run(sim, platform, workload, policy, expect_ok=True):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        p = subprocess.run([sim, "--quiet", "--policy", policy, "--json", out,
                            platform, workload],
                           capture_output=True, text=True, timeout=120)
        if not expect_ok:
            return p
        if p.returncode != 0:
            sys.exit(f"swy-sim failed ({p.returncode}): {p.stderr}")
        with open(out) as f:
            return json.load(f)


def op_time(runs, policy, name):
    for r in runs:
        if r["policy"] == policy:
            for op in r["ops"]:
                if op["name"] == name:
                    return op["time_s"]
    sys.exit(f"no op {name} under {policy}")


def within(got, want, tol, what):
    err = abs(got - want) / want
    print(f"{what}: simulated {got * 1e3:.3f} ms, analytic {want * 1e3:.3f} "
          f"ms, {err * 100:.3f}% off")
    if err > tol:
        sys.exit(f"{what}: {err * 100:.2f}% from the analytic time (> "
                 f"{tol * 100:.0f}%)")


def main():
    sim, check = sys.argv[1], sys.argv[2]
    if sim == "" or not os.access(sim, os.X_OK):
        print("swy-sim not built (no SimGrid): skipped")
        return SKIP
    flat4 = os.path.join(HERE, "flat4.txt")
    emu = os.path.join(HERE, "..", "..", "tools", "swy-sim", "platforms",
                       "emulated-2x2.txt")
    interference = os.path.join(HERE, "..", "..", "tools", "swy-sim",
                                "workloads", "interference.txt")
    # flat4: 4 nodes of one rank, uplinks of 1e8 B/s each way, latency
    # 10 us + 1 us a path, no core.
    uplink, lat = 100e6, 11e-6
    if check == "determinism":
        a = run(sim, emu, interference, "fifo,fair,lina")
        b = run(sim, emu, interference, "fifo,fair,lina")
        if a != b:
            sys.exit("two runs of the same files differ")
        print(f"{len(a)} policies, {sum(len(r['ops']) for r in a)} ops: "
              "identical")
    elif check == "alltoallv":
        # Each rank sends 4 MiB to each of 3 others through its uplink.
        got = op_time(run(sim, flat4, os.path.join(HERE, "a2a.txt"), "fifo"),
                      "fifo", "x")
        within(got, 3 * 4 * 2**20 / uplink + lat, 0.02, "alltoallv")
    elif check == "allreduce":
        # Reduce-scatter then allgather: 2 (n - 1) / n of the vector leaves
        # each rank through its uplink.
        got = op_time(run(sim, flat4, os.path.join(HERE, "ar.txt"), "fifo"),
                      "fifo", "x")
        within(got, 2 * 3 / 4 * 16 * 2**20 / uplink + 2 * 3 * lat, 0.02,
               "allreduce")
    elif check in ("priority", "priority_split"):
        # priority_split: the all-to-all on a communicator split from the
        # world, the backlog on the world (swy_sim_comms_split).
        if check == "priority_split":
            interference = interference.replace("interference.txt",
                                                "interference-split.txt")
        runs = run(sim, emu, interference, "fair,lina")
        fair, lina = (op_time(runs, p, "loaded") for p in ("fair", "lina"))
        print(f"all-to-all under the backlog: fair {fair * 1e3:.3f} ms, "
              f"lina {lina * 1e3:.3f} ms")
        if not lina < 0.8 * fair:
            sys.exit("lina's all-to-all is not clearly faster than fair's")
    elif check == "bad_files":
        cases = [
            ("platform", "nodes 2\nranks-per-node 2\nintra-bandwidth 5GB/s\n"
             "uplink-bandwidth 114 MB/s\n", 4, "one value"),
            ("platform", "nodes 2\nranks-per-node two\n", 2, "whole number"),
            ("platform", "nodes 2\nranks-per-node 2\nintra-bandwidth 5GB\n",
             3, "unit 'GB' unknown"),
            ("platform", "# c\nnodes 2\nlinks 3\n", 3, "unknown key"),
            ("workload", "post x alltoallv 1MiB\nwait y\n", 2, "no earlier"),
            ("workload", "post x bcast 1MiB\n", 1, "op kind 'bcast'"),
            ("workload", "\n\npost x allreduce 1MiB prio=3\n", 3,
             "unknown option"),
            ("workload", "compute 5 parsecs\n", 1, "takes one"),
            ("workload", "split a all\npost x allreduce 1MiB comm=b\n", 2,
             "comm 'b' is no earlier line's split"),
        ]
        with tempfile.TemporaryDirectory() as tmp:
            for i, (kind, text, line, words) in enumerate(cases):
                bad = os.path.join(tmp, f"bad{i}.txt")
                with open(bad, "w") as f:
                    f.write(text)
                args = (bad, interference) if kind == "platform" \
                    else (emu, bad)
                p = run(sim, *args, "fifo", expect_ok=False)
                want = f"{bad}:{line}: "
                if p.returncode == 0 or want not in p.stderr or \
                        words not in p.stderr:
                    sys.exit(f"{kind} {text!r}: expected a failure naming "
                             f"{want!r} and {words!r}, got rc "
                             f"{p.returncode}: {p.stderr!r}")
                print(f"{kind} case {i}: {p.stderr.strip()}")
    elif check == "tune":
        tune = sys.argv[3]
        with tempfile.TemporaryDirectory() as tmp:
            conf = os.path.join(tmp, "tuned.conf")
            p = subprocess.run([tune, "--sim", emu, "--policies", "fair,lina",
                                "--partitions", "64K,1M", "--credits", "auto",
                                "--out", conf], capture_output=True,
                               text=True, timeout=120)
            print(p.stdout[-2000:])
            if p.returncode != 0:
                sys.exit(f"swy-tune --sim failed ({p.returncode}): "
                         f"{p.stderr}")
            with open(conf) as f:
                text = f.read()
            # Under the backlog lina's all-to-all at 64 KiB partitions is
            # the fastest of these four, its allreduce above the floor.
            for want in ("SWY_POLICY=lina\n",
                         "SWY_PARTITION_BYTES=65536\n"):
                if want not in text:
                    sys.exit(f"swy-tune --sim chose otherwise: {text}")
    else:
        sys.exit(f"unknown check {check}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
