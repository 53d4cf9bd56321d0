"""Switchyard: communication scheduling for distributed Mixture-of-Experts
training. `import switchyard.torch` registers the torch.distributed backend
"switchyard"; `switchyard.info()` (or `python -m switchyard`) tells what
this installation finds."""
import ctypes
import glob
import os
import sys

__all__ = ["info"]

# What the loader of the library reads; the library itself logs through
# swy_log, so the text comes back through swy_describe's buffer.
_DESCRIBE_BYTES = 256 << 10


def _loaded_library(stem):
    """Path of the shared object whose file name starts with `stem` that
    this process has mapped, or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if os.path.basename(path).startswith(stem):
                    return path
    except OSError:
        pass
    return None


def _library():
    """libswitchyard as the backend loads it: importing the extension maps
    the copy it was linked with (the wheel's, or the installed one). Without
    torch, the wheel's copy beside the package, then the linker's search."""
    error = None
    try:
        # torch first: it maps its own libraries (and the CUDA ones they
        # need) by path, which the extension's libtorch links then find.
        import torch  # noqa: F401
        from . import _C  # noqa: F401  (maps libswitchyard)
    except ImportError as exc:
        error = exc
    path = _loaded_library("libswitchyard.so")
    if path is None:
        here = os.path.dirname(os.path.abspath(__file__))
        candidates = glob.glob(os.path.join(
            os.path.dirname(here), ".switchyard.mesonpy.libs",
            "libswitchyard.so*"))
        path = candidates[0] if candidates else "libswitchyard.so.0"
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        return None, f"cannot load {path}: {exc}", error
    path = _loaded_library("libswitchyard.so") or path
    lib.swy_version.restype = ctypes.c_char_p
    lib.swy_describe.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                 ctypes.c_size_t]
    lib.swy_last_error.restype = ctypes.c_char_p
    lib.swy_last_error.argtypes = [ctypes.c_void_p]
    return lib, path, error


def _describe(lib, what):
    buf = ctypes.create_string_buffer(_DESCRIBE_BYTES)
    if lib.swy_describe(what.encode(), buf, len(buf)) != 0:
        return "  (failed: %s)\n" % lib.swy_last_error(None).decode()
    return buf.value.decode(errors="replace")


def _ucx_version(plugin_dirs):
    """The UCX that the UCX transport plugin links (loading the plugin maps
    it, as the library does when it picks its transports)."""
    for d in plugin_dirs:
        plugin = os.path.join(d, "swy-transport-ucx.so")
        if os.path.exists(plugin):
            try:
                ctypes.CDLL(plugin)
            except OSError as exc:
                return "plugin %s does not load: %s" % (plugin, exc)
            break
    path = _loaded_library("libucp.so")
    if path is None:
        return "no UCX transport plugin found"
    ucp = ctypes.CDLL(path)
    ucp.ucp_get_version_string.restype = ctypes.c_char_p
    return "%s (%s)" % (ucp.ucp_get_version_string().decode(), path)


def info(file=None):
    """Print the versions (switchyard, Python, torch, UCX), the library and
    extension in use, the plugin search path with the plugins in it, and
    the transports that load with their choice per link class. Returns
    True when the library and the torch backend both load."""
    out = file if file is not None else sys.stdout
    lib, where, ext_error = _library()
    say = lambda *a: print(*a, file=out)  # noqa: E731
    say("switchyard  %s" % (lib.swy_version().decode() if lib else "-"))
    say("python      %s (%s)" % (sys.version.split()[0], sys.executable))
    try:
        import torch
        say("torch       %s (%s)" % (torch.__version__,
                                     os.path.dirname(torch.__file__)))
    except ImportError as exc:
        say("torch       not importable: %s" % exc)
    say("library     %s" % where)
    if ext_error is None:
        from . import _C
        say("extension   %s" % _C.__file__)
    else:
        say("extension   not importable: %s" % ext_error)
    if lib is None:
        return False
    lib_dir = os.path.dirname(os.path.abspath(where))
    dirs = [d for d in os.environ.get("SWY_PLUGIN_PATH", "").split(":") if d]
    dirs.append(os.path.join(lib_dir, "switchyard"))
    say("plugins     (SWY_PLUGIN_PATH, then beside the library)")
    for d in dirs:
        found = sorted(os.path.basename(p) for p in
                       glob.glob(os.path.join(d, "swy-*.so")))
        say("  %s: %s" % (d, ", ".join(found) if found else "none"))
    transports = _describe(lib, "transports")
    say("ucx         %s" % _ucx_version(dirs))
    say("transports")
    out.write(transports)
    return ext_error is None
