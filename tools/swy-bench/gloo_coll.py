#!/usr/bin/env python3
"""The coll benchmark's PyTorch gloo peer (docs/measuring.md: what an ML user
would pick without GPUs): torch.distributed's all_to_all_single and
all_reduce on CPU tensors, timed exactly as swy-bench coll and
swy-bench-mpi time theirs (tools/swy-bench/coll_run.c): the same sizes,
data and check, a barrier before each iteration, each iteration timed on
every rank and the slowest rank's time counted, median/min/max over the
iterations (about 0.2 s per size, at least 5), and the same table and
--json lines (impl "gloo").

Run it under swy-run with the project venv's python (tools/venv.sh; any
python with torch does):

    swy-run -n 4 ~/.cache/switchyard/venv/bin/python \
        tools/swy-bench/gloo_coll.py [--json] ...

It takes rank and size from SWY_RANK/SWY_WORLD_SIZE (swy-run) or
RANK/WORLD_SIZE, and meets the other ranks at SWY_ROOT (host:port, a free
port that swy-run picked) or MASTER_ADDR:MASTER_PORT. Nothing of
Switchyard runs in it. Exits 77 where this python has no torch with
gloo, 1 if a result is wrong.
"""
import argparse
import datetime
import json
import math
import os
import platform
import socket
import sys
import time

# Without torch or gloo: the exit status meson reads as "skipped".
SKIP = 77
TARGET_S = 0.2
MIN_ITERS = 5
MAX_ITERS = 100000


def size_parse(text):
    units = {"K": 10, "M": 20, "G": 30}
    shift = units.get(text[-1:].upper(), 0)
    digits = text[:-1] if shift else text
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"bad size '{text}'")
    return int(digits) << shift


