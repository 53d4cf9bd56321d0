#!/usr/bin/env python3
"""The switchyard backend on CUDA tensors (suite gpu).

    test_cuda.py [--world-size N]

N ranks (fork; rank r on GPU r % the GPU count) join a "switchyard"
group and a gloo group. Each op runs on CUDA tensors on a side stream
whose earlier kernel writes the input (so only stream order makes the
result right), and the result, read after Work.wait() on that stream, is
compared with gloo's on the same data on the CPU. Exits 77 without torch,
the package, a CUDA build of the backend or a GPU.
"""
import argparse
import multiprocessing
import os
import sys
import tempfile
import traceback

try:
    import torch
    import torch.distributed as dist
    import switchyard.torch as swy
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

if not swy._C.HAS_CUDA:
    print("skipped: the backend was built without torch's CUDA headers")
    sys.exit(77)
if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)


def rank_data(rank, shape, salt):
    g = torch.Generator().manual_seed(1000 * salt + rank)
    return torch.randn(shape, generator=g, dtype=torch.float64).float()


def on_side_stream(cpu, device, stream):
    """cpu's values on the GPU, written by a kernel queued on stream behind
    long ones: an op that does not wait for the stream reads garbage."""
    staged = cpu.to(device)
    torch.cuda.synchronize(device)
    with torch.cuda.stream(stream):
        big = torch.randn(2048, 2048, device=device)
        for _ in range(8):
            big = big @ big
            big = big / big.norm()
        return staged + big[0, 0] * 0


def run_rank(rank, world, store):
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group("switchyard", init_method=f"file://{store}",
                            rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    stream = torch.cuda.Stream(device)
    failed = 0

    def check(name, fn_gpu, fn_cpu):
        nonlocal failed
        try:
            with torch.cuda.stream(stream):
                got = fn_gpu()
            stream.synchronize()
            want = fn_cpu()
            assert torch.equal(got.cpu(), want), f"{name}: {got} vs {want}"
            print(f"rank {rank}: ok {name}", flush=True)
        except Exception:
            failed += 1
            traceback.print_exc()
            print(f"rank {rank}: FAIL {name}", flush=True)

    x = rank_data(rank, (world * 4, 3), salt=1)

    def allreduce_gpu():
        t = on_side_stream(x, device, stream)
        dist.all_reduce(t, async_op=True).wait()
        return t

    def allreduce_cpu():
        t = x.clone()
        dist.all_reduce(t, group=gloo)
        return t
    check("all_reduce", allreduce_gpu, allreduce_cpu)

    def a2a_gpu():
        t = on_side_stream(x, device, stream)
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t, async_op=True).wait()
        return out

    def a2a_cpu():
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=gloo)
        return out
    check("all_to_all_single", a2a_gpu, a2a_cpu)

    def gather_gpu():
        t = on_side_stream(x, device, stream)
        out = torch.empty(world * t.shape[0], 3, device=device)
        dist.all_gather_into_tensor(out, t, async_op=True).wait()
        return out

    def gather_cpu():
        return torch.cat([rank_data(r, (world * 4, 3), salt=1)
                          for r in range(world)])
    check("all_gather_into_tensor", gather_gpu, gather_cpu)

    def noncontig_gpu():
        t = on_side_stream(x, device, stream).t()
        dist.all_reduce(t, async_op=True).wait()
        return t

    def noncontig_cpu():
        return allreduce_cpu().t()
    check("all_reduce non-contiguous", noncontig_gpu, noncontig_cpu)
    dist.destroy_process_group()
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="swy-cuda-") as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_entry, args=(r, args.world_size, store))
                 for r in range(args.world_size)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(300)
        hung = [p for p in procs if p.is_alive()]
        for p in hung:
            p.kill()
        codes = [p.exitcode for p in procs]
    print(f"exit codes {codes}")
    return 0 if codes == [0] * args.world_size and not hung else 1


def _entry(rank, world, store):
    sys.exit(run_rank(rank, world, store))


if __name__ == "__main__":
    sys.exit(main())
