"""switchyard.torch.MoE: a Mixture-of-Experts layer whose dispatch and
combine go through the library's expert-parallel exchange (moe.h) on a
"switchyard" process group, or through torch.distributed's all-to-all on
any other group (gloo: the oracle of the tests and the training script).

Each rank holds `experts_per_rank` experts (global expert g lives on rank
g // experts_per_rank); the gate is replicated (wrap the model in DDP over
the data-parallel group as usual). The exchanges are autograd Functions:
their backward runs the library's combine and dispatch backward, which
are collective, so every rank must run the same forward and backward.
"""
import collections
import math
import time

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_fn
import torch.nn.functional as F

from . import _C


def _backend_of(group):
    """The group's SwitchyardBackend, or None (another backend)."""
    try:
        backend = group._get_backend(torch.device("cpu"))
    except RuntimeError:
        return None
    return backend if isinstance(backend, _C.SwitchyardBackend) else None

# Seconds this process spent in the library's exchanges, by kind ("route",
# "dispatch", "combine", "combine_backward", "dispatch_backward"), and how
# many: a profile for the caller (examples/train.py --phases), which may
# clear them.
exchange_seconds = collections.Counter()
exchange_calls = collections.Counter()


def _timed(kind, call, *args):
    start = time.perf_counter()
    try:
        return call(*args)
    finally:
        exchange_seconds[kind] += time.perf_counter() - start
        exchange_calls[kind] += 1


class _Dispatch(torch.autograd.Function):
    """tokens [S, H] -> expert_in [recv_rows, H], expert-major."""

    @staticmethod
    def forward(ctx, tokens, route):
        ctx.route = route
        return _timed("dispatch", route.dispatch, tokens)

    @staticmethod
    def backward(ctx, grad_expert_in):
        return _timed("dispatch_backward", ctx.route.dispatch_backward,
                      grad_expert_in.contiguous()), None


class _Combine(torch.autograd.Function):
    """expert_out [recv_rows, H], topk_w [S, k] -> tokens_out [S, H]."""

    @staticmethod
    def forward(ctx, expert_out, topk_w, route):
        ctx.route = route
        ctx.save_for_backward(topk_w)
        return _timed("combine", route.combine, expert_out, topk_w)

    @staticmethod
    def backward(ctx, grad_tokens_out):
        (topk_w,) = ctx.saved_tensors
        grad_expert_out, grad_topk_w = _timed(
            "combine_backward", ctx.route.combine_backward,
            grad_tokens_out.contiguous(), topk_w)
        return grad_expert_out, grad_topk_w, None


class _TorchRoute:
    """The exchange of one batch over torch.distributed (any backend), with
    autograd through torch's all_to_all_single: rows travel rank-major and
    are put expert-major on arrival."""

    def __init__(self, group, experts_per_rank, topk_idx):
        world = group.size()
        self.group = group
        tokens, k = topk_idx.shape
        flat = topk_idx.reshape(-1)
        valid = (flat >= 0).nonzero().reshape(-1)
        experts = flat[valid]
        # Send order: by destination expert (so by rank), then (token, slot).
        order = torch.argsort(experts * (tokens * k) + valid)
        self.send_slot = valid[order]          # flat slot of each sent row
        self.send_token = self.send_slot // k
        send_counts = torch.bincount(experts, minlength=world *
                                     experts_per_rank)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=group)
        by_rank = send_counts.reshape(world, experts_per_rank)
        self.send_splits = by_rank.sum(1).tolist()
        recv = recv_counts.reshape(world, experts_per_rank)  # [src, expert]
        self.recv_splits = recv.sum(1).tolist()
        # Arrived rank-major ([src][expert]); expert-major is [expert][src].
        starts = torch.cumsum(recv.reshape(-1), 0) - recv.reshape(-1)
        starts = starts.reshape(world, experts_per_rank)
        pieces = [torch.arange(int(starts[r, e]),
                               int(starts[r, e] + recv[r, e]))
                  for e in range(experts_per_rank) for r in range(world)]
        self.to_expert_major = torch.cat(pieces) if pieces else \
            torch.zeros(0, dtype=torch.long)
        self.to_rank_major = torch.argsort(self.to_expert_major)
        per_expert = recv.sum(0)
        self.offsets = [0] + torch.cumsum(per_expert, 0).tolist()
        self.tokens, self.k = tokens, k

    def expert_offsets(self):
        return self.offsets

    def dispatch(self, tokens):
        rows = tokens[self.send_token]
        arrived = tokens.new_empty(sum(self.recv_splits), tokens.shape[1])
        arrived = dist_fn.all_to_all_single(
            arrived, rows, self.recv_splits, self.send_splits,
            group=self.group)
        return arrived[self.to_expert_major]

    def combine(self, expert_out, topk_w):
        rows = expert_out[self.to_rank_major]
        back = expert_out.new_empty(len(self.send_slot), expert_out.shape[1])
        back = dist_fn.all_to_all_single(
            back, rows, self.send_splits, self.recv_splits, group=self.group)
        weights = topk_w.reshape(-1)[self.send_slot].unsqueeze(1)
        out = expert_out.new_zeros(self.tokens, expert_out.shape[1])
        return out.index_add(0, self.send_token, back * weights)


