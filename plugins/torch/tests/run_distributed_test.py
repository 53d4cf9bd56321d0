#!/usr/bin/python3
"""Run PyTorch's own distributed tests on the switchyard backend, with gloo
as the oracle in the same run.

    run_distributed_test.py [--world-size N ...] [--only NAME ...]

For each world size, runs the selected tests of torch's
torch/testing/_internal/distributed/distributed_test.py (shipped in
PyPI's torch wheel; its driver is not; it needs `expecttest` from PyPI)
once with BACKEND=gloo and once with BACKEND=switchyard, each in a child
python, prints both backends' counts, and fails when a test that passes
on gloo does not pass on switchyard. Exits 77 when torch, expecttest or
the switchyard package cannot be imported.
"""
import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

# What the 1.13 driver ran, plus torch 2.x's ops on CPU (the file tests
# all_gather_into_tensor, reduce_scatter_tensor, the coalescing manager and
# DeviceMesh on GPUs only: test_sy_* below run them on CPU, the same code
# on both backends). Tests on groups [1, 2] skip below 3 ranks; the
# subgroup tests need 4 ranks.
SELECTED = [
    # all_reduce
    "test_all_reduce_sum", "test_all_reduce_sum_async",
    "test_all_reduce_sum_complex", "test_all_reduce_complex_unsupported_ops",
    "test_all_reduce_product", "test_all_reduce_min", "test_all_reduce_max",
    "test_all_reduce_group_sum", "test_all_reduce_full_group_max",
    # broadcast
    "test_broadcast", "test_broadcast_group", "test_broadcast_full_group",
    "test_broadcast_object_list",
    # all_gather
    "test_all_gather", "test_all_gather_complex", "test_all_gather_group",
    "test_all_gather_full_group", "test_all_gather_coalesced_simple",
    "test_all_gather_coalesced_with_empty", "test_all_gather_coalesced_group",
    "test_all_gather_object_default_pg", "test_all_gather_object_subgroup",
    # reduce, gather, scatter
    "test_reduce_sum", "test_reduce_max", "test_reduce_full_group_min",
    "test_gather", "test_gather_object", "test_scatter",
    "test_sy_scatter_object_list",
    # send/recv
    "test_send_recv", "test_isend", "test_irecv", "test_send_recv_any_source",
    "test_send_recv_any_source_autograd_profiler",
    "test_send_recv_with_tag", "test_sy_batch_isend_irecv_gloo",
    "test_sy_batch_isend_irecv_gloo_tags",
    # barrier
    "test_barrier", "test_barrier_group", "test_barrier_full_group",
    # new_group / subgroups
    "test_new_subgroups", "test_new_subgroups_by_enumeration",
    "test_get_rank_size_group", "test_destroy_group",
    # all_to_all (CPU tests gated to MPI in 1.13: their helpers, below)
    "test_sy_all_to_all_single_equal_split",
    "test_sy_all_to_all_single_unequal_split",
    "test_sy_all_to_all_single_equal_split_full_group",
    "test_sy_all_to_all_single_unequal_split_group",
    "test_sy_all_to_all", "test_sy_all_to_all_group",
    # gated to named backends in 1.13 (run through UNGATED)
    "test_sy_all_reduce_coalesced_sum", "test_sy_all_reduce_coalesced_max",
    "test_sy_all_reduce_coalesced_full_group_sum",
    # DDP on CPU (the hook parity and comm hook logging tests need GPUs;
    # test_backend.py checks DDP's comm hooks against gloo instead). Not
    # test_ddp_logging_data_cpu: torch's ProcessGroup names every backend
    # registered from outside "custom" in DDP's logging data, which the
    # test compares with the backend's name.
    "test_DistributedDataParallelCPU",
    "test_DistributedDataParallelCPU_grad_is_view",
    "test_ddp_create_graph",
    # torch 2.x on CPU
    "test_sy_all_gather_into_tensor", "test_sy_reduce_scatter_tensor",
    "test_sy_coalescing_manager", "test_sy_all_to_all_single_autograd",
    "test_sy_functional_collectives", "test_sy_device_mesh",
    "test_sy_object_collectives_subgroup", "test_sy_split_group",
]

# Tests that torch gates to gloo (or gloo, nccl and mpi) by name although
# they only use the ProcessGroup API: run as test_sy_<name>, on both
# backends alike, their body without the decorators (the gates replace
# the test with one that raises SkipTest). Not
# test_accumulate_gradients_no_sync_allreduce_hook: its helper builds its
# model only for BACKEND gloo, mpi or nccl.
UNGATED = [
    "test_all_reduce_coalesced_sum", "test_all_reduce_coalesced_max",
    "test_all_reduce_coalesced_full_group_sum", "test_scatter_object_list",
    "test_batch_isend_irecv_gloo", "test_batch_isend_irecv_gloo_tags",
]

RESULT_TAG = "SWY_DIST_RESULT "


