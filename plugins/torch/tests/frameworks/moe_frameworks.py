"""Train a framework's own MoE layer, unmodified, for a few steps on a
torch.distributed backend, and print every rank's loss per step.

    python moe_frameworks.py --framework deepspeed|fairscale|megatron \
        --backend gloo|switchyard [--world-size 4] [--ep-size 2]

The launcher starts --world-size processes of this script on 127.0.0.1
(torch's env:// rendezvous) and prints one JSON line:
{"framework", "backend", "losses": [[rank 0's per step], ...], "groups"}.
Each rank seeds torch with the same seed whatever the backend, so two
backends that compute the same sums give the same losses.

The layer gets its expert-parallel groups from its framework
(deepspeed.utils.groups; for fairscale, which takes a group argument,
torch's new_group): ep-size ranks share the experts of one layer, and the
world is world-size / ep-size such groups. The dense parameters (the gate)
are averaged over the world, the experts' over their expert-data-parallel
group, as DeepSpeed's engine and DDP would, by explicit all_reduce calls
on the backend under test.
"""
import argparse
import json
import os
import socket
import subprocess
import sys

FRAMEWORKS = ("deepspeed", "fairscale", "megatron")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", choices=FRAMEWORKS, required=True)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--ep-size", type=int, default=2)
    p.add_argument("--local-experts", type=int, default=2)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--tokens", type=int, default=32,
                   help="tokens per rank and step")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--timeout", type=float, default=240,
                   help="seconds for the whole run")
    p.add_argument("--megatron-dispatcher", default="alltoall",
                   choices=("alltoall", "allgather"),
                   help="megatron-core's token dispatcher (both need CUDA)")
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.world_size % args.ep_size != 0:
        p.error("--world-size must be a multiple of --ep-size")
    return args


def init_backend(args):
    """Initialise torch.distributed the way a user of the framework does."""
    import torch.distributed as dist
    if args.backend == "switchyard":
        import switchyard.torch  # noqa: F401  (registers the backend)
    if args.framework == "deepspeed":
        import deepspeed
        deepspeed.init_distributed(dist_backend=args.backend,
                                   auto_mpi_discovery=False)
    else:
        dist.init_process_group(args.backend, init_method="env://")


def expert_mlp(hidden):
    import torch
    return torch.nn.Sequential(torch.nn.Linear(hidden, 2 * hidden),
                               torch.nn.ReLU(),
                               torch.nn.Linear(2 * hidden, hidden))


def build_deepspeed(args):
    """deepspeed.moe.layer.MoE; its groups from deepspeed.utils.groups."""
    from deepspeed.moe.layer import MoE
    from deepspeed.utils import groups
    moe = MoE(hidden_size=args.hidden, expert=expert_mlp(args.hidden),
              num_experts=args.ep_size * args.local_experts,
              ep_size=args.ep_size, k=2, capacity_factor=2.0,
              min_capacity=4, drop_tokens=True, use_rts=False)
    moe.set_deepspeed_parallelism()
    name = moe.expert_group_name
    ep_group = groups._get_expert_parallel_group(name)
    edp_group = groups._get_expert_data_parallel_group(name)

    def forward(x):
        out, l_aux, _ = moe(x)
        return out, l_aux

    # DeepSpeed marks expert parameters with allreduce=False.
    def is_expert(p):
        return not getattr(p, "allreduce", True)

    return moe, forward, is_expert, ep_group, edp_group


def build_fairscale(args):
    """fairscale.nn.moe.MOELayer with its Top2Gate over an expert-parallel
    group from torch.distributed.new_group."""
    import torch
    import torch.distributed as dist
    from fairscale.nn.moe import MOELayer, Top2Gate
    world, rank = dist.get_world_size(), dist.get_rank()
    ep_group = edp_group = None
    for first in range(0, world, args.ep_size):
        g = dist.new_group(list(range(first, first + args.ep_size)))
        if first <= rank < first + args.ep_size:
            ep_group = g
    for offset in range(args.ep_size):
        g = dist.new_group(list(range(offset, world, args.ep_size)))
        if rank % args.ep_size == offset:
            edp_group = g
    gate = Top2Gate(args.hidden, args.ep_size * args.local_experts)
    experts = torch.nn.ModuleList(expert_mlp(args.hidden)
                                  for _ in range(args.local_experts))
    moe = MOELayer(gate, experts, group=ep_group)
    # MOELayer marks only the parameters of the experts argument (a bug of
    # its loop); mark each expert's, as the layer means to.
    for p in experts.parameters():
        p.expert = True

    def forward(x):
        out = moe(x.reshape(args.local_experts, -1, args.hidden))
        return out.reshape(x.shape), moe.l_aux

    def is_expert(p):
        return getattr(p, "expert", False)

    return moe, forward, is_expert, ep_group, edp_group


