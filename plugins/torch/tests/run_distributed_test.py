#!/usr/bin/python3
"""Run PyTorch's own distributed tests on the switchyard backend, with gloo
as the oracle in the same run.

    run_distributed_test.py [--world-size N ...] [--only NAME ...]

For each world size, runs the selected tests of torch's
torch/testing/_internal/distributed/distributed_test.py (shipped by
python3-torch; its driver is not) once with BACKEND=gloo and once with
BACKEND=switchyard, each in a child python, prints both backends' counts,
and fails when a test that passes on gloo does not pass on switchyard.
Exits 77 when torch or the switchyard package cannot be imported.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types
import unittest

# What the issue asks for, minus what 1.13 runs only on GPUs (reduce_scatter
# has no CPU test there). Tests on groups [1, 2] skip below 3 ranks.
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
    # DDP on CPU (the hook parity and comm hook logging tests need GPUs in
    # 1.13; test_backend.py checks DDP's comm hooks against gloo instead)
    "test_DistributedDataParallelCPU",
    "test_DistributedDataParallelCPU_grad_is_view",
    "test_ddp_create_graph", "test_ddp_logging_data_cpu",
]

# Tests that 1.13 gates to gloo (or gloo, nccl and mpi) by name although
# they only use the ProcessGroup API: run as test_sy_<name>, on both
# backends alike. (The gates only mark the test function skipped.) Not
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

    # expecttest is not packaged; torch's harness only needs these names.
    stand_in = types.ModuleType("expecttest")
    stand_in.TestCase = unittest.TestCase
    stand_in.ACCEPT = False
    sys.modules["expecttest"] = stand_in

    import torch.multiprocessing
    from torch.testing._internal.common_distributed import DistTestCases
    if backend == "switchyard":
        import switchyard.torch  # noqa: F401  (registers the backend)
        # "gpu" gates CPU tests too (objects, most DDP ones) in 1.13.
        for feature in ("plugin", "ddp", "subgroup", "gpu"):
            DistTestCases.backend_feature[feature].add("switchyard")
    # The harness turns on DDP's ReplicatedTensor mode, which imports
    # torch.distributed._shard: that fails on Python 3.11.
    import torch.nn.parallel._replicated_tensor_ddp_utils as replicated
    replicated._set_ddp_with_replicated_tensor = lambda value: None
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

    for name in UNGATED:
        body = getattr(DistributedTest._DistTestBase, name)
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