def run_child(backend, world_size, names):
    """In a child python: run names on backend, print one result line."""
    os.environ["BACKEND"] = backend
    os.environ["WORLD_SIZE"] = str(world_size)
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="swy-dist-")
    os.environ.setdefault("DISTRIBUTED_TESTS_DEFAULT_TIMEOUT", "120")
    sys.argv = sys.argv[:1]  # common_utils parses the command line

    import torch
    import torch.distributed as dist
    import torch.multiprocessing
    from torch.testing._internal.common_distributed import DistTestCases
    if backend == "switchyard":
        import switchyard.torch  # noqa: F401  (registers the backend)
        # "gpu" gates CPU tests too (objects, most DDP ones).
        for feature in ("plugin", "ddp", "subgroup", "gpu"):
            DistTestCases.backend_feature[feature].add("switchyard")
    from torch.testing._internal.distributed.distributed_test import (
        DistributedTest, TestDistBackend)

    class TestDist(TestDistBackend, DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            # fork: the ranks inherit the imports (spawn re-imports torch
            # in every rank of every test).
            self._start_processes(
                torch.multiprocessing.get_context("fork").Process)

        def test_sy_all_to_all_single_equal_split(self):
            self._test_all_to_all_single_equal_split_helper(
                *self._init_global_test())

        def test_sy_all_to_all_single_unequal_split(self):
            self._test_all_to_all_single_unequal_split_helper(
                *self._init_global_test())

        def test_sy_all_to_all_single_equal_split_full_group(self):
            self._test_all_to_all_single_equal_split_helper(
                *self._init_full_group_test())

        def test_sy_all_to_all_single_unequal_split_group(self):
            if int(self.world_size) <= 2:
                sys.exit(77)  # the group is [1, 2]; harness: skipped
            self._test_all_to_all_single_unequal_split_helper(
                *self._init_group_test())

        def test_sy_all_to_all(self):
            self._test_all_to_all_helper(*self._init_global_test())

        def test_sy_all_to_all_group(self):
            if int(self.world_size) <= 2:
                sys.exit(77)
            self._test_all_to_all_helper(*self._init_group_test())

        # torch 2.x's ops on CPU: the same code on both backends, checked
        # against a serial reference.
        def test_sy_all_gather_into_tensor(self):
            group, _, rank = self._init_global_test()
            world = dist.get_world_size()
            for dtype in (torch.float32, torch.int64):
                inp = torch.full((2, 3), rank + 1, dtype=dtype)
                out = torch.empty(2 * world, 3, dtype=dtype)
                dist.all_gather_into_tensor(out, inp)
                want = torch.cat([torch.full((2, 3), r + 1, dtype=dtype)
                                  for r in range(world)])
                self.assertEqual(out, want)
            self._barrier()

        def test_sy_reduce_scatter_tensor(self):
            group, _, rank = self._init_global_test()
            world = dist.get_world_size()
            inp = torch.arange(world * 4, dtype=torch.float32) * (rank + 1)
            out = torch.empty(4)
            dist.reduce_scatter_tensor(out, inp)
            whole = torch.arange(world * 4, dtype=torch.float32) * sum(
                r + 1 for r in range(world))
            self.assertEqual(out, whole[4 * rank:4 * rank + 4])
            self._barrier()

        def test_sy_coalescing_manager(self):
            group, _, rank = self._init_global_test()
            world = dist.get_world_size()
            ins = [torch.full((n,), float(rank)) for n in (1, 4)]
            outs = [torch.empty(world * n) for n in (1, 4)]
            with dist.distributed_c10d._coalescing_manager(
                    async_ops=True) as cm:
                for o, i in zip(outs, ins):
                    dist.all_gather_into_tensor(o, i)
            cm.wait()
            for o, n in zip(outs, (1, 4)):
                self.assertEqual(o, torch.arange(world, dtype=torch.float32)
                                 .repeat_interleave(n))
            self._barrier()

        def test_sy_all_to_all_single_autograd(self):
            import torch.distributed.nn.functional as dist_fn
            group, _, rank = self._init_global_test()
            world = dist.get_world_size()
            x = torch.full((world, 2), float(rank + 1), requires_grad=True)
            y = dist_fn.all_to_all_single(torch.empty(world, 2), x)
            self.assertEqual(y, torch.arange(1, world + 1, dtype=torch.float32)
                             .unsqueeze(1).expand(world, 2))
            (y * (rank + 1)).sum().backward()
            self.assertEqual(x.grad, torch.arange(1, world + 1,
                                                  dtype=torch.float32)
                             .unsqueeze(1).expand(world, 2))
            self._barrier()

        def test_sy_functional_collectives(self):
            import torch.distributed._functional_collectives as funcol
            group, _, rank = self._init_global_test()
            world = dist.get_world_size()
            t = torch.full((3,), float(rank + 1))
            got = torch.as_tensor(funcol.all_reduce(t, "sum", dist.group.WORLD))
            self.assertEqual(got, torch.full((3,), world * (world + 1) / 2))
            got = torch.as_tensor(funcol.all_gather_tensor(
                t, 0, dist.group.WORLD))
            self.assertEqual(got, torch.arange(1, world + 1, dtype=torch.float32)
                             .repeat_interleave(3))
            self._barrier()

        def test_sy_device_mesh(self):
            from torch.distributed.device_mesh import init_device_mesh
            self._init_global_test()
            world = dist.get_world_size()
            dims = (world // 2, 2) if world % 2 == 0 else (1, world)
            mesh = init_device_mesh("cpu", dims, mesh_dim_names=("dp", "ep"))
            for name in ("dp", "ep"):
                g = mesh.get_group(name)
                ranks = dist.get_process_group_ranks(g)
                t = torch.ones(2) * (dist.get_rank() + 1)
                dist.all_reduce(t, group=g)
                self.assertEqual(t, torch.ones(2) * sum(r + 1 for r in ranks))
            self._barrier()

        def test_sy_object_collectives_subgroup(self):
            self._init_global_test()
            g = dist.new_group([0, 1])
            if dist.get_rank() in (0, 1):
                objs = [None, None]
                dist.all_gather_object(objs, {"r": dist.get_rank()}, group=g)
                self.assertEqual(objs, [{"r": 0}, {"r": 1}])
            self._barrier()

        def test_sy_split_group(self):
            self._init_global_test()
            world = dist.get_world_size()
            split = [[r for r in range(world) if r % 2 == 0],
                     [r for r in range(world) if r % 2 == 1]]
            g = dist.split_group(split_ranks=split)
            mine = split[dist.get_rank() % 2]
            t = torch.ones(1)
            dist.all_reduce(t, group=g)
            self.assertEqual(t, torch.full((1,), float(len(mine))))
            self._barrier()

    for name in UNGATED:
        body = inspect.unwrap(getattr(DistributedTest._DistTestBase, name))
        setattr(TestDist, "test_sy_" + name[len("test_"):],
                lambda self, body=body: body(self))

    outcome = {}

    class Collect(unittest.TextTestResult):
        def addSuccess(self, test):
            super().addSuccess(test)
            outcome[test.id().split(".")[-1]] = "pass"

        def addFailure(self, test, err):
            super().addFailure(test, err)
            outcome[test.id().split(".")[-1]] = "fail"

        def addError(self, test, err):
            super().addError(test, err)
            outcome[test.id().split(".")[-1]] = "fail"

        def addSkip(self, test, reason):
            super().addSkip(test, reason)
            outcome[test.id().split(".")[-1]] = "skip"

    suite = unittest.TestSuite(TestDist(name) for name in names)
    runner = unittest.TextTestRunner(resultclass=Collect, verbosity=2,
                                     stream=sys.stdout)
    runner.run(suite)
    sys.stdout.flush()
    print(RESULT_TAG + json.dumps(outcome), flush=True)


def run_backend(backend, world_size, names):
    """Runs the child for one backend; returns {test: outcome} and seconds."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", backend,
         "--world-size", str(world_size)] + names,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    elapsed = time.monotonic() - start
    outcome = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            outcome = json.loads(line[len(RESULT_TAG):])
    if outcome is None:
        print(proc.stdout)
        print(f"{backend}: the child exited {proc.returncode} without a "
              "result", file=sys.stderr)
        sys.exit(1)
    return outcome, elapsed, proc.stdout


def counts(outcome):
    return {k: sum(1 for v in outcome.values() if v == k)
            for k in ("pass", "fail", "skip")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, action="append")
    parser.add_argument("--only", action="append",
                        help="run only these tests (repeatable)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("names", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = args.world_size or [2]
    if args.child:
        run_child(args.child, sizes[0], args.names)
        return 0

    try:
        import expecttest  # noqa: F401  (torch's test harness needs it)
        import torch.distributed  # noqa: F401
        import switchyard.torch  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e}")
        return 77

    names = args.only or SELECTED
    unknown = sorted(set(names) - set(SELECTED))
    if unknown:
        print(f"not in SELECTED: {unknown}", file=sys.stderr)
        return 2
    ok = True
    for world_size in sizes:
        gloo, gloo_s, _ = run_backend("gloo", world_size, names)
        swy, swy_s, swy_log = run_backend("switchyard", world_size, names)
        print(f"== {world_size} ranks, {len(names)} tests of "
              "distributed_test.py")
        print(f"{'test':55} {'gloo':5} switchyard")
        for name in names:
            s = swy.get(name, "not run")
            print(f"{name:55} {gloo.get(name, '-'):5} {s}")
        regressions = [n for n in names if gloo.get(n) == "pass"
                       and swy.get(n) != "pass"]
        gc, sc = counts(gloo), counts(swy)
        print(f"gloo:       {gc['pass']} passed, {gc['fail']} failed, "
              f"{gc['skip']} skipped ({gloo_s:.0f} s)")
        print(f"switchyard: {sc['pass']} passed, {sc['fail']} failed, "
              f"{sc['skip']} skipped ({swy_s:.0f} s)")
        if gc["pass"] == 0:
            print("gloo passed nothing: the harness is broken")
            ok = False
        if regressions:
            print("passes on gloo but not on switchyard: "
                  + ", ".join(regressions))
            print(swy_log)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
