#!/usr/bin/env bash
# swy-bench c2c: on two CPUs it prints a round trip (text and JSON, the
# same figure, positive and below a millisecond); pinned to one CPU it
# says so and exits 2; bad options exit 2. Needs 2 CPUs and taskset:
# exits 77 otherwise.
# Usage: bench_c2c.sh SWY_BENCH
set -u
bench=$1
command -v taskset >/dev/null || { echo "no taskset: skipped"; exit 77; }
mapfile -t cpus < <(/usr/bin/python3 -c 'import os; print(*sorted(os.sched_getaffinity(0))[:2], sep="\n")')
((${#cpus[@]} >= 2)) || { echo "needs 2 CPUs: skipped"; exit 77; }
fail=0
bad() { echo "FAIL: $*"; fail=1; }

out=$("$bench" c2c --cpus "${cpus[0]},${cpus[1]}" --trips 2000 --rounds 3 \
    --json 2>&1) || bad "c2c exited $?: $out"
echo "$out"
/usr/bin/python3 - "$out" "${cpus[0]}" "${cpus[1]}" <<'PY' || fail=1
import json, re, sys
out, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
text = re.search(r"^c2c cpus (\d+),(\d+): round trip ([0-9.]+) ns median", out,
                 re.M)
line = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
assert text and len(line) == 1, "no result line and JSON line"
r = line[0]
assert (int(text[1]), int(text[2])) == (a, b) == tuple(r["cpus"]), r
assert float(text[3]) == r["round_trip_ns_median"], (text[3], r)
assert 0 < r["round_trip_ns_min"] <= r["round_trip_ns_median"] \
    <= r["round_trip_ns_max"] < 1e6, r
assert r["trips"] == 2000 and r["rounds"] == 3, r
PY

out=$(taskset -c "${cpus[0]}" "$bench" c2c --trips 10 2>&1)
rc=$?
[[ $rc == 2 && $out == *"fewer than two CPUs"* ]] ||
    bad "on one CPU: exit $rc, '$out'"
for args in "--cpus 0,0" "--cpus 1" "--cpus x,1" "--trips 0" "--rounds 0" \
    "--rounds 1001" "--bogus" "extra"; do
    out=$("$bench" c2c $args 2>&1)
    rc=$?
    [[ $rc == 2 ]] || bad "c2c $args: exit $rc (2 expected): $out"
done
exit $fail
