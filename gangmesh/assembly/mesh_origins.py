"""Where the meshes gangmesh hands out come from: each one's name and owner (a Gangs), while
the mesh lives, so that a mesh handed back (to :meth:`~gangmesh.Gangs.from_mesh`) is read
exactly and one of closed gangs is named as such."""

from __future__ import annotations

import weakref
from typing import Any

from torch.distributed.device_mesh import DeviceMesh

_origins: dict[int, tuple[weakref.ref[DeviceMesh], str, weakref.ref[Any] | None]] = {}
"""id of a mesh gangmesh handed out -> (the mesh, its name among MESH_NAMES or MESH_ALIASES,
its owner), while the mesh lives."""


def record(mesh: DeviceMesh, name: str, owner: object = None) -> None:
    """Remember that gangmesh built ``mesh`` as its mesh ``name`` (of ``owner``, where known
    already)."""
    key = id(mesh)

    def forget(ref: weakref.ref[DeviceMesh]) -> None:
        if _origins.get(key, (None,))[0] is ref:
            del _origins[key]

    _origins[key] = (weakref.ref(mesh, forget), name, None if owner is None else weakref.ref(owner))


def origin_of(mesh: DeviceMesh) -> tuple[str, object] | None:
    """The name ``mesh`` was handed out under (among MESH_NAMES or MESH_ALIASES) and its owner
    (None where the owner is gone), if gangmesh handed it out; None for a mesh a user built."""
    entry = _origins.get(id(mesh))
    if entry is None or entry[0]() is not mesh:
        return None
    owner = entry[2]
    return entry[1], None if owner is None else owner()


def adopt(mesh: DeviceMesh, owner: object) -> None:
    """Make ``owner`` the owner of ``mesh``, where gangmesh built it and it has none yet (a mesh
    a user built stays unrecorded)."""
    entry = _origins.get(id(mesh))
    if entry is not None and entry[0]() is mesh and entry[2] is None:
        _origins[id(mesh)] = (entry[0], entry[1], weakref.ref(owner))
