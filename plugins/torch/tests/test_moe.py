#!/usr/bin/python3
"""switchyard.torch.MoE against a single-process PyTorch reference.

    test_moe.py [--world-size N]

N ranks (fork) build the same model from one seed, each keeping its
experts; each runs its shard of one global batch through the layer and
back. A single-process reference (plain PyTorch: the full gate and every
expert, the same capacity rule written as a loop) runs the whole batch.
Checked: the outputs, the gradients of the input, of every rank's experts
and of the gate (summed over ranks), the balance loss, capacity drops,
the TA gate's construction, the same checks with the layer on a gloo
group (its exchanges then go over torch's all_to_all_single) and in
float64; gradcheck in float64 at its default tolerances of the exchanges
and of the whole layer (on one rank, every parameter; on N ranks, the
input and the gate), and the library on one rank against N ranks on the
same global batch. Exits 77 when torch or the switchyard package cannot
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
                          experts).to(x.dtype)
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


def check_against_reference(rank, world, capacity_factor, group=None,
                            dtype=torch.float32):
    gate_w, w1, w2, x, grad_out = (t.to(dtype)
                                   for t in full_model(world, seed=7))
    layer = swy.MoE(HIDDEN, FFN, experts_per_rank=EXPERTS_PER_RANK,
                    top_k=TOP_K, capacity_factor=capacity_factor,
                    group=group).to(dtype)
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

    # float64: only the order of additions differs from the reference.
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else \
        dict(rtol=1e-11, atol=1e-13)

    def close(a, b, what):
        assert a.dtype == b.dtype == dtype, (what, a.dtype, b.dtype)
        assert a.shape == b.shape and torch.allclose(a, b, **tol), \
            f"{what} (capacity {capacity_factor}, {dtype}):\n{a}\n{b}"

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


def case_double_against_reference(rank, world):
    # float64 rows through the library: the reference to double precision.
    check_against_reference(rank, world, capacity_factor=0,
                            dtype=torch.float64)
    check_against_reference(rank, world, capacity_factor=0.5,
                            dtype=torch.float64)


def own_groups(world):
    """A one-rank "switchyard" group per rank (made collectively); this
    rank's. gradcheck runs the op once per input and output element, and
    where those counts differ across ranks, each rank needs its own."""
    groups = [dist.new_group([r], backend="switchyard") for r in range(world)]
    return groups[dist.get_rank()]


def quiet_gradcheck(fn, inputs):
    """torch.autograd.gradcheck at its default tolerances (eps 1e-6, atol
    1e-5, rtol 1e-3), which need float64."""
    import warnings
    from torch.autograd import gradcheck
    assert all(t.dtype == torch.float64 for t in inputs)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Input #", UserWarning)
        return gradcheck(fn, inputs)


def case_gradcheck_exchanges(rank, world):
    # The exchanges' backward against finite differences, in float64 (the
    # library moves float64 rows and weights and sums them in double).
    from switchyard.moe import _Combine, _Dispatch
    layer = swy.MoE(4, 4, experts_per_rank=3, top_k=2, capacity_factor=0,
                    group=own_groups(world)).double()
    route = layer._plan_for(torch.float64).route(
        torch.tensor([[0, 2], [1, -1], [2, 1]]))
    assert route.recv_rows == 5, route.recv_rows  # one slot dropped
    torch.manual_seed(rank)
    tokens = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    expert_out = torch.randn(route.recv_rows, 4, dtype=torch.float64,
                             requires_grad=True)
    topk_w = torch.rand(3, 2, dtype=torch.float64, requires_grad=True)
    assert quiet_gradcheck(lambda t: _Dispatch.apply(t, route), (tokens,))
    assert quiet_gradcheck(lambda o, w: _Combine.apply(o, w, route),
                           (expert_out, topk_w))
    # A float32 tensor on a float64 route is refused, naming the dtypes.
    try:
        _Dispatch.apply(tokens.detach().float(), route)
    except RuntimeError as e:
        assert "Double" in str(e) and "Float" in str(e), e
    else:
        raise AssertionError("float32 rows on a float64 plan were accepted")


def layer_function(layer, names):
    """The layer's (output, balance loss) as a function of the parameters
    `names` (the input first)."""
    from torch.nn.utils.stateless import functional_call

    def fn(x, *params):
        out = functional_call(layer, dict(zip(names, params)), (x,))
        return out, layer.aux_loss
    return fn


def case_gradcheck_layer(rank, world):
    # The whole layer (gate, top-k, capacity, dispatch, experts, combine,
    # balance loss) on this rank's own group, every parameter checked;
    # with drops (capacity 0.5) and without. Small sizes: gradcheck runs
    # the layer twice per element.
    for capacity in (0, 0.5):
        torch.manual_seed(100 + rank)
        layer = swy.MoE(4, 3, experts_per_rank=3, top_k=2,
                        capacity_factor=capacity,
                        group=own_groups(world)).double()
        x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
        with torch.no_grad():
            idx = layer.gate(x).topk(2, dim=-1).indices
            drops = int((capacity_mask(idx, 3, capacity) == -1).sum())
        assert (drops > 0) == (capacity > 0), (capacity, drops)
        names = ["gate.weight", "w1", "w2"]
        params = [getattr(layer.gate, "weight") if n == "gate.weight" else
                  getattr(layer, n) for n in names]
        params = [p.detach().clone().requires_grad_() for p in params]
        assert quiet_gradcheck(layer_function(layer, names), (x, *params))


def case_gradcheck_layer_ranks(rank, world):
    # The layer on all ranks: the same number of tokens everywhere, so every
    # rank makes the same calls. Checked: the input and the gate copy, on
    # which only this rank's outputs depend. Not the experts: their
    # gradient sums over every rank's outputs, which a per-rank finite
    # difference cannot see (case_*_against_reference checks it).
    for capacity in (0, 0.5):
        torch.manual_seed(200)  # the same gate and experts on every rank
        layer = swy.MoE(4, 3, experts_per_rank=2, top_k=2,
                        capacity_factor=capacity).double()
        torch.manual_seed(300 + rank)
        x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
        gate = layer.gate.weight.detach().clone().requires_grad_()
        assert quiet_gradcheck(layer_function(layer, ["gate.weight"]),
                               (x, gate))


def case_one_rank_vs_ranks(rank, world):
    # The same global batch through the library on one rank (every expert
    # there) and on all ranks, in float64: the same outputs and gradients.
    gate_w, w1, w2, x, grad_out = (t.double()
                                   for t in full_model(world, seed=11))
    mine = slice(rank * EXPERTS_PER_RANK, (rank + 1) * EXPERTS_PER_RANK)
    tokens = slice(rank * TOKENS_PER_RANK, (rank + 1) * TOKENS_PER_RANK)
    solo_group = own_groups(world)
    results = []
    for group, per_rank, experts, batch in (
            (solo_group, world * EXPERTS_PER_RANK, slice(None), slice(None)),
            (None, EXPERTS_PER_RANK, mine, tokens)):
        layer = swy.MoE(HIDDEN, FFN, experts_per_rank=per_rank, top_k=TOP_K,
                        capacity_factor=0, group=group).double()
        with torch.no_grad():
            layer.gate.weight.copy_(gate_w)
            layer.w1.copy_(w1[experts])
            layer.w2.copy_(w2[experts])
        xs = x[batch].clone().requires_grad_()
        out = layer(xs)
        (out * grad_out[batch]).sum().backward()
        results.append((out.detach(), xs.grad, layer.w1.grad, layer.w2.grad,
                        layer.gate.weight.grad.clone()))
    solo, ranks = results
    dist.all_reduce(ranks[4])  # data parallel: the ranks' parts sum up
    pairs = [(ranks[0], solo[0][tokens], "output"),
             (ranks[1], solo[1][tokens], "input gradient"),
             (ranks[2], solo[2][mine], "w1 gradient"),
             (ranks[3], solo[3][mine], "w2 gradient"),
             (ranks[4], solo[4], "gate gradient")]
    for got, ref, what in pairs:
        assert got.dtype == torch.float64 and torch.allclose(
            got, ref, rtol=1e-12, atol=1e-14), f"{what}:\n{got}\n{ref}"


CASES = [case_no_capacity, case_capacity_drops, case_torch_exchange_on_gloo,
         case_errors_and_ta, case_double_against_reference,
         case_gradcheck_exchanges, case_gradcheck_layer,
         case_gradcheck_layer_ranks, case_one_rank_vs_ranks]


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
