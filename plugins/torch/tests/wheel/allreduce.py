"""Two ranks of an installed `switchyard` package: import the backend, run
an allreduce on it and check the sum against the closed form. Run from
outside the source tree; exits 1 when the package comes from anywhere but
the running python's site-packages."""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, port, prefix):
    import switchyard.torch  # noqa: F401  (registers "switchyard")
    if not os.path.abspath(switchyard.torch.__file__).startswith(prefix):
        raise SystemExit(f"switchyard came from {switchyard.torch.__file__},"
                         f" not from {prefix}")
    dist.init_process_group("switchyard", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world)
    if dist.get_backend() != "switchyard":
        raise SystemExit(f"backend is {dist.get_backend()}")
    t = torch.arange(1000, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(t)
    want = torch.arange(1000, dtype=torch.float32) * (world * (world + 1) / 2)
    if not torch.equal(t, want):
        raise SystemExit(f"rank {rank}: allreduce gave {t[:4].tolist()}..., "
                         f"want {want[:4].tolist()}...")
    dist.destroy_process_group()


def main():
    world = 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    prefix = os.path.realpath(sys.prefix)
    mp.spawn(rank_main, args=(world, port, prefix), nprocs=world)
    print(f"allreduce on {world} ranks of switchyard from {prefix}: ok")


if __name__ == "__main__":
    main()
