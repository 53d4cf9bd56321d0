"""switchyard.torch.MoE: a Mixture-of-Experts layer whose dispatch and
combine go through the library's expert-parallel exchange (moe.h) on a
"switchyard" process group.

Each rank holds `experts_per_rank` experts (global expert g lives on rank
g // experts_per_rank); the gate is replicated (wrap the model in DDP over
the data-parallel group as usual). The exchanges are autograd Functions:
their backward runs the library's combine and dispatch backward, which
are collective, so every rank must run the same forward and backward.
"""
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from . import _C


class _Dispatch(torch.autograd.Function):
    """tokens [S, H] -> expert_in [recv_rows, H], expert-major."""

    @staticmethod
    def forward(ctx, tokens, route):
        ctx.route = route
        return route.dispatch(tokens)

    @staticmethod
    def backward(ctx, grad_expert_in):
        return ctx.route.dispatch_backward(grad_expert_in.contiguous()), None


class _Combine(torch.autograd.Function):
    """expert_out [recv_rows, H], topk_w [S, k] -> tokens_out [S, H]."""

    @staticmethod
    def forward(ctx, expert_out, topk_w, route):
        ctx.route = route
        ctx.save_for_backward(topk_w)
        return route.combine(expert_out, topk_w)

    @staticmethod
    def backward(ctx, grad_tokens_out):
        (topk_w,) = ctx.saved_tensors
        grad_expert_out, grad_topk_w = ctx.route.combine_backward(
            grad_tokens_out.contiguous(), topk_w)
        return grad_expert_out, grad_topk_w, None


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
    probability); add it to the loss with a small coefficient.
    """

    def __init__(self, hidden, ffn_hidden, experts_per_rank=1, top_k=2,
                 capacity_factor=1.25, group=None, gate="gshard"):
        super().__init__()
        if group is None:
            group = dist.distributed_c10d._get_default_group()
        if not isinstance(group, _C.ProcessGroupSwitchyard):
            raise TypeError("switchyard.torch.MoE: group must be a "
                            f"'switchyard' process group, got {type(group)}")
        if gate not in ("gshard", "ta"):
            raise ValueError(f"switchyard.torch.MoE: gate {gate!r} is not "
                             "'gshard' or 'ta'")
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
            weights = _C.ta_expert_weights(group, experts_per_rank)
        else:
            weights = [1.0] * self.num_experts
        self.register_buffer("balance_weight",
                             torch.tensor(weights, dtype=torch.float32))
        self._plan = _C.MoePlan(group, experts_per_rank, hidden, top_k,
                                capacity_factor)
        self.aux_loss = None

    def forward(self, x):
        shape = x.shape
        tokens = x.reshape(-1, self.hidden)
        probs = F.softmax(self.gate(tokens), dim=-1)
        topk_w, topk_idx = probs.topk(self.top_k, dim=-1)
        first = F.one_hot(topk_idx[:, 0], self.num_experts).float()
        fraction = first.mean(0) if len(tokens) else first.sum(0)
        mean_prob = probs.mean(0) if len(tokens) else probs.sum(0)
        self.aux_loss = self.num_experts * (
            self.balance_weight * fraction * mean_prob).sum()
        topk_idx = capacity_mask(topk_idx, self.num_experts,
                                 self.capacity_factor)
        route = self._plan.route(topk_idx)
        expert_in = _Dispatch.apply(tokens, route)
        offsets = route.expert_offsets()
        expert_out = torch.cat([
            F.gelu(expert_in[offsets[e]:offsets[e + 1]] @ self.w1[e])
            @ self.w2[e] for e in range(self.experts_per_rank)])
        out = _Combine.apply(expert_out, topk_w.contiguous(), route)
        return out.reshape(shape)
