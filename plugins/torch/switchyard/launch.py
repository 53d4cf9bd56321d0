"""How the example programs (examples/train.py, examples/bench_a2a.py) get
their ranks: from a launcher's RANK and WORLD_SIZE (torchrun), from
swy-run's SWY_RANK, SWY_WORLD_SIZE and SWY_ROOT (torch's rendezvous then
listens on SWY_ROOT's host at its port + 7), or --nproc N local ranks
forked here that meet through a file store."""
import ctypes
import datetime
import math
import multiprocessing
import os
import sys
import tempfile

import torch.distributed as dist


# torch's TCP store listens here above the port of swy-run's SWY_ROOT
# (where the library's own bootstrap listens).
STORE_PORT_OFFSET = 7


def from_swy_run(env):
    """Under swy-run (SWY_RANK set, RANK not): set torchrun's variables from
    swy-run's, so that init_method "env://" works on every rank."""
    if "RANK" in env or "SWY_RANK" not in env:
        return
    host, port = env["SWY_ROOT"].rsplit(":", 1)
    env["RANK"] = env["SWY_RANK"]
    env["WORLD_SIZE"] = env["SWY_WORLD_SIZE"]
    env.setdefault("LOCAL_RANK", env.get("SWY_LOCAL_RANK", "0"))
    env.setdefault("MASTER_ADDR", host)
    env.setdefault("MASTER_PORT", str(int(port) + STORE_PORT_OFFSET))


def rendezvous_timeout(env):
    """The wait for the other ranks at init: SWY_TIMEOUT_S read as the
    library reads it (default 300 s, a value outside 0.1..1e7 s taken to
    the nearer bound), not torch's 30 minutes, so that a rank whose peer
    never comes (rank 0 could not listen, or died) fails within the
    timeout the library keeps for everything else."""
    try:
        seconds = float(env.get("SWY_TIMEOUT_S", "300"))
    except ValueError:
        seconds = 300.0
    if math.isnan(seconds):
        seconds = 300.0
    return datetime.timedelta(seconds=min(max(seconds, 0.1), 1e7))


# OpenBLAS's x86-64 kernels older than AVX2 (tools/common/blas_core.h,
# which swy-run uses to set OPENBLAS_CORETYPE for its ranks).
PRE_AVX2_CORES = {
    "katmai", "coppermine", "northwood", "prescott", "banias", "atom",
    "core2", "penryn", "dunnington", "nehalem", "athlon", "opteron",
    "opteron_sse3", "barcelona", "nano", "sandybridge", "bobcat",
    "bulldozer", "piledriver", "steamroller"}
AVX512 = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


def blas_advice(env, cpuinfo="/proc/cpuinfo"):
    """The OPENBLAS_CORETYPE this process should have been started with,
    or None: PyTorch on Debian multiplies through the system's OpenBLAS,
    and one older than the CPU runs its SSE kernels there (Debian 12's
    0.3.21 on Intel's Emerald Rapids: a 512 x 256 x 512 matmul ran 4.4x
    slower, 31.9 against 139.4 GFLOP/s on one core)."""
    if "OPENBLAS_CORETYPE" in env:
        return None
    try:
        lib = ctypes.CDLL("libblas.so.3")
        corename = lib.openblas_get_corename
        corename.restype = ctypes.c_char_p
        core = corename().decode()
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except (OSError, AttributeError, UnicodeDecodeError):
        return None
    if core.lower() not in PRE_AVX2_CORES or not {"avx2", "fma"} <= set(
            flags):
        return None
    return "SkylakeX" if AVX512 <= set(flags) else "Haswell"


def run(prog, args, body):
    """Run body(args, rank, world) on every rank inside a process group of
    args.backend; returns the exit status (1 when a local rank failed)."""

    pick = blas_advice(os.environ)
    first = os.environ.get("RANK", os.environ.get("SWY_RANK", "0")) == "0"
    if pick is not None and first:
        print(f"{prog}: OpenBLAS runs SSE kernels on this CPU, which it does "
              f"not know; its {pick} kernels run here several times faster: "
              f"start the ranks with swy-run, or set OPENBLAS_CORETYPE={pick} "
              "for them", file=sys.stderr)

    def one_rank(rank, world, init_method):
        dist.init_process_group(args.backend, init_method=init_method,
                                rank=rank, world_size=world,
                                timeout=rendezvous_timeout(os.environ))
        try:
            body(args, rank, world)
        finally:
            dist.destroy_process_group()

    if args.nproc <= 0:
        from_swy_run(os.environ)
        one_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                 "env://")
        return 0
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="swy-") as tmp:
        init = "file://" + os.path.join(tmp, "store")
        procs = [ctx.Process(target=one_rank, args=(r, args.nproc, init))
                 for r in range(args.nproc)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        print(f"{prog}: ranks {failed} failed", file=sys.stderr)
        return 1
    return 0
