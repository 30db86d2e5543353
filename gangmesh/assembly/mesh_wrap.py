"""Gangs over DeviceMeshes a user built: check them, read their plan, add the missing groups."""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from gangmesh.assembly import mesh_build
from gangmesh.assembly.mesh_read import read_meshes
from gangmesh.plan._checks import InvalidTypeError, check_timeout
from gangmesh.plan.dims import ROOT
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime import default_group
from gangmesh.runtime.gang import Gang
from gangmesh.runtime.process_group_gang import ProcessGroupGang


def wrap_meshes(
    mesh: DeviceMesh,
    expert_mesh: DeviceMesh | None,
    root: Gang | None,
    timeout: timedelta | None,
) -> tuple[ProcessGroupGang, MeshTopology, mesh_build.Built, timedelta]:
    """The root gang, the plan, the gangs and the timeout of :meth:`Gangs.from_mesh`.

    The user's meshes are kept as the "dense" and "expert" meshes of the result.

    :raises ValueError: see :meth:`Gangs.from_mesh`.
    """
    if not isinstance(mesh, DeviceMesh):
        raise InvalidTypeError(f"mesh: expected a DeviceMesh, got {type(mesh).__name__}")
    if expert_mesh is not None and not isinstance(expert_mesh, DeviceMesh):
        raise InvalidTypeError(
            f"expert_mesh: expected a DeviceMesh or None, got {type(expert_mesh).__name__}"
        )
    plan, groups = read_meshes(mesh, expert_mesh)
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
    timeout = check_timeout(timeout) or root.timeout
    built = mesh_build.wrap(root, plan, groups, timeout)
    built.meshes["dense"] = mesh
    if expert_mesh is not None:
        built.meshes["expert"] = expert_mesh
    return root, plan, built, timeout


def _mesh_device(mesh: DeviceMesh) -> torch.device:
    """The device of a mesh's processes: for "cuda", the one torch bound the default group to
    (else the current one)."""
    if mesh.device_type == "cuda":
        world = dist.group.WORLD
        assert isinstance(world, dist.ProcessGroup)
        bound = default_group.device_of(world)
        return bound if bound.type == "cuda" else torch.device("cuda", torch.cuda.current_device())
    return torch.device(mesh.device_type)
