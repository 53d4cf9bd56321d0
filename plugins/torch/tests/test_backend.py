#!/usr/bin/python3
"""The switchyard backend's own tests, with gloo as the oracle.

    test_backend.py [--world-size N] [--only CASE ...]

Starts N ranks (fork) that join a "switchyard" default group and a gloo
group over the same store, run every case, and compare results with
gloo's (bitwise where the reduction order allows: two ranks) or with a
serial reference. Failure cases (mismatches, a killed rank) run on fresh
switchyard groups and must raise on every rank within a bound, and the
group must then be destroyed without a hang. Exits 77 when torch or the
switchyard package cannot be imported.
"""
import argparse
import copy
import datetime
import multiprocessing
import os
import sys
import tempfile
import time
import threading
import traceback
import weakref

try:
    import torch
    import torch.distributed as dist
    import switchyard.torch as swy
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

# Every op must end (or fail) well within this; a hang fails the test.
RANK_TIMEOUT_S = 120
# The library's own bound on silent peers, short so that a lost peer that
# is not noticed by its transport still fails quickly.
os.environ.setdefault("SWY_TIMEOUT_S", "30")

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def expect_error(fn, *words):
    """Calls fn; it must raise an error whose text holds every word."""
    try:
        fn()
    except (RuntimeError, ValueError, TypeError) as e:
        text = str(e)
        missing = [w for w in words if w not in text]
        assert not missing, f"error lacks {missing}: {text}"
        return text
    raise AssertionError(f"no error raised (expected one naming {words})")


def same(a, b, what):
    assert a.dtype == b.dtype and a.shape == b.shape, \
        f"{what}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
    assert torch.equal(a, b), f"{what}: differs from gloo:\n{a}\n{b}"


def reduced_same(a, b, what, world):
    """Bitwise for two ranks or integers; else the order of the additions
    may differ from gloo's."""
    if world == 2 or not (a.dtype.is_floating_point or a.dtype.is_complex):
        same(a, b, what)
    else:
        assert a.shape == b.shape and torch.allclose(a, b), \
            f"{what}: differs from gloo:\n{a}\n{b}"


def rank_data(rank, shape, dtype, salt=0):
    """Deterministic per-rank data that any rank can recompute."""
    g = torch.Generator().manual_seed(1000 * salt + rank)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    hi = 2 if dtype in (torch.int8, torch.uint8) else 100
    return torch.randint(0, hi, shape, generator=g).to(dtype)


# ---------------------------------------------------------------------------
# Cases; each gets (rank, world, gloo group).

REDUCE_DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64,
                 torch.int8, torch.uint8]
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT,
       "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX}


@case
def allreduce_equals_gloo(rank, world, gloo):
    for dtype in REDUCE_DTYPES:
        for name, op in OPS.items():
            mine = rank_data(rank, (5, 7), dtype, salt=1)
            ref = mine.clone()
            dist.all_reduce(mine, op=op)
            dist.all_reduce(ref, op=op, group=gloo)
            reduced_same(mine, ref, f"allreduce {name} {dtype}", world)


@case
def allreduce_half_avg_complex_serial(rank, world, gloo):
    # gloo lacks these; the reference is a serial reduction in float64.
    parts = [rank_data(r, (33,), torch.float64, salt=2) for r in range(world)]
    total = sum(parts)
    for dtype in (torch.float16, torch.bfloat16):
        mine = parts[rank].to(dtype)
        dist.all_reduce(mine)
        ref = sum(p.to(dtype).double() for p in parts)
        assert torch.allclose(mine.double(), ref, rtol=2e-2, atol=2e-2), dtype
    mine = parts[rank].clone()
    dist.all_reduce(mine, op=dist.ReduceOp.AVG)
    assert torch.allclose(mine, total / world), "AVG"
    z = torch.complex(parts[rank], -parts[rank])
    dist.all_reduce(z)
    assert torch.allclose(z, torch.complex(total, -total)), "complex SUM"


@case
def reduce_op_and_dtype_errors(rank, world, gloo):
    t = torch.ones(4, dtype=torch.int32)
    expect_error(lambda: dist.all_reduce(t, op=dist.ReduceOp.BAND),
                 "switchyard", "BAND", "not supported")
    expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool)),
                 "switchyard", "Bool", "cannot be reduced")
    expect_error(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)),
                 "switchyard", "Short", "cannot be reduced")
    # Data movement takes any dtype.
    b = torch.tensor([rank % 2 == 0, True, False]) if rank == 0 else \
        torch.zeros(3, dtype=torch.bool)
    dist.broadcast(b, 0)
    assert b.tolist() == [True, True, False], b


