"""Whether a group handed to gangmesh is one this job holds now: a group of another world (a
job that ended, simulate_gangs' simulated one) or one destroyed since is refused, saying whose
it is, before torch fails to resolve it."""

from __future__ import annotations

import torch.distributed as dist
from torch.distributed import ProcessGroup


def is_held(group: ProcessGroup) -> bool:
    """Whether torch.distributed holds ``group`` in its current world."""
    try:
        dist.get_process_group_ranks(group)
    except (KeyError, ValueError, RuntimeError):  # not initialised, not registered
        return False
    return True


def held_ranks(argument: str, group: ProcessGroup) -> list[int]:
    """The global ranks of ``group``, argument ``argument``.

    :raises ValueError: torch.distributed does not hold ``group`` in its current world.
    """
    try:
        return dist.get_process_group_ranks(group)
    except (KeyError, ValueError, RuntimeError):  # not initialised, not registered
        raise not_held(argument, group_text(group)) from None


def group_text(group: ProcessGroup) -> str:
    """``group`` by its description (gangmesh's name its dimension and members) and size."""
    described = getattr(group, "group_desc", "") or group.group_name
    return f"process group {described!r} of {group.size()} processes"


def not_held(argument: str, whose: str) -> ValueError:
    """The error of ``argument``, ``whose`` (what it is and whose), that no live group of this
    job stands behind."""
    return ValueError(
        f"{argument}: {whose} is not this job's ({_this_world()}): it was made in another "
        "world (a job that ended, simulate_gangs) or its groups were destroyed since (the "
        "close() of its gangs, destroy_process_group); expected one of this job's"
    )


def _this_world() -> str:
    if not (dist.is_available() and dist.is_initialized()):
        return "torch.distributed is not initialised here"
    size = dist.get_world_size()
    return f"this job is {size} process{'' if size == 1 else 'es'} on {dist.get_backend()}"
