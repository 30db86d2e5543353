"""The gangs a layout may be built on: the job's root gang and the root gangs of its parts."""

from __future__ import annotations

import weakref

import torch.distributed as dist

from gangmesh.plan._checks import InvalidTypeError
from gangmesh.runtime.gang import Gang, GangError
from gangmesh.runtime.held import is_held, not_held
from gangmesh.runtime.process_group_gang import ProcessGroupGang

_part_roots: weakref.WeakSet[Gang] = weakref.WeakSet()
"""The root gangs of parts (:func:`gangmesh.create_parts`)."""


def mark_part_root(gang: Gang) -> None:
    """Let ``gang``, the root gang of a part, root the part's layout."""
    _part_roots.add(gang)


def check_root(root_gang: Gang, *, parts: bool) -> None:
    """Check that ``root_gang`` is a FakeGang-like gang without a group, the gang of the default
    process group, or (with ``parts``) the root gang of a part.

    The builders need a ProcessGroupGang where there is a group: its timeout, monitoring and
    members reach every gang they build.

    :raises TypeError: ``root_gang`` is not a Gang.
    :raises ValueError: ``root_gang`` is another gang, a closed one, or one of another world.
    """
    if not isinstance(root_gang, Gang):
        raise InvalidTypeError(f"root_gang: expected a Gang, got {type(root_gang).__name__}")
    if not root_gang.supports_process_group or (parts and root_gang in _part_roots):
        return
    if isinstance(root_gang, ProcessGroupGang):
        try:
            group = root_gang.as_process_group()
        except GangError:
            raise ValueError(
                f"root_gang: {root_gang.describe()} is closed (the gangs or the job it belongs to "
                "ended); expected the gang of this job's default process group"
            ) from None
        if not is_held(group):
            raise not_held("root_gang", root_gang.describe())
    if not isinstance(root_gang, ProcessGroupGang) or (
        root_gang.as_process_group() is not dist.group.WORLD
    ):
        part = " or of a part (create_parts)" if parts else ""
        raise ValueError(
            f"root_gang: expected the gang of the default process group "
            f"(size {dist.get_world_size()}){part}, got {root_gang.describe()}"
        )