def size_format(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def positive(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"needs an integer >= {minimum}, not '{text}'")
        return value
    return parse


def options():
    p = argparse.ArgumentParser(
        description="alltoallv (all_to_all_single: size = bytes each rank "
        "sends in total, split evenly over all ranks including itself) and "
        "allreduce (all_reduce: size = bytes of the buffer, float32 sum) "
        "over gloo, timed as swy-bench coll times Switchyard.")
    p.add_argument("--op", choices=["alltoallv", "allreduce", "all"],
                   default="all")
    p.add_argument("--min-size", type=size_parse, default=4 << 10)
    p.add_argument("--max-size", type=size_parse, default=64 << 20)
    p.add_argument("--factor", type=positive(2), default=4)
    p.add_argument("--iters", type=positive(1), default=0,
                   help="timed iterations per size (default: about 0.2 s "
                   "per size, at least 5)")
    p.add_argument("--warmup", type=positive(0), default=2)
    p.add_argument("--batch", type=positive(1), default=1,
                   help="ops per iteration, back to back")
    p.add_argument("--json", action="store_true")
    # For tools/bench-coll.sh, which passes the same options to every
    # peer: gloo has no allocation of its own, so ordinary tensors either
    # way.
    p.add_argument("--mem", choices=["malloc", "shared"], default="malloc")
    opts = p.parse_args()
    if opts.min_size == 0 or opts.min_size > opts.max_size:
        p.error("need 0 < --min-size <= --max-size")
    return opts


def env_first(*names):
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def init(dist):
    rank = env_first("SWY_RANK", "RANK")
    size = env_first("SWY_WORLD_SIZE", "WORLD_SIZE")
    root = env_first("SWY_ROOT")
    if root is None and env_first("MASTER_ADDR") and env_first("MASTER_PORT"):
        root = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    if rank is None or size is None or root is None:
        sys.exit("gloo_coll: start it under swy-run (or set RANK, "
                 "WORLD_SIZE, MASTER_ADDR and MASTER_PORT)")
    dist.init_process_group("gloo", init_method=f"tcp://{root}",
                            rank=int(rank), world_size=int(size),
                            timeout=datetime.timedelta(seconds=300))
    return int(rank), int(size)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class Point:
    """One (op, size): buffers, data, timing and check."""

    def __init__(self, torch, dist, op, nbytes, rank, n):
        self.torch, self.dist, self.op = torch, dist, op
        self.rank, self.n = rank, n
        if op == "alltoallv":
            self.count = nbytes // 4 // n  # floats per peer
            floats = self.count * n
        else:
            self.count = nbytes // 4
            floats = self.count
        self.floats = floats
        if self.count == 0:
            return
        i = torch.arange(floats, dtype=torch.int64)
        if op == "alltoallv":
            # What rank src sends rank dst at element k of their block
            # (coll_run.c's a2a_value): (src*31 + dst*7 + k) % 8191.
            dst, k = i // self.count, i % self.count
            self.send = ((rank * 31 + dst * 7 + k) % 8191).float()
            src = i // self.count
            self.want = ((src * 31 + rank * 7 + k) % 8191).float()
        else:
            # allreduce_value: (i*7 + rank*3) % 4093; the sum is exact.
            self.send = ((i * 7 + rank * 3) % 4093).float()
            self.want = sum(((i * 7 + r * 3) % 4093) for r in range(n)).float()
        self.recv = torch.zeros(floats, dtype=torch.float32)

    def once(self):
        if self.op == "alltoallv":
            self.dist.all_to_all_single(self.recv, self.send)
        else:
            # all_reduce works in place: the copy is part of an
            # out-of-place allreduce, as MPI_Allreduce and swy_allreduce
            # take separate buffers.
            self.recv.copy_(self.send)
            self.dist.all_reduce(self.recv)

    def timed(self, batch):
        self.dist.barrier()
        start = time.perf_counter()
        for _ in range(batch):
            self.once()
        return (time.perf_counter() - start) / batch

    def slowest(self, values):
        t = self.torch.tensor(values, dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.tolist()

    def measure(self, opts):
        elapsed = 0.0
        for _ in range(opts.warmup):
            elapsed = self.timed(opts.batch)
        iters = opts.iters
        if iters == 0:
            if opts.warmup == 0:
                elapsed = self.timed(opts.batch)
            elapsed = self.slowest([elapsed])[0] * opts.batch
            iters = MIN_ITERS
            if elapsed > 0 and TARGET_S / elapsed > MIN_ITERS:
                iters = min(int(math.ceil(TARGET_S / elapsed)), MAX_ITERS)
        times = []
        for it in range(iters):
            if it == iters - 1:
                self.recv.fill_(float("nan"))
            times.append(self.timed(opts.batch))
        wrong = int((self.recv != self.want).sum())
        if wrong:
            print(f"rank {self.rank}: {self.op} of {self.floats} floats: "
                  f"{wrong} elements wrong", file=sys.stderr)
        slowest = self.slowest(times + [1.0 if wrong else 0.0])
        times, correct = sorted(slowest[:-1]), slowest[-1] == 0.0
        m = len(times)
        median = (times[m // 2] if m % 2 else
                  0.5 * (times[m // 2 - 1] + times[m // 2]))
        nbytes = self.floats * 4
        algbw = nbytes / median / 1e9 if median > 0 else 0.0
        factor = ((self.n - 1) / self.n if self.op == "alltoallv"
                  else 2 * (self.n - 1) / self.n)
        return {"bench": "coll", "impl": "gloo", "op": self.op,
                "bytes": nbytes, "ranks": self.n, "iters": iters,
                "batch": opts.batch,
                "time_us_median": round(median * 1e6, 3),
                "time_us_min": round(times[0] * 1e6, 3),
                "time_us_max": round(times[-1] * 1e6, 3),
                "algbw_GBps": round(algbw, 4),
                "busbw_GBps": round(algbw * factor, 4),
                "check": "ok" if correct else "WRONG"}


def main():
    opts = options()
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print(f"gloo_coll: no torch for {sys.executable} (tools/venv.sh "
              "makes the project venv; run with its bin/python)",
              file=sys.stderr)
        sys.exit(SKIP)
    if not dist.is_gloo_available():
        print("gloo_coll: this torch has no gloo backend", file=sys.stderr)
        sys.exit(SKIP)
    torch.set_num_threads(1)  # one core per rank, as the other benchmarks
    rank, n = init(dist)
    if rank == 0:
        print("# bench: coll  impl: gloo")
        print("# command: " + " ".join([sys.executable] + sys.argv))
        print(f"# torch: {torch.__version__}  date: "
              + datetime.datetime.now(datetime.timezone.utc)
              .strftime("%Y-%m-%dT%H:%M:%SZ"))
        print(f"# machine: {socket.gethostname()}  nproc: "
              f"{os.cpu_count()}  cpu: {cpu_model()}")
        print(f"# ranks: {n}")
        print("# time: per iteration, the slowest rank's; bandwidth in "
              "GB/s (1e9 B/s) from the median time")
        print(f"{'op':<10} {'size':>8} {'iters':>6} {'median(us)':>12} "
              f"{'min(us)':>12} {'max(us)':>12} {'algbw':>9} {'busbw':>9} "
              f"{'check':>6}", flush=True)
    ops = ["alltoallv", "allreduce"] if opts.op == "all" else [opts.op]
    results, failed = [], False
    for op in ops:
        nbytes = opts.min_size
        while nbytes <= opts.max_size:
            point = Point(torch, dist, op, nbytes, rank, n)
            if point.count > 0:
                r = point.measure(opts)
                results.append(r)
                failed |= r["check"] != "ok"
                if rank == 0:
                    print(f"{op:<10} {size_format(r['bytes']):>8} "
                          f"{r['iters']:>6} {r['time_us_median']:>12.1f} "
                          f"{r['time_us_min']:>12.1f} "
                          f"{r['time_us_max']:>12.1f} "
                          f"{r['algbw_GBps']:>9.3f} {r['busbw_GBps']:>9.3f} "
                          f"{r['check']:>6}", flush=True)
            del point
            nbytes *= opts.factor
    if rank == 0 and opts.json:
        for r in results:
            print(json.dumps(r, separators=(",", ":")))
    dist.destroy_process_group()
    if failed:
        if rank == 0:
            print("coll: some results were WRONG", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
