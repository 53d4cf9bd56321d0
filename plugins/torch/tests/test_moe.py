#!/usr/bin/python3
"""switchyard.torch.MoE against a single-process PyTorch reference.

    test_moe.py [--world-size N]

N ranks (fork) build the same model from one seed, each keeping its
experts; each runs its shard of one global batch through the layer and
back. A single-process reference (plain PyTorch: the full gate and every
expert, the same capacity rule written as a loop) runs the whole batch.
Checked: the outputs, the gradients of the input, of every rank's experts
and of the gate (summed over ranks), the balance loss, capacity drops,
the TA gate's construction, gradcheck of the exchanges, and the same
checks with the layer on a gloo group (its exchanges then go over torch's
all_to_all_single). Exits 77 when torch or the switchyard package cannot
be imported.
"""
import argparse
import math
import multiprocessing
import os
import sys
import tempfile
import time
import traceback

try:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import switchyard.torch as swy
    from switchyard.moe import capacity_mask
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

HIDDEN, FFN, EXPERTS_PER_RANK, TOP_K, TOKENS_PER_RANK = 8, 12, 2, 2, 6
RANK_TIMEOUT_S = 120


def reference(x, gate_w, w1, w2, world, capacity_factor):
    """The layer on one process, token by token: returns the output and the
    balance loss, differentiable in every argument."""
    experts = w1.shape[0]
    probs = F.softmax(x @ gate_w.t(), dim=-1)
    topk_w, topk_idx = probs.topk(TOP_K, dim=-1)
    shard = len(x) // world
    rows = []
    for r in range(world):
        # Capacity per expert and rank, first choices first (GShard).
        count = [0] * experts
        cap = math.ceil(capacity_factor * shard * TOP_K / experts) \
            if capacity_factor > 0 else None
        kept = {}
        for s in range(TOP_K):
            for t in range(r * shard, (r + 1) * shard):
                e = int(topk_idx[t, s])
                kept[t, s] = cap is None or count[e] < cap
                count[e] += 1
        for t in range(r * shard, (r + 1) * shard):
            row = torch.zeros(x.shape[1], dtype=x.dtype)
            for s in range(TOP_K):
                if kept[t, s]:
                    e = int(topk_idx[t, s])
                    row = row + topk_w[t, s] * (F.gelu(x[t] @ w1[e]) @ w2[e])
            rows.append(row)
    out = torch.stack(rows)
    aux = []
    for r in range(world):
        p = probs[r * shard:(r + 1) * shard]
        first = F.one_hot(topk_idx[r * shard:(r + 1) * shard, 0],
                          experts).float()
        aux.append(experts * (first.mean(0) * p.mean(0)).sum())
    return out, aux


def full_model(world, seed):
    torch.manual_seed(seed)
    experts = world * EXPERTS_PER_RANK
    gate_w = torch.randn(experts, HIDDEN) * 0.5
    w1 = torch.randn(experts, HIDDEN, FFN) / math.sqrt(HIDDEN)
    w2 = torch.randn(experts, FFN, HIDDEN) / math.sqrt(FFN)
    x = torch.randn(world * TOKENS_PER_RANK, HIDDEN)
    grad_out = torch.randn(world * TOKENS_PER_RANK, HIDDEN)
    return gate_w, w1, w2, x, grad_out


def check_against_reference(rank, world, capacity_factor, group=None):
    gate_w, w1, w2, x, grad_out = full_model(world, seed=7)
    layer = swy.MoE(HIDDEN, FFN, experts_per_rank=EXPERTS_PER_RANK,
                    top_k=TOP_K, capacity_factor=capacity_factor,
                    group=group)
    mine = slice(rank * EXPERTS_PER_RANK, (rank + 1) * EXPERTS_PER_RANK)
    tokens = slice(rank * TOKENS_PER_RANK, (rank + 1) * TOKENS_PER_RANK)
    with torch.no_grad():
        layer.gate.weight.copy_(gate_w)
        layer.w1.copy_(w1[mine])
        layer.w2.copy_(w2[mine])
    if capacity_factor > 0:
        with torch.no_grad():
            chosen = layer.gate(x[tokens]).topk(TOP_K, dim=-1).indices
        dropped = capacity_mask(chosen, world * EXPERTS_PER_RANK,
                                capacity_factor)
        assert (dropped == -1).any(), "no slot was dropped: a weak test"
    xs = x[tokens].clone().requires_grad_()
    out = layer(xs)
    (out * grad_out[tokens]).sum().backward()

    ref_params = [t.clone().requires_grad_() for t in (x, gate_w, w1, w2)]
    ref_out, ref_aux = reference(*ref_params, world, capacity_factor)
    (ref_out * grad_out).sum().backward()
    rx, rgate, rw1, rw2 = ref_params

    def close(a, b, what):
        assert a.shape == b.shape and torch.allclose(a, b, rtol=1e-4,
                                                     atol=1e-5), \
            f"{what} (capacity {capacity_factor}):\n{a}\n{b}"

    close(out.detach(), ref_out[tokens].detach(), "output")
    close(xs.grad, rx.grad[tokens], "input gradient")
    close(layer.w1.grad, rw1.grad[mine], "w1 gradient")
    close(layer.w2.grad, rw2.grad[mine], "w2 gradient")
    gate_grad = layer.gate.weight.grad.clone()
    dist.all_reduce(gate_grad)  # data parallel: the ranks' parts sum up
    close(gate_grad, rgate.grad, "gate gradient (summed over ranks)")
    close(layer.aux_loss.detach(), ref_aux[rank].detach(), "balance loss")