@case
def broadcast_allgather_equal_gloo(rank, world, gloo):
    for root in range(world):
        mine = rank_data(rank, (3, 4), torch.float32, salt=3)
        ref = mine.clone()
        dist.broadcast(mine, root)
        dist.broadcast(ref, root, group=gloo)
        same(mine, ref, f"broadcast root {root}")
    x = rank_data(rank, (2, 5), torch.float64, salt=4)
    outs = [torch.empty_like(x) for _ in range(world)]
    refs = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(outs, x)
    dist.all_gather(refs, x, group=gloo)
    for r in range(world):
        same(outs[r], refs[r], f"all_gather block {r}")
    flat = torch.empty(world * 10, dtype=torch.float64)
    dist._all_gather_base(flat, x)
    same(flat, torch.cat([r.reshape(-1) for r in refs]), "_all_gather_base")


@case
def alltoall_unequal_splits_equal_gloo(rank, world, gloo):
    # Rank r sends (r + j) % 3 rows to rank j: zeros included.
    send_splits = [(rank + j) % 3 for j in range(world)]
    recv_splits = [(j + rank) % 3 for j in range(world)]
    x = rank_data(rank, (sum(send_splits), 3), torch.float32, salt=5)
    out = torch.full((sum(recv_splits), 3), -1.0)
    ref = torch.full((sum(recv_splits), 3), -2.0)
    dist.all_to_all_single(out, x, recv_splits, send_splits)
    dist.all_to_all_single(ref, x, recv_splits, send_splits, group=gloo)
    same(out, ref, "all_to_all_single unequal")
    # Against a serial reference too: block j of rank r's output is rank
    # j's block r.
    expect = []
    for j in range(world):
        peer_splits = [(j + k) % 3 for k in range(world)]
        peer = rank_data(j, (sum(peer_splits), 3), torch.float32, salt=5)
        start = sum(peer_splits[:rank])
        expect.append(peer[start:start + peer_splits[rank]])
    same(out, torch.cat(expect), "all_to_all_single vs serial")
    # Wrong split lists are refused before anything moves.
    expect_error(lambda: dist.all_to_all_single(out, x, recv_splits,
                                                send_splits[:-1]),
                 "switchyard", "input_split_sizes", str(world))


@case
def empty_tensors(rank, world, gloo):
    e = torch.empty(0)
    dist.all_reduce(e)
    dist.broadcast(e, 0)
    outs = [torch.empty(0) for _ in range(world)]
    dist.all_gather(outs, e)
    out = torch.empty(0, 4)
    dist.all_to_all_single(out, torch.empty(0, 4), [0] * world, [0] * world)
    assert out.shape == (0, 4)
    dist.all_reduce_coalesced([torch.empty(0), torch.ones(2)])


@case
def non_contiguous_tensors(rank, world, gloo):
    base = rank_data(rank, (4, 6), torch.float32, salt=6)
    mine = base.clone().t()  # a transposed view
    assert not mine.is_contiguous()
    ref = base.clone().t().contiguous()
    dist.all_reduce(mine)
    dist.all_reduce(ref, group=gloo)
    reduced_same(mine.contiguous(), ref, "allreduce of a transposed tensor",
                 world)
    holder = torch.zeros(4, 6)
    column = holder[:, 2]  # strided
    if rank == 1 % world:
        column.copy_(torch.arange(4.0))
    dist.broadcast(column, 1 % world)
    assert torch.equal(holder[:, 2], torch.arange(4.0)), holder
    assert holder[:, [0, 1, 3, 4, 5]].abs().sum() == 0, "wrote outside"
    big = torch.zeros(world, 3, 2)
    outs = [big[r, :, 0] for r in range(world)]  # strided outputs
    dist.all_gather(outs, torch.full((3,), float(rank)))
    for r in range(world):
        assert torch.equal(big[r, :, 0], torch.full((3,), float(r))), big
    assert big[:, :, 1].abs().sum() == 0


@case
def coalesced_equal_gloo(rank, world, gloo):
    ts = [rank_data(rank, s, torch.float32, salt=7) for s in
          [(3,), (2, 2), (0,), (5,)]]
    refs = [t.clone() for t in ts]
    dist.all_reduce_coalesced(ts)
    dist.all_reduce_coalesced(refs, group=gloo)
    for a, b in zip(ts, refs):
        reduced_same(a, b, "all_reduce_coalesced", world)
    ins = [torch.full((2,), float(rank)), torch.full((1, 3), 10.0 + rank)]
    outs = [[torch.empty_like(t) for t in ins] for _ in range(world)]
    dist.all_gather_coalesced(outs, ins)
    for r in range(world):
        same(outs[r][0], torch.full((2,), float(r)), "all_gather_coalesced")
        same(outs[r][1], torch.full((1, 3), 10.0 + r), "all_gather_coalesced")


