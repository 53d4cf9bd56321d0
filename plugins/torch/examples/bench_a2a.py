"""The MoE all-to-all under a DDP allreduce backlog, as a PyTorch program
sees it, on any torch.distributed backend:

    python3 plugins/torch/examples/bench_a2a.py --backend switchyard|gloo [--json]

Each repetition times `all_to_all_single` alone (from post to completion,
the slowest rank), then posts an `all_reduce` of the backlog (what DDP's
buckets put on the links during backward) without waiting, lets it run
--delay-ms, and times the same `all_to_all_single` under it; then waits
for the backlog. Reports the medians, min and max, and slowdown = loaded /
alone. On switchyard the library's defaults order them (all-to-all high,
allreduce low); SWY_POLICY picks the policy (fair shares the links, lina
holds the backlog to its credit while the all-to-all is in flight).
Ranks come from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (torchrun, or
`swy-run` with a wrapper: docs/performance.md, "torch"), or --nproc N
starts N local ranks.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

from switchyard import launch


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 plugins/torch/examples/bench_a2a.py",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["switchyard", "gloo"],
                   default="switchyard")
    p.add_argument("--nproc", type=int, default=0,
                   help="start N local ranks (default: from RANK, ...)")
    p.add_argument("--a2a-bytes", type=int, default=2 << 20,
                   help="bytes each rank sends in all (split evenly)")
    p.add_argument("--backlog-bytes", type=int, default=16 << 20,
                   help="the allreduce backlog's bytes")
    p.add_argument("--delay-ms", type=float, default=5.0,
                   help="the backlog alone on the links before the a2a")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.reps < 1 or args.warmup < 0 or args.delay_ms < 0:
        p.error("--reps must be >= 1, --warmup and --delay-ms >= 0")
    if args.a2a_bytes < 4 or args.backlog_bytes < 4:
        p.error("--a2a-bytes and --backlog-bytes must be at least 4")
    return args


def slowest(seconds):
    """The slowest rank's time."""
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def bench(args, rank, world):
    per_peer = max(1, args.a2a_bytes // 4 // world)
    send = torch.full((per_peer * world,), float(rank))
    recv = torch.empty_like(send)
    backlog = torch.ones(max(1, args.backlog_bytes // 4))
    expect = torch.arange(world, dtype=torch.float32).repeat_interleave(
        per_peer)
    alone, loaded = [], []
    for rep in range(args.warmup + args.reps):
        dist.barrier()
        start = time.perf_counter()
        dist.all_to_all_single(recv, send)
        t_alone = slowest(time.perf_counter() - start)
        if not torch.equal(recv, expect):
            raise SystemExit(f"rank {rank}: all_to_all_single gave wrong "
                             "data (alone)")
        dist.barrier()
        work = dist.all_reduce(backlog, async_op=True)
        time.sleep(args.delay_ms / 1e3)
        start = time.perf_counter()
        dist.all_to_all_single(recv, send)
        t_loaded = slowest(time.perf_counter() - start)
        still_running = not work.is_completed()
        work.wait()
        if not torch.equal(recv, expect):
            raise SystemExit(f"rank {rank}: all_to_all_single gave wrong "
                             "data (loaded)")
        backlog.fill_(1.0)
        if rep >= args.warmup:
            alone.append(t_alone * 1e3)
            loaded.append(t_loaded * 1e3)
    if rank == 0:
        a, lo = statistics.median(alone), statistics.median(loaded)
        policy = os.environ.get("SWY_POLICY", "default") \
            if args.backend == "switchyard" else "-"
        print(f"# bench_a2a  backend: {args.backend}  policy: {policy}  "
              f"ranks: {world}  a2a: {args.a2a_bytes} B  backlog: "
              f"{args.backlog_bytes} B  delay: {args.delay_ms} ms  reps: "
              f"{args.reps}")
        print(f"a2a alone {a:.2f} ms [{min(alone):.2f}-{max(alone):.2f}]  "
              f"loaded {lo:.2f} ms [{min(loaded):.2f}-{max(loaded):.2f}]  "
              f"slowdown {lo / a:.2f}x  (backlog still running at the last "
              f"a2a's end: {still_running})", flush=True)
        if args.json:
            print(json.dumps({
                "bench": "torch_a2a", "backend": args.backend,
                "policy": policy, "ranks": world,
                "a2a_bytes": args.a2a_bytes,
                "backlog_bytes": args.backlog_bytes,
                "delay_ms": args.delay_ms, "reps": args.reps,
                "a2a_alone_ms": a, "a2a_loaded_ms": lo,
                "a2a_alone_min_ms": min(alone),
                "a2a_alone_max_ms": max(alone),
                "a2a_loaded_min_ms": min(loaded),
                "a2a_loaded_max_ms": max(loaded),
                "slowdown": lo / a}), flush=True)


def main(argv=None):
    args = parse_args(argv)
    if args.backend == "switchyard":
        import switchyard.torch  # noqa: F401  (registers the backend)
    return launch.run("bench_a2a.py", args, bench)


if __name__ == "__main__":
    sys.exit(main())
