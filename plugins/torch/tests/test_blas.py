#!/usr/bin/python3
"""switchyard.launch's advice on OpenBLAS kernels against the C one that
swy-run follows (tools/common/blas_core.c): the same list of kernels older
than AVX2, no advice where the caller chose (OPENBLAS_CORETYPE) or the CPU
lacks AVX2, SkylakeX with AVX-512 and Haswell without, and an advice on
this machine exactly when the OpenBLAS that PyTorch loaded runs one of
those old kernels. Exits 77 when torch or the package cannot be imported.
"""
import ctypes
import os
import re
import sys
import tempfile

try:
    import torch  # noqa: F401
    from switchyard import launch
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)


def c_list(path):
    """The names in blas_core.c's pre_avx2_cores[]."""
    with open(path) as f:
        text = f.read()
    body = re.search(r"pre_avx2_cores\[\] = \{(.*?)\};", text, re.S)
    return {name.lower() for name in re.findall(r'"([^"]+)"', body.group(1))}


def advice(flags, env=None):
    with tempfile.NamedTemporaryFile("w", suffix=".cpuinfo") as f:
        f.write("processor\t: 0\nflags\t\t: " + " ".join(flags) + "\n")
        f.flush()
        return launch.blas_advice({} if env is None else env, f.name)


def main():
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("FAIL:", what)

    check(c_list(sys.argv[1]) == launch.PRE_AVX2_CORES,
          "the Python list of old kernels differs from blas_core.c's")
    lib = ctypes.CDLL("libblas.so.3")
    try:
        lib.openblas_get_corename.restype = ctypes.c_char_p
        core = lib.openblas_get_corename().decode()
    except AttributeError:
        print("skipped: the system's libblas is not OpenBLAS")
        return 77
    old = core.lower() in launch.PRE_AVX2_CORES
    avx512 = ["avx2", "fma", "avx512f", "avx512cd", "avx512bw", "avx512dq",
              "avx512vl"]
    check(advice(avx512) == ("SkylakeX" if old else None),
          f"AVX-512 CPU, kernels {core}: {advice(avx512)}")
    check(advice(["avx2", "fma"]) == ("Haswell" if old else None),
          f"AVX2 CPU, kernels {core}: {advice(['avx2', 'fma'])}")
    check(advice(["sse4_2", "avx"]) is None, "a CPU without AVX2")
    check(advice(avx512, {"OPENBLAS_CORETYPE": "Haswell"}) is None,
          "the caller's OPENBLAS_CORETYPE")
    print(f"OpenBLAS kernels here: {core}; advice: "
          f"{launch.blas_advice(os.environ)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