@case
def async_futures_complete_without_wait(rank, world, gloo):
    t = torch.full((1000,), float(rank + 1))
    work = dist.all_reduce(t, async_op=True)
    seen = []
    fut = work.get_future().then(lambda f: seen.append(f.value()[0].sum()))
    deadline = time.monotonic() + 30
    while not (fut.done() and work.is_completed()):
        assert time.monotonic() < deadline, "future never completed"
        time.sleep(0.001)
    total = world * (world + 1) / 2 * 1000
    assert seen and seen[0].item() == total, seen
    assert work.is_success()
    work.wait()
    # The barrier does not block its caller: rank 0 posts it while the
    # others are still asleep.
    if rank != 0:
        time.sleep(0.5)
    start = time.monotonic()
    barrier = dist.barrier(async_op=True)
    if rank == 0:
        assert time.monotonic() - start < 0.25, "barrier blocked its caller"
        assert not barrier.is_completed(), "barrier done before the peers"
    barrier.wait()


@case
def ddp_comm_hook_equals_gloo(rank, world, gloo):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4))
    grads = {}
    for name, group in (("switchyard", None), ("gloo", gloo)):
        m = DDP(copy.deepcopy(model), process_group=group)
        m.register_comm_hook(group, default_hooks.allreduce_hook)
        x = rank_data(rank, (5, 8), torch.float32, salt=8)
        m(x).pow(2).sum().backward()
        grads[name] = [p.grad.clone() for p in m.parameters()]
    for a, b in zip(grads["switchyard"], grads["gloo"]):
        reduced_same(a, b, "DDP allreduce_hook gradient", world)


@case
def priority_scopes(rank, world, gloo):
    t = torch.ones(4)
    with swy.priority("high", order=3, name="layer3"):
        with swy.priority(7):
            dist.all_reduce(t)
            dist.all_to_all_single(torch.empty(world), torch.ones(world))
        dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(world * world)))
    # The scope is restored on the way out, an error included.
    assert swy._C._set_priority(False, -1, 0, "") == (False, -1, 0, "")
    # That the scope reaches the library (its name labels the op's
    # error) is checked with the failure cases, at the end.
    expect_error(lambda: swy.priority("urgent").__enter__(), "urgent")
    expect_error(lambda: swy.priority(1001).__enter__(), "1001")
    expect_error(lambda: swy.priority(True).__enter__(), "bool")


@case
def send_recv_ring(rank, world, gloo):
    # Each rank sends rank + 1 rows to the next and receives from the
    # previous, non-blocking on both sides; then ranks 0 and 1 block.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    out = rank_data(rank, (rank + 1, 3), torch.float64, salt=9)
    holder = torch.zeros(3, prv + 1, dtype=torch.float64)
    got = holder.t()  # non-contiguous receive buffer
    works = [dist.isend(out, nxt), dist.irecv(got, prv)]
    for w in works:
        w.wait()
    same(holder.t(), rank_data(prv, (prv + 1, 3), torch.float64, salt=9),
         "irecv into a transposed tensor")
    t = torch.full((5,), float(rank), dtype=torch.int64)
    if rank == 0:
        dist.send(t, 1)
    elif rank == 1:
        assert dist.recv(t, 0) == 0 and torch.equal(t, torch.zeros(5).long())
    # Tags: the ring again, each message tagged with its sender's rank.
    tagged = torch.full((4,), float(rank), dtype=torch.float32)
    got_tagged = torch.zeros(4, dtype=torch.float32)
    works = [dist.isend(tagged, nxt, tag=rank + 7),
             dist.irecv(got_tagged, prv, tag=prv + 7)]
    for w in works:
        w.wait()
    same(got_tagged, torch.full((4,), float(prv), dtype=torch.float32),
         "tagged irecv")
    expect_error(lambda: dist.send(t, nxt, tag=-2), "tag -2", "negative")
    # torch 2.x refuses a send to oneself before the backend sees it; the
    # backend's own check, called directly.
    expect_error(lambda: swy.backend_of().send([t], rank, 0), "peer rank",
                 str(rank))
    # From any source: every other rank sends to rank 0 twice (its rank,
    # then its rank + 100), rank 0 receives them from whoever comes
    # first, blocking and not; each sender's two in its order.
    if rank == 0:
        seen = {}
        for j in range(2 * (world - 1)):
            got_any = torch.full((3,), -1, dtype=torch.int64)
            if j % 2:
                w = dist.irecv(got_any)
                w.wait()
                src = w._source_rank()
            else:
                src = dist.recv(got_any)
            assert 0 < src < world, f"recv from any source: source {src}"
            want = src + 100 * seen.get(src, 0)
            same(got_any, torch.full((3,), want, dtype=torch.int64),
                 f"recv from any source: message {j} from {src}")
            seen[src] = seen.get(src, 0) + 1
        assert all(seen.get(p) == 2 for p in range(1, world)), seen
    else:
        for k in range(2):
            dist.send(torch.full((3,), rank + 100 * k, dtype=torch.int64), 0)
    expect_error(lambda: dist.recv(t, tag=-1), "tag -1", "negative")


