"""The "switchyard" torch.distributed backend.

Importing this module registers the backend, so an unmodified program
selects it by name::

    import switchyard.torch
    torch.distributed.init_process_group("switchyard", ...)

Ops take CPU tensors. Scheduling follows the library's SWY_* variables
(SWY_POLICY, SWY_PARTITION_BYTES, ...) and its default priorities
(all-to-all high, allreduce low); `priority()` overrides them for the ops
a thread posts inside it.
"""
import contextlib

import torch
import torch.distributed as dist

from . import _C

SwitchyardBackend = _C.SwitchyardBackend

BACKEND = "switchyard"

_LEVELS = {"low": _C.PRIO_LOW, "default": _C.PRIO_DEFAULT,
           "high": _C.PRIO_HIGH}


def Options(timeout=None, config=None):
    """The backend's options, for init_process_group/new_group's
    `pg_options`: `timeout` (a timedelta; torch's `timeout` argument
    replaces it) and `config`, library settings applied with
    swy_comm_configure() when the group is made, e.g.
    {"SWY_POLICY": "lina"} (they are the process engine's: every group
    of the process shares them)."""
    opts = _C.SwitchyardBackend.Options() if timeout is None else \
        _C.SwitchyardBackend.Options(timeout)
    if config:
        opts.config = {str(k): str(v) for k, v in config.items()}
    return opts


def _create_backend(dist_opts, backend_options):
    """torch's creator (extended API): called on the new group's members.
    torch passes `split_from`, the default group's backend, when the
    default group is bound to a device (init_process_group's device_id)
    and thus eligible for splitting: then the group is split off it
    (swy_comm_split; torch has the non-members call
    perform_nocolor_split). Otherwise the group makes its own rendezvous
    through its store."""
    if backend_options is not None and \
            not isinstance(backend_options, _C.SwitchyardBackend.Options):
        raise TypeError("switchyard: pg_options must be "
                        "switchyard.torch.Options(...), got "
                        f"{type(backend_options).__name__}")
    split_from = dist_opts.split_from
    if not isinstance(split_from, SwitchyardBackend):
        split_from = None
    return SwitchyardBackend.create(dist_opts.store, dist_opts.group_rank,
                                    dist_opts.group_size, dist_opts.timeout,
                                    split_from, backend_options)


# CUDA where the extension has its device path and a GPU is there.
_DEVICES = ["cpu", "cuda"] if _C.HAS_CUDA and torch.cuda.is_available() \
    else ["cpu"]
if BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True,
                                  devices=_DEVICES)


def backend_of(group=None):
    """The SwitchyardBackend of a process group (default: the default
    group), or None when the group's CPU backend is another one."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    try:
        backend = group._get_backend(torch.device("cpu"))
    except RuntimeError:
        return None
    return backend if isinstance(backend, SwitchyardBackend) else None


@contextlib.contextmanager
def priority(level, order=0, name=None):
    """Give the ops this thread posts inside the block a priority.

    level: "low", "default", "high" or an int in 0..1000 (higher first);
    order: tie-break within a priority, lower first (e.g. the layer index);
    name: a label for the library's traces and error messages.
    Scopes nest; ops posted by other threads (DDP's reducer) keep theirs.
    """
    if isinstance(level, str):
        if level not in _LEVELS:
            raise ValueError(f"switchyard.torch.priority: level {level!r} is "
                             f"not one of {sorted(_LEVELS)} or an int")
        value = _LEVELS[level]
    elif isinstance(level, int) and not isinstance(level, bool):
        if not 0 <= level <= 1000:
            raise ValueError(f"switchyard.torch.priority: level {level} is "
                             "outside 0..1000")
        value = level
    else:
        raise TypeError("switchyard.torch.priority: level must be a str or "
                        f"an int, got {type(level).__name__}")
    if not isinstance(order, int) or isinstance(order, bool):
        raise TypeError("switchyard.torch.priority: order must be an int, "
                        f"got {type(order).__name__}")
    previous = _C._set_priority(True, value, order, name or "")
    try:
        yield
    finally:
        _C._set_priority(*previous)


from .moe import MoE  # noqa: E402  (needs the backend's classes above)
