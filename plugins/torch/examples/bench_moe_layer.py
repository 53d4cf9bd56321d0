"""Time a training step of fairscale's own MoE layer (MOELayer, Top2Gate),
unmodified, with DDP over the dense parameters, on a torch.distributed
backend: what a framework user on switchyard gets against gloo.

    swy-run --nodes 2 --ranks-per-node 2 --link 1gbit \\
        python3 plugins/torch/examples/bench_moe_layer.py --backend switchyard

Model per rank: dense Linear(hidden, hidden) layers before and after the
MoE layer, wrapped in the stock DistributedDataParallel over the world
(its gradient allreduce overlaps backward, in buckets); the MoE layer's
experts (local_experts per rank, FFN hidden -> ffn -> hidden) on an
expert-parallel group of --ep ranks; the experts' gradients averaged over
their expert-data-parallel group after backward. --ep-layout stride puts
each expert-parallel group across the nodes (ranks r, r + world/ep, ...),
so its all-to-all crosses the shaped uplink with DDP's allreduce.
--ep 1 --no-sync gives the compute-only step of the same shape (the
all-to-all within one rank, no gradient exchange): the communication :
compute split of a step is measured, not assumed.

Ranks come from swy-run (or torchrun's RANK/WORLD_SIZE). Rank 0 prints one
JSON line: the median step time over --steps after --warmup, its range,
its CPU time per step, and the final loss (identical across backends for
the same seed).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from switchyard import launch


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 plugins/torch/examples/bench_moe_layer.py",
        description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="switchyard")
    p.add_argument("--ep", type=int, default=2,
                   help="ranks per expert-parallel group")
    p.add_argument("--ep-layout", choices=("block", "stride"),
                   default="stride")
    p.add_argument("--local-experts", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--ffn", type=int, default=512)
    p.add_argument("--dense-layers", type=int, default=2,
                   help="Linear(hidden, hidden) layers on each side")
    p.add_argument("--tokens", type=int, default=256,
                   help="tokens per rank and step")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bucket-mb", type=float, default=1.0,
                   help="DDP's bucket_cap_mb")
    p.add_argument("--no-sync", action="store_true",
                   help="no gradient exchange (with --ep 1: compute only)")
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args(argv)


def groups(world, rank, ep, layout):
    """Expert-parallel and expert-data-parallel groups; every rank makes
    every group, as new_group requires."""
    n = world // ep
    if layout == "block":
        ep_sets = [list(range(g * ep, (g + 1) * ep)) for g in range(n)]
    else:
        ep_sets = [list(range(g, world, n)) for g in range(n)]
    edp_sets = [[s[i] for s in ep_sets] for i in range(ep)]
    ep_group = edp_group = None
    for s in ep_sets:
        g = dist.new_group(s)
        if rank in s:
            ep_group = g
    for s in edp_sets:
        g = dist.new_group(s)
        if rank in s:
            edp_group = g
    return ep_group, edp_group


class Model(torch.nn.Module):
    """Dense layers, fairscale's MoE layer (with a residual), dense layers."""

    def __init__(self, before, moe, after):
        super().__init__()
        self.before, self.moe, self.after = before, moe, after

    def forward(self, x):
        z = self.before(x)
        return self.after(self.moe(z) + z)


def main(argv=None):
    args = parse_args(argv)
    launch.from_swy_run(os.environ)
    if args.backend == "switchyard":
        import switchyard.torch  # noqa: F401  (registers the backend)
    from fairscale.nn.moe import MOELayer, Top2Gate
    torch.set_num_threads(1)
    dist.init_process_group(args.backend, init_method="env://",
                            timeout=launch.rendezvous_timeout(os.environ))
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % args.ep:
        raise SystemExit("the world must be a multiple of --ep")
    ep_group, edp_group = groups(world, rank, args.ep, args.ep_layout)

    torch.manual_seed(args.seed)
    h = args.hidden

    def dense():
        return torch.nn.Sequential(*[torch.nn.Linear(h, h)
                                     for _ in range(args.dense_layers)])
    before, after = dense(), dense()
    gate = Top2Gate(h, args.ep * args.local_experts)
    torch.manual_seed(args.seed + 1 + rank)  # experts differ per rank
    experts = torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(h, args.ffn), torch.nn.GELU(),
                            torch.nn.Linear(args.ffn, h))
        for _ in range(args.local_experts))
    moe = MOELayer(gate, experts, group=ep_group)
    model = Model(before, moe, after)
    if args.no_sync:
        net = model
    else:
        # DDP over the dense parameters only (its broadcast makes them
        # equal on every rank); the experts are each rank's own.
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
            model, [f"moe.experts.{n}" for n, _ in experts.named_parameters()])
        net = DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(args.seed + 100 + rank)
    target = torch.randn(h, h, generator=torch.Generator().manual_seed(7))
    edp_size = dist.get_world_size(edp_group)
    # MOELayer takes (groups, tokens, model): one group per local expert.
    shape = (args.local_experts, args.tokens // args.local_experts, h)

    times, cpu, loss = [], [], None
    for step in range(args.warmup + args.steps):
        x = torch.randn(shape, generator=gen)
        y = torch.tanh(x @ target)
        start, cpu_start = time.perf_counter(), time.process_time()
        opt.zero_grad()
        out = net(x)
        loss = torch.nn.functional.mse_loss(out, y) + 0.01 * moe.l_aux
        loss.backward()
        if not args.no_sync:
            for p in experts.parameters():
                dist.all_reduce(p.grad, group=edp_group)
                p.grad /= edp_size
        opt.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - cpu_start)
    dist.barrier()
    if rank == 0:
        print(json.dumps({
            "bench": "moe_layer", "framework": "fairscale",
            "backend": args.backend,
            "policy": os.environ.get("SWY_POLICY", "lina")
            if args.backend == "switchyard" else None,
            "world": world, "ep": args.ep, "ep_layout": args.ep_layout,
            "hidden": h, "ffn": args.ffn, "tokens": args.tokens,
            "local_experts": args.local_experts, "no_sync": args.no_sync,
            "step_ms_median": 1e3 * statistics.median(times),
            "step_ms_min": 1e3 * min(times), "step_ms_max": 1e3 * max(times),
            # This process's CPU per step (all its threads): with every rank
            # alike, ranks x this / cores is the shortest step the cores
            # allow.
            "cpu_ms_per_step": 1e3 * statistics.median(cpu),
            "final_loss": loss.item()}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