def case_no_capacity(rank, world):
    check_against_reference(rank, world, capacity_factor=0)


def case_capacity_drops(rank, world):
    # 0.5 leaves room for half the slots: some are dropped on every rank.
    check_against_reference(rank, world, capacity_factor=0.5)


def case_torch_exchange_on_gloo(rank, world):
    # The same layer on a gloo group runs its exchanges over torch's
    # all_to_all_single: the training script's oracle.
    gloo = dist.new_group(backend="gloo")
    check_against_reference(rank, world, capacity_factor=0, group=gloo)
    check_against_reference(rank, world, capacity_factor=0.5, group=gloo)


def case_errors_and_ta(rank, world):
    layer = swy.MoE(HIDDEN, FFN, experts_per_rank=1, top_k=1,
                    capacity_factor=0, gate="ta")
    w = layer.balance_weight
    assert w.shape == (world,) and bool(torch.isfinite(w).all()) and \
        bool((w > 0).all()), w
    out = layer(torch.randn(0, HIDDEN))  # no tokens on this rank
    assert out.shape == (0, HIDDEN)
    try:
        layer._plan.route(torch.full((2, 1), world, dtype=torch.int32))
    except RuntimeError as e:
        assert "swy_moe_route" in str(e), e
    else:
        raise AssertionError("an expert id out of range was accepted")
    try:
        swy.MoE(HIDDEN, FFN, group=dist.new_group(backend="gloo"), gate="ta")
    except TypeError as e:
        assert "switchyard" in str(e), e
    else:
        raise AssertionError("gate 'ta' on a gloo group was accepted")


def case_gradcheck_exchanges(rank, world):
    # The exchanges' backward against finite differences. gradcheck runs
    # the op once per input and output element, and those counts differ
    # across ranks: so on a one-rank group of each rank's own. In float32:
    # moe.h moves float32, float16 or bfloat16 rows, not float64; the ops
    # are linear in each input, so the differences are exact but for
    # rounding.
    from torch.autograd import gradcheck
    from switchyard.moe import _Combine, _Dispatch
    groups = [dist.new_group([r], backend="switchyard") for r in range(world)]
    layer = swy.MoE(4, 4, experts_per_rank=3, top_k=2, capacity_factor=0,
                    group=groups[rank])
    route = layer._plan.route(torch.tensor([[0, 2], [1, -1], [2, 1]]))
    torch.manual_seed(rank)
    tokens = torch.randn(3, 4, requires_grad=True)
    expert_out = torch.randn(route.recv_rows, 4, requires_grad=True)
    topk_w = torch.rand(3, 2, requires_grad=True)
    tolerance = dict(eps=1e-2, atol=1e-3, rtol=1e-3)
    import warnings
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Input #", UserWarning)
        assert gradcheck(lambda t: _Dispatch.apply(t, route), (tokens,),
                         **tolerance)
        assert gradcheck(lambda o, w: _Combine.apply(o, w, route),
                         (expert_out, topk_w), **tolerance)
    assert route.recv_rows == 5, route.recv_rows  # one slot dropped


CASES = [case_no_capacity, case_capacity_drops, case_torch_exchange_on_gloo,
         case_errors_and_ta, case_gradcheck_exchanges]


def run_rank(rank, world, store):
    dist.init_process_group("switchyard", init_method=f"file://{store}",
                            rank=rank, world_size=world)
    failed = 0
    for fn in CASES:
        try:
            fn(rank, world)
            print(f"rank {rank}: ok {fn.__name__}", flush=True)
        except Exception:
            failed += 1
            traceback.print_exc()
            print(f"rank {rank}: FAIL {fn.__name__}", flush=True)
    dist.destroy_process_group()
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    world = parser.parse_args().world_size
    os.environ.setdefault("SWY_TIMEOUT_S", "30")
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="swy-moe-") as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=lambda r=r: sys.exit(
            run_rank(r, world, store))) for r in range(world)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + RANK_TIMEOUT_S
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    codes = [p.exitcode for p in procs]
    print(f"MoE at {world} ranks: exit codes {codes}"
          + (f", ranks {hung} hung" if hung else ""))
    return 0 if codes == [0] * world and not hung else 1


if __name__ == "__main__":
    sys.exit(main())
