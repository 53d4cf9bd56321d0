"""Prints what meson needs to build the extension against the torch of
the python running this script, one `key<TAB>value` a line (lists joined by
'|'); exits 1 with the reason on stderr when torch cannot be imported.

    python torch_config.py   (meson runs it with -Dtorch_python's python)

The ABI flags are torch's own: its C++11-ABI macro, and pybind11's
compiler/stdlib/ABI tags where torch still exports them (pybind11 3,
which torch bundles, handles them itself), so Store and Work objects pass
between torch's bindings and ours.
"""
import sys
import warnings

warnings.filterwarnings("ignore")
try:
    import torch
    import torch.utils.cpp_extension as cpp_ext
except Exception as e:  # any import failure switches the backend off
    print(f"{sys.executable} cannot import torch: {e}", file=sys.stderr)
    sys.exit(1)

flags = [f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
for name in ("COMPILER_TYPE", "STDLIB", "BUILD_ABI"):
    value = getattr(torch._C, f"_PYBIND11_{name}", None)
    if value is not None:
        flags.append(f'-DPYBIND11_{name}="{value}"')
# The CUDA toolkit's headers that torch's CUDA headers include (CUDA_HOME:
# $CUDA_HOME, nvcc's, or /usr/local/cuda), for a CUDA build of torch.
cuda_include = ""
if torch.version.cuda:
    try:
        extra = [p for p in cpp_ext.include_paths("cuda")
                 if p not in cpp_ext.include_paths()]
        cuda_include = "|".join(extra)
    except Exception:  # no toolkit: the backend is built for CPU only
        cuda_include = ""
for key, value in (("version", torch.__version__),
                   ("include", "|".join(cpp_ext.include_paths())),
                   ("libdir", "|".join(cpp_ext.library_paths())),
                   ("flags", "|".join(flags)),
                   ("cuda", torch.version.cuda or ""),
                   ("cuda_include", cuda_include)):
    print(f"{key}\t{value}")
