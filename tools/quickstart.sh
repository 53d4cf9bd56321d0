#!/usr/bin/env bash
# Switchyard quickstart: install what is missing (as root on Debian/Ubuntu),
# configure and build, then run the main job or the test suite.
#
#   tools/quickstart.sh [run [swy-train flags]]
#                                build and train the reference MoE model
#                                (swy-train) on 4 local ranks
#   tools/quickstart.sh test     build and run the whole test suite; first
#                                makes the project venv (tools/venv.sh:
#                                PyTorch 2.x and the MoE frameworks, some
#                                GB once) that the torch suite runs on
#   tools/quickstart.sh test-asan | test-tsan [meson test args]
#                                the sanitizer lane: its own build
#                                directory (build-asan, build-tsan) with
#                                -Db_sanitize, then meson test --setup
#                                asan|tsan (default: unit and
#                                multiproc suites for asan, unit for tsan)
#
# Idempotent: a second run installs nothing and rebuilds only what changed.
# Environment: BUILD_DIR (default build), SWY_QS_NO_INSTALL=1 skips apt.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
mode=${1:-run}
build=${BUILD_DIR:-build}
buildtype=release
setup_args=()
case $mode in
test-asan)
    build=${BUILD_DIR:-build-asan}
    buildtype=debugoptimized
    setup_args=(-Db_sanitize=address,undefined -Db_lundef=false)
    ;;
test-tsan)
    build=${BUILD_DIR:-build-tsan}
    buildtype=debugoptimized
    setup_args=(-Db_sanitize=thread -Db_lundef=false)
    ;;
esac

say() { printf '\n== %s\n' "$*"; }

# nftables: the packet-loss fault test (tests/emu, emu_fault_loss). g++,
# python3-dev and python3-venv: the torch.distributed backend
# (plugins/torch), built against PyTorch 2.x from PyPI in the project venv
# that `test` makes (tools/venv.sh); the main job needs no torch.
# libsimgrid-dev: swy-sim (tools/swy-sim) and its tests.
packages=(meson ninja-build pkg-config gcc libc6-dev
          libucx-dev ucx-utils libhwloc-dev hwloc libevent-dev
          openmpi-bin libopenmpi-dev iproute2 libopenblas-dev
          strace nftables g++ python3-dev python3-venv libsimgrid-dev)

# Read once and dropped: the library warns of every SWY_ variable it does
# not know, and the tests that count log lines would see that warning.
no_install=${SWY_QS_NO_INSTALL:-0}
unset SWY_QS_NO_INSTALL

install_missing() {
    [[ $no_install == 1 ]] && return 0
    local missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    if [[ $(id -u) -ne 0 ]]; then
        echo "quickstart: missing packages: ${missing[*]}" >&2
        echo "quickstart: run as root, or: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
}

configure_and_build() {
    # nvcc lives outside PATH on a stock CUDA install.
    if [[ -x /usr/local/cuda/bin/nvcc ]] && ! command -v nvcc >/dev/null; then
        export PATH=/usr/local/cuda/bin:$PATH
    fi
    if [[ ! -f $build/build.ninja ]]; then
        say "configuring $build"
        meson setup "$build" --buildtype=$buildtype "${setup_args[@]}"
    fi
    say "building"
    ninja -C "$build"
}

install_missing
if [[ $mode == test ]]; then
    # The torch suite's python: PyTorch 2.x and the frameworks, pinned; a
    # second run finds the venv up to date and installs nothing.
    say "project venv (tools/venv.sh)"
    torch_python=$("$here/tools/venv.sh")
    setup_args+=(-Dtorch_python="$torch_python")
    if [[ -f $build/build.ninja ]]; then
        meson configure "$build" -Dtorch_python="$torch_python"
    fi
fi
configure_and_build
# The library compiles in no build-tree path: name the build's plugins.
export SWY_PLUGIN_PATH=${SWY_PLUGIN_PATH:-$(cat "$build/plugin-path" 2>/dev/null || true)}

case $mode in
test)
    say "running the test suite"
    # Open MPI refuses root without these (peer benchmarks and MPI tests).
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    meson test -C "$build" --print-errorlogs --num-processes 1 \
        "${@:2}"
    ;;
test-asan|test-tsan)
    lane=${mode#test-}
    say "running the $lane lane"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # Default: asan over the unit and multiproc suites (about 16 minutes
    # on 2 cores, docs/reliability.md), tsan over the unit suite.
    suites=(--suite unit)
    [[ $lane == asan ]] && suites+=(--suite multiproc)
    if (($# > 1)); then
        suites=("${@:2}")
    fi
    meson test -C "$build" --setup "$lane" --print-errorlogs \
        --num-processes 1 "${suites[@]}"
    ;;
run)
    # The main job: train the reference MoE model (swy-train's defaults,
    # about a minute on 2 cores) and print its summary.
    if [[ ! -x $build/tools/swy-train/swy-train ]]; then
        echo "quickstart: swy-train was not built (it needs OpenBLAS:" \
             "libopenblas-dev); see the 'MoE kernels' line of meson's summary" >&2
        exit 1
    fi
    say "main job: swy-train on 4 local ranks"
    "$build/tools/swy-run/swy-run" -n 4 --no-prefix \
        "$build/tools/swy-train/swy-train" "${@:2}"
    ;;
*)
    echo "usage: tools/quickstart.sh [run [swy-train flags] | test |" \
         "test-asan | test-tsan]" >&2
    exit 2
    ;;
esac