@case
def tags_matched_as_gloo(rank, world, gloo):
    # Tags matched on, not taken in posting order: each rank sends the
    # next three messages tagged 1, 2, 3 (sizes differ) and receives the
    # previous one's in the order 3, 1, 2, posted before and after the
    # sends; then rank 0 receives from any source by tag, the highest
    # rank's first. The same on gloo, the oracle.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    results = {}
    for name, group in (("switchyard", None), ("gloo", gloo)):
        got = {t: torch.zeros(t + 1, dtype=torch.float64) for t in (1, 2, 3)}
        works = [dist.irecv(got[3], prv, group=group, tag=3)]
        works += [dist.isend(rank_data(rank, (t + 1,), torch.float64,
                                       salt=t), nxt, group=group, tag=t)
                  for t in (1, 2, 3)]
        works += [dist.irecv(got[t], prv, group=group, tag=t) for t in (1, 2)]
        for w in works:
            w.wait()
        for t in (1, 2, 3):
            same(got[t], rank_data(prv, (t + 1,), torch.float64, salt=t),
                 f"{name}: tag {t} from rank {prv}")
        sources = []
        if rank == 0:
            for r in range(world - 1, 0, -1):
                buf = torch.zeros(2, dtype=torch.int64)
                w = dist.irecv(buf, group=group, tag=100 + r)
                w.wait()
                sources.append((w._source_rank(), buf.tolist()))
        else:
            dist.send(torch.full((2,), rank, dtype=torch.int64), 0,
                      group=group, tag=100 + rank)
        results[name] = sources
        dist.barrier(group=gloo)
    assert results["switchyard"] == results["gloo"] == (
        [(r, [r, r]) for r in range(world - 1, 0, -1)] if rank == 0
        else []), results


@case
def rooted_and_reduce_scatter_equal_gloo(rank, world, gloo):
    for root in range(world):
        for name, op in OPS.items():
            mine = rank_data(rank, (3, 5), torch.float64, salt=10).t()
            ref = mine.contiguous().clone()  # gloo on a contiguous copy
            before = mine.clone()
            dist.reduce(mine, root, op=op)
            dist.reduce(ref, root, op=op, group=gloo)
            if rank == root:
                reduced_same(mine.contiguous(), ref, f"reduce {name}", world)
            else:
                same(mine, before, "reduce: a non-root tensor changed")
        x = rank_data(rank, (2, 3), torch.int32, salt=11)
        outs = [torch.empty_like(x) for _ in range(world)] \
            if rank == root else None
        refs = [torch.empty_like(x) for _ in range(world)] \
            if rank == root else None
        dist.gather(x, outs, dst=root)
        dist.gather(x, refs, dst=root, group=gloo)
        if rank == root:
            for r in range(world):
                same(outs[r], refs[r], f"gather block {r}")
        chunks = [rank_data(r, (4,), torch.float32, salt=12 + root)
                  for r in range(world)] if rank == root else None
        holder = torch.zeros(4, 2)
        dist.scatter(holder[:, 1], chunks, src=root)  # strided output
        same(holder[:, 1], rank_data(rank, (4,), torch.float32,
                                     salt=12 + root), "scatter")
        assert holder[:, 0].abs().sum() == 0, "scatter wrote outside"
    blocks = [rank_data(rank * world + r, (2, 2), torch.float32, salt=13)
              for r in range(world)]
    out = torch.empty(2, 2)
    dist.reduce_scatter(out, blocks)
    ref = sum(rank_data(j * world + rank, (2, 2), torch.float32, salt=13)
              for j in range(world))
    reduced_same(out, ref, "reduce_scatter vs serial", world)
    flat = torch.cat([b.reshape(-1) for b in blocks])
    base_out = torch.empty(4)
    dist._reduce_scatter_base(base_out, flat, op=dist.ReduceOp.MAX)
    ref = torch.stack([rank_data(j * world + rank, (2, 2), torch.float32,
                                 salt=13).reshape(-1)
                       for j in range(world)]).max(0).values
    same(base_out, ref, "_reduce_scatter_base MAX vs serial")
    expect_error(lambda: dist._reduce_scatter_base(torch.empty(3), flat),
                 "switchyard", "_reduce_scatter_base", str(world))
    # Only the root passes the list (torch's Python checks it too: so
    # straight to the process group; nothing is posted).
    if rank == 1:
        opts = dist.GatherOptions()
        opts.rootRank = 0
        pg = dist.distributed_c10d._get_default_group()
        expect_error(lambda: pg.gather([[x] * world], [x], opts),
                     "only the root")


def check_group_sum(group, members, rank):
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t, group=group)
    want = float(sum(members) + len(members))
    assert torch.equal(t, torch.full((3,), want)), (members, t)


