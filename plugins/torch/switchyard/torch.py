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

_c10d = dist.distributed_c10d
_torch_new_group = _c10d.new_group


def _new_group(ranks=None, timeout=_c10d.default_pg_timeout, backend=None,
               pg_options=None):
    """torch's new_group, but a "switchyard" group under a "switchyard"
    default group is split off the default group's communicator
    (swy_comm_split: one engine, so priorities hold across groups) instead
    of making a rendezvous of its own. torch calls a backend's creator on
    the members only, while a split is collective over the parent: so the
    split happens here, on every rank, before torch creates the group."""
    default = _c10d._get_default_group() if dist.is_initialized() else None
    if isinstance(default, ProcessGroupSwitchyard) and \
            str(backend or _c10d._pg_map[default][0]).lower() == BACKEND:
        world, me = default.size(), default.rank()
        members = sorted(ranks) if ranks is not None else list(range(world))
        if len(set(members)) == len(members) and \
                all(isinstance(r, int) and 0 <= r < world for r in members):
            default._split_for_next_group(
                0 if me in members else _C.SPLIT_NOCOLOR,
                members.index(me) if me in members else 0)
            try:
                return _torch_new_group(ranks, timeout, backend, pg_options)
            finally:
                ProcessGroupSwitchyard._drop_pending_split()
    return _torch_new_group(ranks, timeout, backend, pg_options)


if dist.new_group is _torch_new_group:
    _new_group.__wrapped__ = _torch_new_group
    dist.new_group = _c10d.new_group = _new_group


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
