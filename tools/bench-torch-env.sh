# Sourced by tools/bench-torch.sh and tools/bench-torch-layer.sh (with
# prog set to the script's name): the build, the emulated cluster's shape,
# root, and the environment the ranks' PyTorch programs need.
# Environment: BUILD_DIR (default build), NODES and RANKS_PER_NODE
# (default 2 and 2). Sets here, build, nodes, rpn, swy_run, torch_python.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$here/build}
[[ $build == /* ]] || build=$PWD/$build
nodes=${NODES:-2}
rpn=${RANKS_PER_NODE:-2}
if [[ $(id -u) -ne 0 ]]; then
    echo "$prog: needs root (network namespaces); skipped" >&2
    exit 77
fi
swy_run=$build/tools/swy-run/swy-run
if [[ ! -x $swy_run || ! -d $build/plugins/torch/switchyard ]]; then
    echo "$prog: no swy-run or torch plugin in $build; build first" >&2
    exit 2
fi
export PYTHONPATH=$build/plugins/torch${PYTHONPATH:+:$PYTHONPATH}
export LD_LIBRARY_PATH=$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export SWY_PLUGIN_PATH=${SWY_PLUGIN_PATH:-$(cat "$build/plugin-path" 2>/dev/null || true)}
# The python the backend was built for (a venv's torch 2.x); one intra-op
# thread per rank, as torchrun sets; gloo on the nodes' eth0.
torch_python=$(cat "$build/plugins/torch/python" 2>/dev/null || echo python3)
export OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0
