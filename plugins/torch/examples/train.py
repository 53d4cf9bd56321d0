"""Train a small MoE transformer with torch.distributed.

    python3 plugins/torch/examples/train.py --backend switchyard|gloo [--nproc N] ...

A framework's view of Switchyard: a transformer whose feed-forward blocks
are switchyard.torch.MoE layers, the replicated parameters wrapped in the
stock DistributedDataParallel, the expert-parallel groups (--ep ranks each)
and the experts' data-parallel groups made with new_group as framework
code makes them. With --backend gloo the same model runs on gloo (the MoE
exchanges over torch's all_to_all_single): same seed, same loss curve.

The task is synthetic: next-token prediction on sequences of a fixed
affine recurrence modulo the vocabulary. The model and every global batch
depend on --seed only, not on the number of ranks. Prints progress, a
summary, and with --json one JSON line; --phases adds a per-phase profile
(where the step's time goes: compute, the MoE all-to-alls, DDP's
allreduce buckets). --nproc N starts N local ranks; without it the rank
comes from torchrun's or swy-run's variables (switchyard.launch).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import switchyard.torch as swy
from switchyard import launch
from switchyard import moe as swy_moe


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python3 plugins/torch/examples/train.py",
                                description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["switchyard", "gloo"],
                   default="switchyard")
    p.add_argument("--nproc", type=int, default=0,
                   help="start this many local ranks (default: torchrun's)")
    p.add_argument("--ep", type=int, default=0,
                   help="ranks per expert-parallel group (default: all)")
    p.add_argument("--ep-layout", choices=["block", "stride"],
                   default="block",
                   help="block: groups of consecutive ranks (DeepSpeed's; "
                   "on a node when its ranks are consecutive); stride: "
                   "every (ranks / ep)-th rank, across the nodes, as "
                   "swy-train --ep")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16,
                   help="sequences per step, all ranks together")
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--ffn", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--experts", type=int, default=4,
                   help="experts per MoE layer in all")
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--capacity", type=float, default=0.0,
                   help="capacity factor (0: no limit; a limit makes the "
                   "loss depend on the number of ranks)")
    p.add_argument("--gate", choices=["gshard", "ta"], default="gshard")
    p.add_argument("--aux", type=float, default=0.01,
                   help="weight of the balance loss")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bucket-mb", type=float, default=25.0,
                   help="DDP's bucket_cap_mb (its default: 25)")
    p.add_argument("--first-bucket-mb", type=float, default=1.0,
                   help="DDP's first bucket (the last parameters; its "
                   "default: 1)")
    p.add_argument("--phases", action="store_true",
                   help="profile each step's phases (rank 0 prints them)")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


class Block(torch.nn.Module):
    def __init__(self, args, ep_group):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(args.hidden)
        self.attn = torch.nn.MultiheadAttention(args.hidden, args.heads,
                                                batch_first=True)
        self.ln2 = torch.nn.LayerNorm(args.hidden)
        # The experts' share of the random stream depends on how many a
        # rank holds: keep it from shifting the parameters made after.
        with torch.random.fork_rng():
            self.moe = swy.MoE(args.hidden, args.ffn,
                               experts_per_rank=args.experts // ep_group.size(),
                               top_k=args.top_k,
                               capacity_factor=args.capacity,
                               group=ep_group, gate=args.gate)

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.moe(self.ln2(x))


class Model(torch.nn.Module):
    def __init__(self, args, ep_group):
        super().__init__()
        self.embed = torch.nn.Embedding(args.vocab, args.hidden)
        self.pos = torch.nn.Parameter(torch.randn(args.seq, args.hidden) * 0.1)
        self.blocks = torch.nn.ModuleList(
            Block(args, ep_group) for _ in range(args.layers))
        self.ln = torch.nn.LayerNorm(args.hidden)
        self.head = torch.nn.Linear(args.hidden, args.vocab)
        self.register_buffer("mask", torch.triu(
            torch.full((args.seq, args.seq), float("-inf")), diagonal=1))

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[:tokens.shape[1]]
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln(x))

    def aux_loss(self):
        return sum(b.moe.aux_loss for b in self.blocks) / len(self.blocks)


def init_experts(model, args, ep_rank):
    """Every global expert's weights from (seed, layer, expert) alone, so
    the model does not depend on how the experts are placed."""
    for layer, block in enumerate(model.blocks):
        moe = block.moe
        for local in range(moe.experts_per_rank):
            g = torch.Generator().manual_seed(
                (args.seed * 1000 + layer) * 1000 +
                ep_rank * moe.experts_per_rank + local)
            with torch.no_grad():
                moe.w1[local].copy_(torch.randn(
                    args.hidden, args.ffn, generator=g) /
                    math.sqrt(args.hidden))
                moe.w2[local].copy_(torch.randn(
                    args.ffn, args.hidden, generator=g) /
                    math.sqrt(args.ffn))


def global_batch(args, step):
    """Sequences x[t+1] = (a * x[t] + c) mod vocab, a and c per sequence."""
    g = torch.Generator().manual_seed(args.seed * 100003 + step)
    start = torch.randint(0, args.vocab, (args.batch, 1), generator=g)
    a = torch.randint(1, 4, (args.batch, 1), generator=g)
    c = torch.randint(0, args.vocab, (args.batch, 1), generator=g)
    seq = [start]
    for _ in range(args.seq):
        seq.append((a * seq[-1] + c) % args.vocab)
    return torch.cat(seq, dim=1)


def make_groups(args, rank, world):
    """Expert-parallel groups of --ep ranks, consecutive ranks (block) or
    every (world / ep)-th rank (stride); the ranks with the same place in
    their groups hold the same experts and form an expert data-parallel
    group. Every rank takes part in making every group, as new_group
    requires. Returns the two groups and this rank's place in its
    expert-parallel group."""
    ep = args.ep or world
    if world % ep or args.experts % ep:
        raise SystemExit(f"--ep {ep} must divide the {world} ranks and the "
                         f"{args.experts} experts")
    groups = world // ep
    if args.ep_layout == "block":
        ep_ranks = [list(range(g * ep, (g + 1) * ep)) for g in range(groups)]
    else:
        ep_ranks = [list(range(g, world, groups)) for g in range(groups)]
    ep_group = expert_dp_group = None
    for ranks in ep_ranks:
        g = dist.new_group(ranks, backend=args.backend)
        if rank in ranks:
            ep_group, ep_rank = g, ranks.index(rank)
    for place in range(ep):
        ranks = [r[place] for r in ep_ranks]
        g = dist.new_group(ranks, backend=args.backend)
        if rank in ranks:
            expert_dp_group = g
    return ep_group, expert_dp_group, ep_rank


A2A_FORWARD = ("route", "dispatch", "combine")
A2A_BACKWARD = ("combine_backward", "dispatch_backward")


def union_length(intervals):
    """Length of the union of (begin, end) intervals."""
    total, reach = 0.0, None
    for begin, end in sorted(intervals):
        if reach is None or begin > reach:
            total += end - begin
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


class Phases:
    """Where a step's time goes (--phases), in ms: forward and backward,
    the MoE exchanges inside each (time the main thread spent in them,
    from switchyard.moe's counters; switchyard groups only), DDP's
    buckets (timed by a comm hook that does what DDP's default does:
    divide by the world, allreduce) and the expert gradients' allreduce.
    "ar_wait" is how long backward went on after DDP's last bucket was
    posted, i.e. after the last gradient was computed: the allreduce
    that compute did not hide. "cpu" is the CPU time of the whole
    process (every thread: torch's, the backend's progress) in the step:
    where ranks share cores, a step cannot be shorter than the ranks'
    CPU time over the cores, whatever the communication does."""

    def __init__(self, world):
        self.world = world
        self.steps = []
        self.buckets = []  # (posted, done, bytes) of the current step

    def hook(self, state, bucket):
        buf = bucket.buffer()
        buf.div_(self.world)
        posted = time.perf_counter()
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f):
            self.buckets.append((posted, time.perf_counter(),
                                 buf.numel() * buf.element_size()))
            return f.value()[0]
        return fut.then(done)

    @staticmethod
    def exchanges(kinds):
        return (sum(swy_moe.exchange_seconds[k] for k in kinds) * 1e3,
                sum(swy_moe.exchange_calls[k] for k in kinds))

    def begin(self):
        swy_moe.exchange_seconds.clear()
        swy_moe.exchange_calls.clear()
        self.buckets = []
        self.cpu_start = time.process_time()

    def end(self, t):
        """t: perf_counter at start, after forward, after backward, after
        the expert allreduce, after the optimizer."""
        ms = [(b - a) * 1e3 for a, b in zip(t, t[1:])]
        a2a_f, n_f = self.exchanges(A2A_FORWARD)
        a2a_b, n_b = self.exchanges(A2A_BACKWARD)
        posts = [p for p, _, _ in self.buckets]
        self.steps.append({
            "step": (t[-1] - t[0]) * 1e3, "forward": ms[0],
            "cpu": (time.process_time() - self.cpu_start) * 1e3,
            "backward": ms[1], "expert_ar": ms[2], "optimizer": ms[3],
            "a2a_fwd": a2a_f, "a2a_fwd_n": n_f,
            "a2a_bwd": a2a_b, "a2a_bwd_n": n_b,
            "buckets": len(self.buckets),
            "bucket_mb": sum(n for _, _, n in self.buckets) / 2**20,
            "first_post": (min(posts) - t[1]) * 1e3 if posts else 0.0,
            "last_post": (max(posts) - t[1]) * 1e3 if posts else 0.0,
            "ar_wait": (t[2] - max(posts)) * 1e3 if posts else 0.0,
            "ar_busy": union_length([(p, d) for p, d, _ in self.buckets])
            * 1e3})

    def summary(self, warmup):
        rows = self.steps[warmup:] or self.steps
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        med["a2a"] = med["a2a_fwd"] + med["a2a_bwd"]
        med["allreduce"] = med["ar_busy"] + med["expert_ar"]
        med["compute"] = max(0.0, med["step"] - med["a2a"] - med["ar_wait"]
                             - med["expert_ar"])
        return med, len(rows)

    def print(self, warmup):
        m, n = self.summary(warmup)

        def per(total, count):
            return total / count if count else 0.0
        print(f"# phases (rank 0, median of {n} steps, ms): step "
              f"{m['step']:.2f} = forward {m['forward']:.2f} (a2a "
              f"{m['a2a_fwd']:.2f} in {m['a2a_fwd_n']:.0f} exchanges, "
              f"{per(m['a2a_fwd'], m['a2a_fwd_n']):.2f} each) + backward "
              f"{m['backward']:.2f} (a2a {m['a2a_bwd']:.2f} in "
              f"{m['a2a_bwd_n']:.0f}, {per(m['a2a_bwd'], m['a2a_bwd_n']):.2f}"
              f" each; after the last bucket {m['ar_wait']:.2f}) + expert "
              f"allreduce {m['expert_ar']:.2f} + optimizer "
              f"{m['optimizer']:.2f}", flush=True)
        print(f"# DDP: {m['buckets']:.0f} buckets of {m['bucket_mb']:.2f} MiB"
              f" in all, posted {m['first_post']:.2f} to "
              f"{m['last_post']:.2f} ms into backward, allreduce busy "
              f"{m['ar_busy']:.2f} ms; a2a : compute : allreduce = "
              f"{m['a2a']:.1f} : {m['compute']:.1f} : {m['allreduce']:.1f}"
              f"; CPU {m['cpu']:.1f} ms per step", flush=True)


def train(args, rank, world):
    ep_group, expert_dp_group, ep_rank = make_groups(args, rank, world)
    torch.manual_seed(args.seed)  # the replicated parameters, alike
    model = Model(args, ep_group)
    init_experts(model, args, ep_rank)
    expert_names = [n for n, _ in model.named_parameters()
                    if n.endswith(".moe.w1") or n.endswith(".moe.w2")]
    DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        model, expert_names)
    # DDP reads its first bucket's size from this global (as its comments
    # invite users to set it).
    first_bucket = dist._DEFAULT_FIRST_BUCKET_BYTES
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.first_bucket_mb * 2**20)
    try:
        ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    finally:
        dist._DEFAULT_FIRST_BUCKET_BYTES = first_bucket
    phases = Phases(world) if args.phases else None
    if phases:
        ddp.register_comm_hook(None, phases.hook)
    experts = [p for n, p in model.named_parameters() if n in expert_names]
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must divide over {world} "
                         "ranks")
    share = args.batch // world
    if rank == 0:
        print(f"# train.py  backend: {args.backend}  ranks: {world}"
              f"  ep: {ep_group.size()} ({args.ep_layout})  experts: "
              f"{args.experts}  top-k: {args.top_k}  gate: {args.gate}  "
              f"policy: {os.environ.get('SWY_POLICY', 'default')}",
              flush=True)
    losses, step_ms = [], []
    for step in range(args.steps):
        batch = global_batch(args, step)[rank * share:(rank + 1) * share]
        if phases:
            phases.begin()
        start = time.perf_counter()
        logits = ddp(batch[:, :-1])
        task = F.cross_entropy(logits.reshape(-1, args.vocab),
                               batch[:, 1:].reshape(-1))
        loss = task + args.aux * model.aux_loss()
        optimizer.zero_grad()
        marks = [start, time.perf_counter()]
        loss.backward()
        marks.append(time.perf_counter())
        # Expert gradients hold the contributions of the expert-parallel
        # group's ranks; the other replicas of the same experts add theirs,
        # and the global loss is the mean over all ranks (as DDP's).
        for p in experts:
            if expert_dp_group.size() > 1:
                dist.all_reduce(p.grad, group=expert_dp_group)
            p.grad /= world
        marks.append(time.perf_counter())
        optimizer.step()
        marks.append(time.perf_counter())
        step_ms.append((marks[-1] - start) * 1e3)
        if phases:
            phases.end(marks)
        mean_task = task.detach().clone()
        dist.all_reduce(mean_task)
        losses.append(mean_task.item() / world)
        if rank == 0:
            print(f"step {step + 1:4d}/{args.steps}  loss {losses[-1]:.6f}"
                  f"  step {step_ms[-1]:8.2f} ms", flush=True)
    if rank == 0:
        mean_ms = sum(step_ms) / len(step_ms) if step_ms else 0.0
        print(f"# summary: {args.steps} steps, loss {losses[0]:.6f} -> "
              f"{losses[-1]:.6f}, {mean_ms:.2f} ms/step mean "
              f"({args.backend}, {world} ranks)", flush=True)
        warmup = min(3, args.steps // 4)
        if phases:
            phases.print(warmup)
        if args.json:
            out = {"backend": args.backend, "ranks": world,
                   "ep": ep_group.size(), "ep_layout": args.ep_layout,
                   "steps": args.steps,
                   "policy": os.environ.get("SWY_POLICY", "default"),
                   "losses": losses, "step_ms_mean": mean_ms,
                   "step_ms_median": statistics.median(step_ms[warmup:])}
            if phases:
                out["phases"] = phases.summary(warmup)[0]
            print(json.dumps(out), flush=True)


def main(argv=None):
    return launch.run("train.py", parse_args(argv), train)


if __name__ == "__main__":
    sys.exit(main())