@case
def new_groups_by_their_own_rendezvous(rank, world, gloo):
    # The default group is bound to no device: torch calls the creator on
    # the members only, which make a rendezvous through the group's store.
    c10d = dist.distributed_c10d
    members = [r for r in range(world) if r != 1]  # rank 1 left out
    sub = dist.new_group(members)
    whole = dist.new_group()
    if rank in members:
        assert isinstance(swy.backend_of(sub), swy.SwitchyardBackend)
        assert not swy.backend_of(sub).made_by_split
        check_group_sum(sub, members, rank)
    else:
        assert sub == c10d.GroupMember.NON_GROUP_MEMBER
    t = torch.ones(2)
    with swy.priority("high"):
        dist.all_reduce(t, group=whole)
    assert torch.equal(t, torch.full((2,), float(world)))
    # new_subgroups: groups of consecutive ranks.
    mine, subs = dist.new_subgroups(group_size=2 if world % 2 == 0 else 1)
    check_group_sum(mine, dist.get_process_group_ranks(mine), rank)
    # Another backend's group still works.
    other = dist.new_group(backend="gloo")
    dist.all_reduce(t, group=other)
    for g in [sub, whole, other] + subs:
        if g != c10d.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(g)


@case
def new_groups_split_when_bound(rank, world, gloo):
    # Under a default group bound to a device (init_process_group's
    # device_id) torch offers the default group's backend to split
    # (split_from) and has the non-members call perform_nocolor_split.
    bound = dist.distributed_c10d._get_default_group().bound_device_id
    members = [r for r in range(world) if r != 1]
    sub = dist.new_group(members)
    if rank in members:
        assert swy.backend_of(sub).made_by_split == (bound is not None)
        check_group_sum(sub, members, rank)
        dist.destroy_process_group(sub)
    check_group_sum(dist.group.WORLD, list(range(world)), rank)


@case
def split_group_splits_the_communicator(rank, world, gloo):
    # torch's split hook (split_group -> Backend::split): swy_comm_split,
    # no rendezvous; ranks in no split get no group.
    splits = [[r for r in range(world) if r % 2 == 0]]
    if world > 2:
        splits.append([r for r in range(world) if r % 2 == 1])
    g = dist.split_group(split_ranks=splits)
    mine = [s for s in splits if rank in s]
    if not mine:
        assert g == dist.GroupMember.NON_GROUP_MEMBER, g
    else:
        assert isinstance(swy.backend_of(g), swy.SwitchyardBackend)
        assert swy.backend_of(g).made_by_split
        check_group_sum(g, mine[0], rank)
        dist.destroy_process_group(g)


@case
def device_mesh_dp_ep(rank, world, gloo):
    from torch.distributed.device_mesh import init_device_mesh
    if world % 2:
        dims = (1, world)
    else:
        dims = (world // 2, 2)
    mesh = init_device_mesh("cpu", dims, mesh_dim_names=("dp", "ep"))
    for name in ("dp", "ep"):
        group = mesh.get_group(name)
        assert isinstance(swy.backend_of(group), swy.SwitchyardBackend), name
        check_group_sum(group, dist.get_process_group_ranks(group), rank)
    # An expert-parallel exchange on "ep" against gloo's on the same ranks.
    ep = mesh.get_group("ep")
    ep_ranks = dist.get_process_group_ranks(ep)
    ref_group = dist.new_group(ep_ranks, backend="gloo")
    n = ep.size()
    splits = [(rank + j) % 3 for j in range(n)]
    inp = rank_data(rank, (sum(splits), 4), torch.float32, salt=31)
    out_splits = torch.tensor(splits)
    recv = torch.empty_like(out_splits)
    dist.all_to_all_single(recv, out_splits, [1] * n, [1] * n, group=ref_group)
    out = torch.empty(int(recv.sum()), 4)
    ref = torch.empty_like(out)
    dist.all_to_all_single(out, inp, recv.tolist(), splits, group=ep)
    dist.all_to_all_single(ref, inp, recv.tolist(), splits, group=ref_group)
    same(out, ref, "all_to_all_single on the mesh's ep group")
    dist.destroy_process_group(ref_group)


@case
def tensor_collectives_2x_equal_gloo(rank, world, gloo):
    # all_gather_into_tensor / reduce_scatter_tensor (_allgather_base,
    # _reduce_scatter_base), also on non-contiguous inputs.
    for dtype in (torch.float32, torch.int64, torch.float16):
        inp = rank_data(rank, (3, 4), dtype, salt=41)
        out, ref = (torch.empty(world * 3, 4, dtype=dtype) for _ in range(2))
        dist.all_gather_into_tensor(out, inp)
        dist.all_gather_into_tensor(ref, inp, group=gloo) \
            if dtype != torch.float16 else ref.copy_(torch.cat(
                [rank_data(r, (3, 4), dtype, salt=41) for r in range(world)]))
        same(out, ref, f"all_gather_into_tensor {dtype}")
    inp = rank_data(rank, (4, world * 2), torch.float64, salt=42).t()
    out = torch.empty(2, 4, dtype=torch.float64)
    dist.reduce_scatter_tensor(out, inp)
    whole = sum(rank_data(r, (4, world * 2), torch.float64, salt=42).t()
                for r in range(world))
    reduced_same(out, whole[2 * rank:2 * rank + 2], "reduce_scatter_tensor",
                 world)
    # Coalesced forms, as FSDP posts them (torch's coalescing manager ->
    # allgather_into_tensor_coalesced / reduce_scatter_tensor_coalesced).
    ins = [rank_data(rank, (n,), torch.float32, salt=43 + n) for n in (1, 5)]
    outs = [torch.empty(world * t.numel()) for t in ins]
    with dist.distributed_c10d._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    for o, i, n in zip(outs, ins, (1, 5)):
        same(o, torch.cat([rank_data(r, (n,), torch.float32, salt=43 + n)
                           for r in range(world)]), "coalesced allgather")
    ins = [rank_data(rank, (world * n,), torch.int64, salt=45 + n)
           for n in (2, 3)]
    outs = [torch.empty(n, dtype=torch.int64) for n in (2, 3)]
    with dist.distributed_c10d._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i)
    cm.wait()
    for o, n in zip(outs, (2, 3)):
        total = sum(rank_data(r, (world * n,), torch.int64, salt=45 + n)
                    for r in range(world))
        same(o, total[rank * n:(rank + 1) * n], "coalesced reduce_scatter")
    # allreduce_coalesced against gloo.
    ts = [rank_data(rank, (n,), torch.float64, salt=47) for n in (3, 1)]
    refs = [t.clone() for t in ts]
    dist.all_reduce_coalesced(ts)
    dist.all_reduce_coalesced(refs, group=gloo)
    for t, r in zip(ts, refs):
        reduced_same(t, r, "all_reduce_coalesced", world)