def capacity_mask(topk_idx, num_experts, capacity_factor):
    """Drops (sets to -1) the slots beyond each expert's capacity,
    ceil(capacity_factor * S * k / E) rows from this rank, first-choice
    slots before second-choice ones (GShard). 0 means no limit."""
    tokens, k = topk_idx.shape
    if capacity_factor <= 0 or tokens == 0:
        return topk_idx
    capacity = math.ceil(capacity_factor * tokens * k / num_experts)
    slot_major = topk_idx.t().reshape(-1)
    onehot = F.one_hot(slot_major, num_experts)
    position = (onehot.cumsum(0) * onehot).sum(1) - 1
    kept = torch.where(position < capacity, slot_major,
                       torch.full_like(slot_major, -1))
    return kept.reshape(k, tokens).t().contiguous()


class MoE(torch.nn.Module):
    """Top-k gated experts (two-layer GELU FFNs as batched weights).

    hidden, ffn_hidden: sizes; experts_per_rank: experts on each rank;
    top_k: slots per token; capacity_factor: see capacity_mask() (0: no
    limit); group: the expert-parallel "switchyard" group (default: the
    default group); gate: "gshard" (uniform balance loss weights) or "ta"
    (TA-MoE: weights from the library's link matrix, steering tokens toward
    the faster links). After forward, `aux_loss` holds the balance loss
    E * sum_e w_e f_e m_e (f: fraction of first choices, m: mean gate
    probability); add it to the loss with a small coefficient. On a group
    of another backend the exchanges run over torch.distributed's
    all-to-all instead (gate "ta" needs a "switchyard" group).
    """

    def __init__(self, hidden, ffn_hidden, experts_per_rank=1, top_k=2,
                 capacity_factor=1.25, group=None, gate="gshard"):
        super().__init__()
        if group is None:
            group = dist.distributed_c10d._get_default_group()
        backend = _backend_of(group)
        on_library = backend is not None
        if gate not in ("gshard", "ta"):
            raise ValueError(f"switchyard.torch.MoE: gate {gate!r} is not "
                             "'gshard' or 'ta'")
        if gate == "ta" and not on_library:
            raise TypeError("switchyard.torch.MoE: gate 'ta' needs a "
                            f"'switchyard' process group, got {type(group)}")
        world = group.size()
        self.hidden = hidden
        self.top_k = top_k
        self.experts_per_rank = experts_per_rank
        self.num_experts = world * experts_per_rank
        self.capacity_factor = capacity_factor
        self.gate = torch.nn.Linear(hidden, self.num_experts, bias=False)
        self.w1 = torch.nn.Parameter(
            torch.randn(experts_per_rank, hidden, ffn_hidden)
            / math.sqrt(hidden))
        self.w2 = torch.nn.Parameter(
            torch.randn(experts_per_rank, ffn_hidden, hidden)
            / math.sqrt(ffn_hidden))
        if gate == "ta":
            weights = _C.ta_expert_weights(backend, experts_per_rank)
        else:
            weights = [1.0] * self.num_experts
        self.register_buffer("balance_weight",
                             torch.tensor(weights, dtype=torch.float32))
        self._group = group
        self._backend = backend
        self._on_library = on_library
        # One plan per row dtype (float32 made here; float64, e.g. after
        # .double(), on the first forward that needs it: creating a plan is
        # collective, and every rank runs the same forwards).
        self._plans = {}
        self._plan = self._plan_for(torch.float32) if on_library else None
        self.aux_loss = None

    def _plan_for(self, dtype):
        if dtype not in self._plans:
            if dtype not in (torch.float32, torch.float64):
                raise TypeError("switchyard.torch.MoE: rows of dtype "
                                f"{dtype}: the library's exchange moves "
                                "float32 and float64 rows")
            self._plans[dtype] = _C.MoePlan(
                self._backend, self.experts_per_rank, self.hidden, self.top_k,
                self.capacity_factor, str(dtype).replace("torch.", ""))
        return self._plans[dtype]

    def forward(self, x):
        shape = x.shape
        tokens = x.reshape(-1, self.hidden)
        probs = F.softmax(self.gate(tokens), dim=-1)
        topk_w, topk_idx = probs.topk(self.top_k, dim=-1)
        first = F.one_hot(topk_idx[:, 0], self.num_experts).to(probs.dtype)
        fraction = first.mean(0) if len(tokens) else first.sum(0)
        mean_prob = probs.mean(0) if len(tokens) else probs.sum(0)
        self.aux_loss = self.num_experts * (
            self.balance_weight * fraction * mean_prob).sum()
        topk_idx = capacity_mask(topk_idx, self.num_experts,
                                 self.capacity_factor)
        if self._on_library:
            route = _timed("route", self._plan_for(tokens.dtype).route,
                           topk_idx)
            expert_in = _Dispatch.apply(tokens, route)
        else:
            route = _TorchRoute(self._group, self.experts_per_rank, topk_idx)
            expert_in = route.dispatch(tokens)
        offsets = route.expert_offsets()
        expert_out = torch.cat([
            F.gelu(expert_in[offsets[e]:offsets[e + 1]] @ self.w1[e])
            @ self.w2[e] for e in range(self.experts_per_rank)])
        if self._on_library:
            out = _Combine.apply(expert_out, topk_w.contiguous(), route)
        else:
            out = route.combine(expert_out, topk_w)
        return out.reshape(shape)
