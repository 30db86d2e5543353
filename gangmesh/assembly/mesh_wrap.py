"""Gangs over DeviceMeshes a user built (check them, read their plan, add the missing groups),
or over a mesh gangmesh handed out (the plan and groups of the gangs it came from)."""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol, cast

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup
from torch.distributed.device_mesh import DeviceMesh

from gangmesh.assembly import mesh_build
from gangmesh.assembly.mesh_origins import origin_of
from gangmesh.assembly.mesh_read import read_meshes
from gangmesh.plan._checks import InvalidTypeError, check_timeout
from gangmesh.plan.dims import ROOT
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime import default_group
from gangmesh.runtime.gang import Gang, GangError
from gangmesh.runtime.held import is_held, not_held
from gangmesh.runtime.process_group_gang import ProcessGroupGang


def wrap_meshes(
    mesh: DeviceMesh,
    expert_mesh: DeviceMesh | None,
    root: Gang | None,
    timeout: timedelta | None,
) -> tuple[ProcessGroupGang, MeshTopology, mesh_build.Built, timedelta]:
    """The root gang, the plan, the gangs and the timeout of :meth:`Gangs.from_mesh`: for a
    mesh of open gangs (``gangs.meshes``), those gangs' plan and groups, the mesh kept under
    its name; else read from the meshes, kept as the "dense" and "expert" meshes.

    :raises ValueError: see :meth:`Gangs.from_mesh`.
    """
    origin = origin_of(mesh) if isinstance(mesh, DeviceMesh) and expert_mesh is None else None
    if origin is not None and origin[1] is not None:
        owner = cast(_Owner, origin[1])
        groups = _groups_of(owner)
        if not isinstance(groups, str):
            return _wrap_handed_out(origin[0], mesh, owner, groups, root, timeout)
    return _wrap_read(mesh, expert_mesh, root, timeout)


def _wrap_read(
    mesh: DeviceMesh,
    expert_mesh: DeviceMesh | None,
    root: Gang | None,
    timeout: timedelta | None,
) -> tuple[ProcessGroupGang, MeshTopology, mesh_build.Built, timedelta]:
    """:func:`wrap_meshes` of meshes read as a user built them."""
    if not isinstance(mesh, DeviceMesh):
        raise InvalidTypeError(f"mesh: expected a DeviceMesh, got {type(mesh).__name__}")
    if expert_mesh is not None and not isinstance(expert_mesh, DeviceMesh):
        raise InvalidTypeError(
            f"expert_mesh: expected a DeviceMesh or None, got {type(expert_mesh).__name__}"
        )
    _check_held("mesh", mesh)
    if expert_mesh is not None:
        _check_held("expert_mesh", expert_mesh)
    plan, groups = read_meshes(mesh, expert_mesh)
    root = _checked_root(root, mesh)
    timeout = check_timeout(timeout) or root.timeout
    built = mesh_build.wrap(root, plan, groups, timeout)
    built.meshes["dense"] = mesh
    if expert_mesh is not None:
        built.meshes["expert"] = expert_mesh
    return root, plan, built, timeout


class _Owner(Protocol):
    """Gangs that handed a mesh out, as read here."""

    @property
    def plan(self) -> MeshTopology: ...

    @property
    def root(self) -> Gang: ...

    def __getitem__(self, name: str, /) -> Gang: ...


def _groups_of(owner: _Owner) -> dict[str, ProcessGroup] | str:
    """Dimension -> group of each gang of ``owner`` over a group of its own; or why there are
    none ("closed gangs", "gangs whose job ended")."""
    try:
        if not is_held(owner.root.as_process_group()):
            return "gangs whose job ended"
        return {
            name: gang.as_process_group()
            for name in mesh_build.BUILT_NAMES
            if isinstance(gang := owner[name], ProcessGroupGang) and gang.size > 1
        }
    except GangError:  # a closed gang
        return "closed gangs"


def _whose(mesh: DeviceMesh) -> str:
    """What ``mesh`` is, and whose, for an error about it."""
    shape = dict(zip(mesh.mesh_dim_names or (), mesh.shape, strict=True))
    name, owner = origin_of(mesh) or ("", None)
    if not name:
        return f"a DeviceMesh of {mesh.size()} processes {shape}"
    if owner is None:
        return f"the {name!r} mesh {shape} of gangs that are gone"
    gangs = cast(_Owner, owner)
    state = _groups_of(gangs)
    whose = state if isinstance(state, str) else "gangs"
    return f"the {name!r} mesh {shape} of {whose} ({gangs.plan})"


def _wrap_handed_out(
    name: str,
    mesh: DeviceMesh,
    owner: _Owner,
    groups: dict[str, ProcessGroup],
    root: Gang | None,
    timeout: timedelta | None,
) -> tuple[ProcessGroupGang, MeshTopology, mesh_build.Built, timedelta]:
    """:func:`wrap_meshes` of ``mesh``, the mesh ``name`` of open gangs ``owner`` whose groups
    are ``groups``: their plan and groups (``root`` defaults to theirs)."""
    root = _checked_root(root or owner.root, mesh)
    timeout = check_timeout(timeout) or root.timeout
    built = mesh_build.wrap(root, owner.plan, groups, timeout)
    built.meshes[name] = mesh
    return root, owner.plan, built, timeout


def _check_held(argument: str, mesh: DeviceMesh) -> None:
    """Raise unless each dimension of ``mesh`` is a group this job holds, with the members the
    mesh gives it (a name torch resolves may be another world's group of the same name).

    :raises ValueError: a mesh of another world, or of closed gangs, saying whose it is.
    """
    coordinate = mesh.get_coordinate()
    for index, name in enumerate(mesh.mesh_dim_names or ()):
        try:
            group = mesh.get_group(name)
        except RuntimeError:  # torch cannot resolve the group's name in this world
            raise not_held(argument, _whose(mesh)) from None
        row = tuple(slice(None) if i == index else c for i, c in enumerate(coordinate or ()))
        members = sorted(mesh.mesh[row].reshape(-1).tolist()) if coordinate else None
        if not is_held(group) or sorted(dist.get_process_group_ranks(group)) != members:
            raise not_held(argument, _whose(mesh))


def _checked_root(root: Gang | None, mesh: DeviceMesh) -> ProcessGroupGang:
    """``root`` (default: the default process group's gang), checked to span ``mesh``."""
    if root is None:
        world = dist.group.WORLD
        assert isinstance(world, dist.ProcessGroup)
        root = ProcessGroupGang(world, _mesh_device(mesh), name=ROOT)
    if root.size != mesh.size():
        raise ValueError(
            f"mesh: expected a mesh over all {root.size} processes of root, got {mesh.size()}"
        )
    # its gangs take the root's timeout, monitoring and priority, a ProcessGroupGang's own
    if not isinstance(root, ProcessGroupGang):
        raise InvalidTypeError(f"root: expected a ProcessGroupGang, got {root.describe()}")
    return root


def _mesh_device(mesh: DeviceMesh) -> torch.device:
    """The device of a mesh's processes: for "cuda", the one torch bound the default group to
    (else the current one)."""
    if mesh.device_type == "cuda":
        world = dist.group.WORLD
        assert isinstance(world, dist.ProcessGroup)
        bound = default_group.device_of(world)
        return bound if bound.type == "cuda" else torch.device("cuda", torch.cuda.current_device())
    return torch.device(mesh.device_type)