@case
def batch_isend_irecv_is_one_group(rank, world, gloo):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    sends = [torch.full((n,), float(rank * 10 + n)) for n in (2, 7)]
    recvs = [torch.zeros(n) for n in (2, 7)]
    # Receives first: only posting them together with the sends (one
    # swy_group_start/end) makes this order safe on every rank.
    ops = [dist.P2POp(dist.irecv, r, prv) for r in recvs] + \
          [dist.P2POp(dist.isend, s, nxt) for s in sends]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    for r, n in zip(recvs, (2, 7)):
        same(r, torch.full((n,), float(prv * 10 + n)), "batch_isend_irecv")


@case
def all_to_all_single_under_autograd(rank, world, gloo):
    import torch.distributed.nn.functional as dist_fn
    splits = [(rank + 2 * j) % 3 for j in range(world)]  # some empty
    counts = torch.tensor(splits)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts, group=gloo)
    outs = {}
    for name, group in (("switchyard", None), ("gloo", gloo)):
        x = rank_data(rank, (sum(splits), 3), torch.float64, salt=51)
        x.requires_grad_(True)
        out = torch.empty(int(recv_counts.sum()), 3, dtype=torch.float64)
        y = dist_fn.all_to_all_single(out, x, recv_counts.tolist(), splits,
                                      group=group or dist.group.WORLD)
        (y * torch.arange(1, y.numel() + 1, dtype=torch.float64)
         .view_as(y)).sum().backward()
        outs[name] = (y.detach(), x.grad)
    same(outs["switchyard"][0], outs["gloo"][0], "autograd a2a forward")
    same(outs["switchyard"][1], outs["gloo"][1], "autograd a2a backward")


@case
def functional_collectives_equal_gloo(rank, world, gloo):
    import torch.distributed._functional_collectives as funcol
    group = dist.group.WORLD
    t = rank_data(rank, (4, 3), torch.float32, salt=61)
    mine = funcol.all_reduce(t, "sum", group)
    ref = funcol.all_reduce(t, "sum", gloo)
    reduced_same(torch.as_tensor(mine), torch.as_tensor(ref),
                 "funcol.all_reduce", world)
    mine = funcol.all_gather_tensor(t, 0, group)
    ref = funcol.all_gather_tensor(t, 0, gloo)
    same(torch.as_tensor(mine), torch.as_tensor(ref), "funcol.all_gather")
    big = rank_data(rank, (world * 2, 3), torch.float64, salt=62)
    mine = funcol.reduce_scatter_tensor(big, "sum", 0, group)
    want = sum(rank_data(r, (world * 2, 3), torch.float64, salt=62)
               for r in range(world))[2 * rank:2 * rank + 2]
    reduced_same(torch.as_tensor(mine), want, "funcol.reduce_scatter", world)
    splits = [1] * world
    x = rank_data(rank, (world, 2), torch.float32, salt=63)
    mine = funcol.all_to_all_single(x, splits, splits, group)
    ref = funcol.all_to_all_single(x, splits, splits, gloo)
    same(torch.as_tensor(mine), torch.as_tensor(ref), "funcol.all_to_all")


