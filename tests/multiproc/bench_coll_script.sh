#!/usr/bin/env bash
# tools/bench-coll.sh end to end on 2 ranks and tiny sizes, twice over
# (REPEAT=2): every benchmark it runs checks its own results (the script
# exits 1 on a wrong one), and the comparison must have a row per op and
# size, the median of both ucx_perftest runs and both c2c figures of each
# run. Timing is not asserted. Needs mpirun and ucx_perftest: exits 77
# without them.
# Usage: bench_coll_script.sh BENCH_COLL_SH BUILD_DIR
set -u
script=$1 build=$2
command -v mpirun >/dev/null || { echo "no mpirun: skipped"; exit 77; }
command -v ucx_perftest >/dev/null || { echo "no ucx_perftest: skipped"; exit 77; }
[[ -x $build/tools/swy-bench-mpi/swy-bench-mpi ]] ||
    { echo "swy-bench-mpi not built: skipped"; exit 77; }
out=$(GLOO=0 REPEAT=2 BUILD_DIR=$build "$script" 2 --min-size 4K \
    --max-size 16K --iters 3 --batch 2 2>&1)
rc=$?
echo "$out"
[[ $rc == 0 ]] || { echo "FAIL: bench-coll.sh exited $rc"; exit 1; }
/usr/bin/python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
cmp = out[out.index("== comparison"):]
m = re.search(r"ucx_perftest tag_bw 16 MiB: ([0-9.]+) GB/s \(median of 2 "
              r"runs: ([0-9.]+) ([0-9.]+)\)", cmp)
assert m, "no ucx_perftest median of 2 runs"
a, b = float(m[2]), float(m[3])
assert abs(float(m[1]) - (a + b) / 2) < 1e-3 + 1e-3 * float(m[1]), m[0]
m = re.search(r"core-to-core round trip .*ns: (\d+)/(\d+)  (\d+)/(\d+)$",
              cmp, re.M)
assert m and all(int(x) > 0 for x in m.groups()), "no c2c figures per run"
for op in ("alltoallv", "allreduce"):
    for size in ("4K", "16K"):
        rows = re.findall(rf"^{op}\s+{size}\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+x",
                          cmp, re.M)
        assert len(rows) == 2, \
            f"{op} {size}: {len(rows)} rows (separate and paired expected)"
assert "WRONG" not in out
PY