def build_megatron(args):
    """megatron.core's MoELayer, with its groups from parallel_state."""
    import torch
    from megatron.core import parallel_state
    from megatron.core.transformer.moe.moe_layer import MoELayer
    from megatron.core.transformer.transformer_config import \
        TransformerConfig
    from megatron.core.models.gpt.gpt_layer_specs import \
        get_gpt_layer_local_spec
    parallel_state.initialize_model_parallel(
        expert_model_parallel_size=args.ep_size)
    config = TransformerConfig(
        num_layers=1, hidden_size=args.hidden, num_attention_heads=1,
        ffn_hidden_size=2 * args.hidden, moe_ffn_hidden_size=2 * args.hidden,
        num_moe_experts=args.ep_size * args.local_experts,
        moe_router_topk=2, expert_model_parallel_size=args.ep_size,
        moe_token_dispatcher_type=args.megatron_dispatcher,
        use_cpu_initialization=True,
        params_dtype=torch.float32, add_bias_linear=False)
    spec = get_gpt_layer_local_spec(num_experts=config.num_moe_experts,
                                    moe_grouped_gemm=False)
    moe = MoELayer(config, spec.submodules.mlp.submodules)
    ep_group = parallel_state.get_expert_model_parallel_group()
    edp_group = parallel_state.get_expert_data_parallel_group()

    def forward(x):
        out, _ = moe(x.reshape(-1, 1, args.hidden))
        return out.reshape(x.shape), torch.zeros(())

    def is_expert(p):
        return not getattr(p, "allreduce", True)

    return moe, forward, is_expert, ep_group, edp_group


def run_rank(args):
    import torch
    import torch.distributed as dist
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    init_backend(args)
    rank, world = dist.get_rank(), dist.get_world_size()
    build = {"deepspeed": build_deepspeed, "fairscale": build_fairscale,
             "megatron": build_megatron}[args.framework]
    moe, forward, is_expert, ep_group, edp_group = build(args)
    # Every rank starts from the same dense weights (as after DDP's
    # broadcast); experts stay as their ranks made them.
    torch.manual_seed(args.seed + 1)
    for p in moe.parameters():
        if not is_expert(p):
            dist.broadcast(p.data, 0)
    opt = torch.optim.SGD(moe.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(args.seed + 100 + rank)
    target_w = torch.randn(args.hidden, args.hidden,
                           generator=torch.Generator().manual_seed(7))
    edp_size = dist.get_world_size(edp_group)
    losses = []
    for _ in range(args.steps):
        x = torch.randn(args.tokens, args.hidden, generator=gen)
        y = torch.tanh(x @ target_w)
        opt.zero_grad()
        out, l_aux = forward(x)
        loss = torch.nn.functional.mse_loss(out, y) + 0.01 * l_aux
        loss.backward()
        for p in moe.parameters():
            if p.grad is None:
                continue
            if is_expert(p):
                dist.all_reduce(p.grad, group=edp_group)
                p.grad /= edp_size
            else:
                dist.all_reduce(p.grad)
                p.grad /= world
        opt.step()
        losses.append(loss.item())
    backends = sorted({str(dist.get_backend(g))
                       for g in (None, ep_group, edp_group)})
    print(json.dumps({"rank": rank, "losses": losses, "backends": backends,
                      "ep_size": dist.get_world_size(ep_group),
                      "edp_size": edp_size}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), WORLD_SIZE=str(args.world_size),
               OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu")
    procs = []
    for rank in range(args.world_size):
        env_r = dict(env, RANK=str(rank), LOCAL_RANK=str(rank),
                     LOCAL_SIZE=str(args.world_size))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), *sys.argv[1:],
             "--rank", str(rank)],
            env=env_r, stdout=subprocess.PIPE, text=True))
    results, failed = [], False
    for rank, proc in enumerate(procs):
        try:
            out, _ = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print(f"moe_frameworks: rank {rank} did not finish within "
                  f"{args.timeout} s", file=sys.stderr)
            return 1
        lines = [ln for ln in out.splitlines() if ln.startswith('{"rank"')]
        if proc.returncode != 0 or len(lines) != 1:
            print(f"moe_frameworks: rank {rank} exited {proc.returncode}",
                  file=sys.stderr)
            failed = True
            continue
        results.append(json.loads(lines[0]))
    if failed:
        return 1
    results.sort(key=lambda r: r["rank"])
    print(json.dumps({"framework": args.framework, "backend": args.backend,
                      "world_size": args.world_size,
                      "ep_size": results[0]["ep_size"],
                      "edp_size": results[0]["edp_size"],
                      "backends": results[0]["backends"],
                      "losses": [r["losses"] for r in results]}))
    return 0


def main():
    args = parse_args()
    if args.rank is not None:
        # Frameworks print banners on stdout: only the JSON line counts.
        run_rank(args)
        return 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