@case
def object_collectives_and_monitored_barrier(rank, world, gloo):
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank})
    assert objs == [{"rank": r, "s": "x" * r} for r in range(world)], objs
    lst = [("root", 1), None] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == [("root", 1), None], lst
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(rank * 3, gathered, dst=0)
    if rank == 0:
        assert gathered == [r * 3 for r in range(world)], gathered
    out = [None]
    dist.scatter_object_list(out, [f"to {r}" for r in range(world)]
                             if rank == 0 else None, src=0)
    assert out == [f"to {rank}"], out
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))


@case
def unsupported_ops_name_themselves(rank, world, gloo):
    sparse = torch.sparse_coo_tensor([[0]], [1.0], (3,))
    expect_error(lambda: dist.all_reduce(sparse), "switchyard", "Sparse")


@case
def options_and_timeout_honoured(rank, world, gloo):
    # The caller's options reach the group's engine.
    g = dist.new_group(backend="switchyard",
                       pg_options=swy.Options(config={"SWY_POLICY": "fair"}))
    assert swy.backend_of(g).query("SWY_POLICY") == "fair"
    dist.all_reduce(torch.ones(3), group=g)
    dist.destroy_process_group(g)
    # A blocked op raises within the group's timeout, on every rank: rank
    # 0 posts alone, the others post only after rank 0 gave up.
    g = dist.new_group(backend="switchyard",
                       timeout=datetime.timedelta(seconds=2))
    assert swy.backend_of(g).options._timeout == \
        datetime.timedelta(seconds=2)
    t = torch.ones(4)
    start = time.monotonic()
    if rank == 0:
        text = expect_error(lambda: dist.all_reduce(t, group=g), "timeout")
        took = time.monotonic() - start
        assert 1.5 < took < 10, (took, text)
    dist.barrier(group=gloo)
    if rank != 0:
        start = time.monotonic()
        expect_error(lambda: dist.all_reduce(t, group=g), "switchyard",
                     "failed")
        assert time.monotonic() - start < 10
    dist.destroy_process_group(g)


class HoldGroup(torch.autograd.Function):
    """An op whose autograd node keeps a process group (or backend) alive,
    as torch.distributed.nn.functional's do, and a token whose weak
    reference tells when the node was released."""

    @staticmethod
    def forward(ctx, x, group, token):
        ctx.group = group
        ctx.token = token
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


class Token:
    pass


LIFETIME_ROUNDS = int(os.environ.get("SWY_TEST_LIFETIME_ROUNDS", "100"))


def last_reference_round(make_group, post, destroy=None):
    """One round of the lifetime defect: an op's output holds an autograd
    graph that holds `group`; a slow callback on the op's future keeps the
    op unfinished while the caller drops the output, the Work and the
    group, so the Work's end drops the last reference to the group. On
    the completion thread that destructor would join its own thread
    (std::system_error, SIGABRT); the backend must release it
    elsewhere."""
    group = make_group()
    token = Token()
    released = weakref.ref(token)
    x = torch.ones(4, requires_grad=True)
    y = HoldGroup.apply(x, group, token)
    entered = threading.Event()

    def slow(fut):
        entered.set()
        time.sleep(0.02)
        return None

    with torch.no_grad():
        work = post(group, y)
    chained = work.get_future().then(slow)
    assert entered.wait(30), "the future's callback never ran"
    if destroy is not None:
        destroy(group)
    del x, y, work, token, group
    chained.wait()
    start = time.monotonic()
    while released() is not None:
        assert time.monotonic() - start < 30, "the output was never released"
        time.sleep(0.001)


@case
def last_reference_dropped_off_the_completion_thread(rank, world, gloo):
    base = dist.distributed_c10d._get_default_store()
    for i in range(LIFETIME_ROUNDS):
        # A bare backend: the output's graph holds its last reference.
        last_reference_round(
            lambda: swy.SwitchyardBackend.create(
                dist.PrefixStore(f"lifetime/{i}", base), rank, world,
                datetime.timedelta(seconds=60), None, None),
            lambda backend, y: backend.allreduce([y]))
        # A group: destroyed (torch shuts its backend down) while the
        # callback runs, and released by the op's end.
        last_reference_round(
            fresh_group,
            lambda group, y: dist.all_reduce(y, group=group, async_op=True),
            destroy=dist.destroy_process_group)
    dist.barrier(group=gloo)


def fresh_group():
    return dist.new_group(backend="switchyard")


