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

import torch.distributed as dist

from . import _C

ProcessGroupSwitchyard = _C.ProcessGroupSwitchyard

BACKEND = "switchyard"

_LEVELS = {"low": _C.PRIO_LOW, "default": _C.PRIO_DEFAULT,
           "high": _C.PRIO_HIGH}


def _create_process_group(store, rank, size, timeout):
    return _C.ProcessGroupSwitchyard(store, rank, size, timeout)


if not hasattr(dist.Backend, BACKEND.upper()):
    dist.Backend.register_backend(BACKEND, _create_process_group)


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
