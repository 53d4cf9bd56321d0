#!/usr/bin/env bash
# gpu-check.sh: the GPU checks of Switchyard as one bounded script, for a
# machine with an NVIDIA GPU that lacks Debian's packages (the lent GPU
# machines of the development environment: nvcc, meson and ninja, NCCL as
# the nvidia-nccl-cu13 Python package, but no UCX, hwloc or libevent).
#
#   tools/gpu-check.sh deps [DIR]   here, on Debian 12 as root: download
#                                   the libraries the build needs and
#                                   unpack them under DIR (default .deps,
#                                   which git ignores); carry DIR along
#   tools/gpu-check.sh run [DIR]    on the GPU machine: build a release
#                                   tree (build-gpu) against DIR's
#                                   libraries, run the gpu suite,
#                                   swy-kbench and swy-train in fp32,
#                                   bf16 and bf16 with grouped GEMMs,
#                                   bench-hier.sh on its cores (root);
#                                   logs and JSON lines into $OUT
#                                   (default gpu-out), a summary last
#
# Each step is bounded (timeout), a failed step is reported and the next
# one still runs; the exit status is that of the gpu suite. Environment:
# OUT, NCCL_DIR (default: the nvidia.nccl package of python3), GPU_ARCH
# (default 90), PEAKS (swy-kbench's peak flags; default the H200's), STEPS
# (training steps, default 200), SUITE_TIMEOUT_S (default 300),
# HIER_REPEAT (bench-hier.sh's REPEAT, default 3),
# TORCH_PYTHON (a python with PyPI's torch 2.x: the gpu suite then also
# runs the torch backend on CUDA tensors, plugins/torch/tests/test_cuda.py;
# the lent machines have no torch, so it is off by default).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cmd=${1:-}
deps=${2:-$here/.deps}
[[ $deps == /* ]] || deps=$PWD/$deps

# The runtime and -dev packages of the build's dependencies (ucx, hwloc,
# libevent, OpenBLAS for the CPU references of the tests), as BUILD-NOTES
# lists them.
packages=(libucx0 libucx-dev libibverbs1 librdmacm1 libnuma1 libhwloc15
          libhwloc-dev libudev1 libevent-2.1-7 libevent-core-2.1-7
          libevent-extra-2.1-7 libevent-openssl-2.1-7
          libevent-pthreads-2.1-7 libevent-dev libopenblas0-pthread
          libopenblas-dev libopenblas-pthread-dev)

fetch_deps() {
    if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
        echo "gpu-check: deps needs apt-get and dpkg (Debian 12)" >&2
        return 2
    fi
    mkdir -p "$deps/debs" "$deps/root" || return 2
    (cd "$deps/debs" && apt-get download "${packages[@]}") || {
        echo "gpu-check: apt-get download failed (apt-get update first?)" >&2
        return 2
    }
    for f in "$deps"/debs/*.deb; do
        dpkg -x "$f" "$deps/root" || return 2
    done
    # What the build and the runs need: no static libraries, no manuals
    # (carry holds 64 MiB with the working tree).
    rm -rf "$deps/debs" "$deps/root/usr/share/doc" "$deps/root/usr/share/man"
    find "$deps/root" -name '*.a' -delete
    echo "gpu-check: $(du -sh "$deps" | cut -f1) in $deps; carry it" \
         "(run's carry: [\"${deps#"$here"/}\"])"
}

# Point the compiler, pkg-config and the loader into DIR's libraries.
use_deps() {
    local root=$deps/root multi=x86_64-linux-gnu
    [[ -d $root ]] || return 0
    local lib=$root/usr/lib/$multi
    export PKG_CONFIG_SYSROOT_DIR=$root
    export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$root/usr/share/pkgconfig
    export CPATH=$root/usr/include:$root/usr/include/$multi${CPATH:+:$CPATH}
    export LIBRARY_PATH=$lib:$lib/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # libblas.so.3 is an alternatives link to OpenBLAS on Debian.
    [[ -e $lib/libblas.so.3 || ! -e $lib/openblas-pthread/libblas.so.3 ]] ||
        ln -s openblas-pthread/libblas.so.3 "$lib/libblas.so.3"
}

nccl_dir() {
    if [[ -n ${NCCL_DIR:-} ]]; then
        echo "$NCCL_DIR"
        return
    fi
    local py
    for py in python3 /usr/bin/python3; do
        "$py" -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])' 2>/dev/null && return
    done
}

step() { # step NAME TIMEOUT_S CMD...: run, log into $out/NAME.log, report
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    local what=ok
    [[ $rc -eq 0 ]] || what="FAILED (exit $rc$([[ $rc -eq 124 ]] && echo ", timed out after ${limit} s"))"
    printf '%-12s %-40s %4d s\n' "$name" "$what" $((SECONDS - t0)) |
        tee -a "$out/summary.txt"
    return $rc
}

run_checks() {
    out=${OUT:-$here/gpu-out}
    mkdir -p "$out"
    : >"$out/summary.txt"
    use_deps
    local nccl
    nccl=$(nccl_dir)
    {
        echo "# gpu-check $(date -u +%FT%TZ) tree $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '(no git)')"
        if command -v nvidia-smi >/dev/null; then
            nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm \
                --format=csv,noheader 2>&1 | sed 's/^/# gpu: /'
        else
            echo "# gpu: no nvidia-smi"
        fi
        echo "# nvcc: $(nvcc --version 2>/dev/null | tail -1)"
        echo "# nccl: ${nccl:-not found}"
    } | tee -a "$out/summary.txt"
    local build=$here/build-gpu
    rm -rf "$build"
    # The torch backend's CUDA test (test_cuda.py, suite gpu) where a
    # python with a CUDA build of torch 2.x is given (TORCH_PYTHON).
    local torch_opts=(-Dtorch=disabled)
    [[ -n ${TORCH_PYTHON:-} ]] &&
        torch_opts=(-Dtorch=enabled -Dtorch_python="$TORCH_PYTHON")
    step setup 300 meson setup "$build" "$here" -Dbuildtype=release \
        -Dcuda=enabled -Dgpu_arch="${GPU_ARCH:-90}" -Dnccl_dir="$nccl" \
        "${torch_opts[@]}" -Dmpi=disabled || return 2
    step build 900 ninja -C "$build" || return 2
    export SWY_PLUGIN_PATH
    SWY_PLUGIN_PATH=$(cat "$build/plugin-path" 2>/dev/null)
    export CUDA_MODULE_LOADING=EAGER
    step suite "${SUITE_TIMEOUT_S:-300}" meson test -C "$build" --suite gpu \
        --num-processes 1 --print-errorlogs
    local suite_rc=$?
    cp "$build/meson-logs/testlog.txt" "$out/testlog.txt" 2>/dev/null
    grep -E '^(Ok|Fail|Skipped|Timeout):' "$out/suite.log" |
        tr -s ' ' | paste -sd' ' | sed 's/^/suite counts: /' |
        tee -a "$out/summary.txt"
    step kbench 300 "$build/tools/swy-kbench/swy-kbench" \
        ${PEAKS:---peak-tflops-bf16 989 --peak-tflops-fp32 67 --peak-gbs 4800} \
        --json
    # The training of docs/performance.md's "gpu" row, fp32 then bf16.
    local model=(--device cuda --layers 4 --hidden 1024 --ffn 4096
                 --experts-per-rank 8 --top-k 2 --tokens-per-rank 4096
                 --vocab 2048 --lr 5e-4 --steps "${STEPS:-200}" --json)
    local dt
    for dt in fp32 bf16; do
        step "train-$dt" 240 "$build/tools/swy-run/swy-run" -n 1 \
            "$build/tools/swy-train/swy-train" "${model[@]}" --dtype "$dt"
    done
    # bf16 again with the expert FFN's grouped GEMMs (off by default).
    SWY_KC_GROUPED=1 step train-bf16-grouped 240 \
        "$build/tools/swy-run/swy-run" -n 1 \
        "$build/tools/swy-train/swy-train" "${model[@]}" --dtype bf16
    # The hier benchmark (docs/performance.md, "hier") on this machine's
    # cores, a core per rank: the 2 x 4 emulated cluster needs root, ip
    # and tc (else the step reports 77). Host buffers: alltoallv/hier
    # takes no device buffers yet, and one GPU runs one rank.
    REPEAT=${HIER_REPEAT:-3} BUILD_DIR=$build step hier 300 \
        "$here/tools/bench-hier.sh"
    grep -A8 '== summary' "$out/hier.log" 2>/dev/null |
        tee -a "$out/summary.txt"
    python3 - "$out" <<'EOF' | tee -a "$out/summary.txt"
import json, sys
out, runs = sys.argv[1], {}
for dt in ("fp32", "bf16", "bf16-grouped"):
    try:
        for line in open(f"{out}/train-{dt}.log"):
            if "{" in line and '"bench":"train"' in line:
                runs[dt] = json.loads(line[line.index("{"):])
    except (OSError, ValueError):
        pass
for dt, r in runs.items():
    print(f"train {dt}: {r.get('tokens_per_s')} tokens/s, loss "
          f"{r.get('loss_first')} -> {r.get('loss_last')}")
if len(runs) == 2:
    f, b = runs["fp32"], runs["bf16"]
    print(f"bf16 over fp32: {b['tokens_per_s'] / f['tokens_per_s']:.2f}x "
          f"tokens/s (target >= 1.5x); last loss "
          f"{100 * (b['loss_last'] / f['loss_last'] - 1):+.2f}% (within 1%)")
if "bf16" in runs and "bf16-grouped" in runs:
    b, g = runs["bf16"], runs["bf16-grouped"]
    print(f"bf16 grouped over bf16: "
          f"{g['tokens_per_s'] / b['tokens_per_s']:.2f}x tokens/s; last loss "
          f"{g['loss_last']} against {b['loss_last']}")
EOF
    echo "suite exit $suite_rc; files in $out" | tee -a "$out/summary.txt"
    return $suite_rc
}

case $cmd in
deps) fetch_deps ;;
run) run_checks ;;
*)
    sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    [[ $cmd == -h || $cmd == --help ]]
    ;;
esac