@case
def mismatched_calls_raise_everywhere(rank, world, gloo):
    # Counts that differ, then dtypes that differ, then different ops: each
    # on its own group (a mismatch fails the group) on every rank.
    # A rank may see the failure at its post (a peer already failed the
    # group) or at wait(): either way it raises.
    #
    # Every group is made before the first failure: a group made after a
    # failed one was destroyed may share its communicator id and receive
    # its stale ops (a library bug, reported; seen at 3 ranks).
    variants = ("count", "dtype", "op", "named")
    groups = {what: fresh_group() for what in variants}
    for what in variants:
        g = groups[what]
        works = []

        def post_and_wait():
            if what == "count":
                t = torch.ones(4 + rank)
                works.append(dist.all_reduce(t, group=g, async_op=True))
            elif what == "dtype":
                dtype = torch.float32 if rank == 0 else torch.float64
                t = torch.ones(4, dtype=dtype)
                works.append(dist.all_reduce(t, group=g, async_op=True))
            elif what == "named":
                # The priority scope reaches the library: its name labels
                # the op in the error.
                with swy.priority("high", order=2, name="experts_of_layer2"):
                    works.append(dist.all_reduce(torch.ones(3 + rank),
                                                 group=g, async_op=True))
            elif rank == 0:
                works.append(dist.all_reduce(torch.ones(4), group=g,
                                             async_op=True))
            else:
                works.append(dist.broadcast(torch.ones(4), 0, group=g,
                                            async_op=True))
            works[0].wait()

        start = time.monotonic()
        text = expect_error(post_and_wait, "switchyard", "failed", "disagree")
        assert what != "named" or "experts_of_layer2" in text, text
        assert time.monotonic() - start < 60, "mismatch took too long"
        if works:
            assert not works[0].is_success()
            # Work.exception() has no Python binding in 1.13; the Future
            # carries the same error.
            expect_error(works[0].get_future().wait, "switchyard", "failed")
        # The failed group refuses later ops at once.
        start = time.monotonic()
        expect_error(lambda: dist.all_reduce(torch.ones(2), group=g),
                     "switchyard", "failed")
        assert time.monotonic() - start < 10, "a failed group hung"
        dist.destroy_process_group(g)
        dist.barrier(group=gloo)


# ---------------------------------------------------------------------------

def run_rank(rank, world, store, only, kill, bound=False):
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")
    dist.init_process_group("switchyard", init_method=f"file://{store}",
                            rank=rank, world_size=world,
                            device_id=torch.device("cpu", 0) if bound
                            else None)
    if kill:
        return killed_rank(rank, world)
    gloo = dist.new_group(backend="gloo")
    failed = 0
    for fn in CASES:
        if only and fn.__name__ not in only:
            continue
        start = time.monotonic()
        try:
            fn(rank, world, gloo)
            status = "ok"
        except Exception:
            status = "FAIL"
            failed += 1
            traceback.print_exc()
        print(f"rank {rank}: {status} {fn.__name__} "
              f"({time.monotonic() - start:.2f} s)", flush=True)
        dist.barrier(group=gloo)
    dist.destroy_process_group()
    return 1 if failed else 0


def killed_rank(rank, world):
    """The last rank dies mid-job: the others raise and then tear down."""
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if rank == world - 1:
        os._exit(3)
    start = time.monotonic()
    text = expect_error(lambda: [dist.all_reduce(t) for _ in range(10000)],
                        "switchyard", "failed")
    took = time.monotonic() - start
    print(f"rank {rank}: ok killed_rank raised after {took:.2f} s: {text}",
          flush=True)
    assert took < 60, took
    start = time.monotonic()
    dist.destroy_process_group()
    print(f"rank {rank}: ok destroy after the failure took "
          f"{time.monotonic() - start:.2f} s", flush=True)
    return 0


def launch(world, only, kill, bound=False):
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="swy-torch-") as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=lambda r=r: sys.exit(
            run_rank(r, world, store, only, kill, bound)))
            for r in range(world)]
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
    expected = [0] * world
    if kill:
        expected[-1] = 3
    if hung:
        print(f"ranks {hung} hung (over {RANK_TIMEOUT_S} s)")
    print(f"{'kill' if kill else 'cases'} at {world} ranks: exit codes "
          f"{codes}, expected {expected}")
    return codes == expected and not hung


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--only", action="append")
    parser.add_argument("--no-kill", action="store_true",
                        help="skip the killed-rank scenario")
    args = parser.parse_args()
    known = {fn.__name__ for fn in CASES}
    if args.only and not set(args.only) <= known:
        print(f"unknown cases {set(args.only) - known}; known: {sorted(known)}")
        return 2
    ok = launch(args.world_size, args.only, kill=False)
    if not args.only:
        # A default group bound to a device: new groups split off it.
        ok = launch(args.world_size, ["new_groups_split_when_bound"],
                    kill=False, bound=True) and ok
    if not args.no_kill and not args.only:
        ok = launch(args.world_size, None, kill=True) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
