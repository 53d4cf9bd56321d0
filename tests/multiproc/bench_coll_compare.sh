#!/usr/bin/env bash
# swy-bench coll's own comparison (--compare) on 2 ranks and tiny sizes:
#   1. --compare require: rank 0 runs Open MPI (swy-bench-mpi under
#      mpirun) and ucx_perftest after the job; the table has a row per op
#      and size with both medians, and the ratio, the bus bandwidths'
#      percentage of ucx_perftest and the JSON lines agree with them;
#   2. swy-bench-mpi missing (SWY_BENCH_MPI names nothing): auto says why
#      and succeeds, require fails with the reason.
# Timing is not asserted. Needs mpirun and ucx_perftest: exits 77
# without them.
# Usage: bench_coll_compare.sh SWY_RUN SWY_BENCH BUILD_DIR
set -u
swy_run=$1 swy_bench=$2 build=$3
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
command -v ucx_perftest >/dev/null || { echo "no ucx_perftest: skipped"; exit 77; }
[[ -x $build/tools/swy-bench-mpi/swy-bench-mpi ]] ||
    { echo "swy-bench-mpi not built: skipped"; exit 77; }
opts=(--min-size 4K --max-size 16K --iters 3 --json)

out=$("$swy_run" -n 2 --no-prefix --timeout 150 "$swy_bench" coll \
    --compare require "${opts[@]}" 2>&1)
rc=$?
echo "$out"
[[ $rc == 0 ]] || { echo "FAIL: --compare require exited $rc"; exit 1; }
/usr/bin/python3 - "$out" <<'PY' || exit 1
import json, re, sys
out = sys.argv[1]
m = re.search(r"^# limit: ucx_perftest tag_bw 16 MiB \(127\.0\.0\.1\): "
              r"([0-9.]+) GB/s \(%perftest: ", out, re.M)
assert m, "no ucx_perftest line"
perf = float(m[1])
assert perf > 0
assert re.search(r"^# openmpi: \S*mpirun --allow-run-as-root --oversubscribe "
                 r"-np 2 \S*swy-bench-mpi coll --json", out, re.M), \
    "no Open MPI command line"
rows = {}
for m in re.finditer(r"^(alltoallv|allreduce) +(4K|16K) +([0-9.]+) +"
                     r"([0-9.]+) +([0-9.]+)x +([0-9.]+) +([0-9.]+) +"
                     r"(?:([0-9]+)% +)?ok$", out, re.M):
    op, size = m[1], m[2]
    swy, mpi, ratio = float(m[3]), float(m[4]), float(m[5])
    # The table rounds times to 0.1 us and ratios to 0.01: a ratio is
    # right if some pair of times that round to the printed ones gives it.
    lo = max(mpi - 0.05, 0.0) / (swy + 0.05)
    hi = (mpi + 0.05) / max(swy - 0.05, 1e-9)
    assert lo - 0.005 <= ratio <= hi + 0.005, m[0]
    if op == "allreduce":
        pct = float(m[8])
        assert abs(pct - 100 * float(m[6]) / perf) <= 1, m[0]
    else:
        assert m[8] is None, m[0]
    rows[(op, size)] = (swy, mpi)
want = {(o, s) for o in ("alltoallv", "allreduce") for s in ("4K", "16K")}
assert set(rows) == want, f"rows {sorted(rows)}"
lines = [json.loads(l) for l in out.splitlines()
         if l.startswith('{"bench":"coll_compare"')]
assert len(lines) == 4, f"{len(lines)} coll_compare lines"
for j in lines:
    size = {4096: "4K", 16384: "16K"}[j["bytes"]]
    swy, mpi = rows[(j["op"], size)]
    assert abs(j["switchyard_us"] - swy) <= 0.05 + 1e-3 * swy, j
    assert abs(j["openmpi_us"] - mpi) <= 0.05 + 1e-3 * mpi, j
    assert abs(j["perftest_GBps"] - perf) <= 1e-3 + 1e-3 * perf, j
    assert j["check"] == "ok" and j["ranks"] == 2, j
print("comparison: 4 rows, ratios and JSON agree")
PY

out=$(SWY_BENCH_MPI=/nonexistent/swy-bench-mpi "$swy_run" -n 2 --no-prefix \
    --timeout 100 "$swy_bench" coll "${opts[@]}" 2>&1)
rc=$?
echo "$out"
[[ $rc == 0 ]] || { echo "FAIL: --compare auto without the peer exited $rc"; exit 1; }
grep -q "^# openmpi: not run: swy-bench-mpi not found" <<<"$out" ||
    { echo "FAIL: auto did not say why Open MPI did not run"; exit 1; }

out=$(SWY_BENCH_MPI=/nonexistent/swy-bench-mpi "$swy_run" -n 2 --no-prefix \
    --timeout 100 "$swy_bench" coll --compare=require "${opts[@]}" 2>&1)
rc=$?
echo "$out"
[[ $rc == 1 ]] || { echo "FAIL: --compare require without the peer exited $rc, not 1"; exit 1; }
grep -q "compare require: a peer did not run" <<<"$out" ||
    { echo "FAIL: require did not say what failed"; exit 1; }

out=$("$swy_run" -n 2 --no-prefix --timeout 60 "$swy_bench" coll \
    --compare sometimes "${opts[@]}" 2>&1)
rc=$?
[[ $rc != 0 ]] && grep -q "needs auto, none or require, not 'sometimes'" <<<"$out" ||
    { echo "$out"; echo "FAIL: a bad --compare was not refused (rc $rc)"; exit 1; }
echo "PASS"
