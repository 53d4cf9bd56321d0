#!/usr/bin/env bash
# Install into a temporary root and import the installed `switchyard`
# package with the torch python (a venv's) and nothing of the build tree
# in the environment, then run a one-rank allreduce through the backend
# (the extension finds libtorch by its RPATH, the library its transport
# plugins beside itself).
# Usage: test_install.sh BUILD_ROOT PYTHON SITE_DIR LIBDIR
set -euo pipefail
build=$1 python=$2 site=$3 libdir=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

meson install -C "$build" --no-rebuild --destdir "$tmp/root" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; echo "FAIL: meson install"; exit 1; }
[[ -d $tmp/root$site/switchyard ]] ||
    { echo "FAIL: no package in $site"; exit 1; }

cd "$tmp"
env -u SWY_PLUGIN_PATH PYTHONPATH="$tmp/root$site" \
    LD_LIBRARY_PATH="$tmp/root$libdir" "$python" - <<'PY'
import os
import torch
import torch.distributed as dist
import switchyard.torch

assert "/root/" in switchyard.torch.__file__, switchyard.torch.__file__
dist.init_process_group("switchyard", init_method="file://" +
                        os.path.join(os.getcwd(), "store"),
                        rank=0, world_size=1)
t = torch.arange(4.0)
dist.all_reduce(t)
assert torch.equal(t, torch.arange(4.0)), t
dist.destroy_process_group()
print("installed package:", switchyard.torch.__file__)
PY
