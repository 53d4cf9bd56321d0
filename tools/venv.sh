#!/usr/bin/env bash
# Create or update the project's Python virtual environment: PyTorch 2.x
# (PyPI's CUDA build, several GB), the tools the torch backend builds and
# tests with, and the frameworks whose MoE layers the torch suite trains
# (tools/python/requirements.txt, pinned).
#
#   tools/venv.sh            create/update; prints the venv's python
#
# The packages are fetched once into a wheelhouse beside the venv (the
# package index here forbids HTTP caching, so pip's cache holds nothing);
# the venv, and the fresh venvs that the install test makes, install from
# it without the network. Idempotent: the venv keeps the hash of the
# requirements it was made from, and a run whose hash matches installs
# nothing.
# Environment: SWY_VENV (default ~/.cache/switchyard/venv), SWY_WHEELHOUSE
# (default ~/.cache/switchyard/wheels), SWY_VENV_PYTHON (the interpreter
# the venv is made from, default python3; Debian's needs python3-venv).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${SWY_VENV:-$HOME/.cache/switchyard/venv}
wheelhouse=${SWY_WHEELHOUSE:-$HOME/.cache/switchyard/wheels}
base_python=${SWY_VENV_PYTHON:-python3}
requirements=$here/tools/python/requirements.txt
stamp=$venv/.swy-requirements.sha256

# The stamp covers the interpreter too: a venv made from another python
# is made again.
want=$( { cat "$requirements"; "$base_python" -c \
    'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)
if [[ -x $venv/bin/python && -f $stamp && $(cat "$stamp") == "$want" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

if [[ ! -x $venv/bin/python ]]; then
    echo "venv: creating $venv from $("$base_python" -c \
        'import sys; print(sys.executable, sys.version.split()[0])')" >&2
    mkdir -p "$(dirname "$venv")"
    if ! "$base_python" -m venv "$venv"; then
        echo "venv: '$base_python -m venv' failed (Debian: apt-get install" \
             "python3-venv)" >&2
        exit 1
    fi
fi
rm -f "$stamp"
pip=("$venv/bin/python" -m pip --quiet)
mkdir -p "$wheelhouse"
# Wheels for every pin (sdists such as deepspeed's built once): from the
# wheelhouse alone when it has them all, else from the index.
if ! "${pip[@]}" wheel --no-index --find-links "$wheelhouse" \
        -w "$wheelhouse" -r "$requirements" >/dev/null 2>&1; then
    echo "venv: fetching tools/python/requirements.txt into $wheelhouse" >&2
    "${pip[@]}" wheel --find-links "$wheelhouse" -w "$wheelhouse" \
        -r "$requirements" >&2
fi
echo "venv: installing tools/python/requirements.txt into $venv" >&2
"${pip[@]}" install --no-index --find-links "$wheelhouse" \
    -r "$requirements" >&2
"$venv/bin/python" -c 'import torch' >&2
echo "$want" >"$stamp"
echo "$venv/bin/python"
