"""The DeviceMeshes a Gangs hands out: one per way of laying the world out, by name.

torch's DeviceMesh flattens dimensions only by creating new groups, and slicing a
flattened dimension from the root mesh is deprecated. gangmesh instead builds one
mesh per use with :meth:`DeviceMesh.from_group` over groups its gangs already hold:
the dense mesh, and meshes in which some dimensions are merged into one (FSDP over
``dp_shard x cp``, the loss over every data dimension, the batch over ``dp``).
Each keeps the other dimensions, so that FSDP2 and tensor parallelism slice one
root mesh.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch
from torch.distributed import ProcessGroup
from torch.distributed.device_mesh import DeviceMesh
from typing_extensions import override

from gangmesh.assembly.mesh_origins import adopt, record
from gangmesh.plan.dims import FACTS, FLATTENED, Dim
from gangmesh.plan.topology import MeshTopology, View

_MESHES: tuple[tuple[str, Dim | None], ...] = (
    ("dense", None),
    (Dim.DP_SHARD_CP, Dim.DP_SHARD_CP),
    (Dim.DP_CP, Dim.DP_CP),
    (Dim.DP, Dim.DP),
    ("expert", None),
    (Dim.EDP, Dim.EDP),
)

MESH_NAMES: dict[str, tuple[bool, Dim | None]] = {
    name: (name == "expert" or (merged is not None and FACTS[merged].expert), merged)
    for name, merged in _MESHES
}
"""Mesh name -> (laid out over the expert view?, the flattened dimension it merges)."""

TORCHTITAN_EXPERT = "efsdp"
"""torchtitan's name of the expert mesh: it asks its sparse mesh for ``efsdp`` and slices
``["dp_replicate", "efsdp"]`` from it, the names of our expert mesh's dimensions."""

MESH_ALIASES: dict[str, str] = {
    **{
        alias: merged
        for _, merged in _MESHES
        if merged is not None and (alias := FACTS[merged].torchtitan) is not None
    },
    TORCHTITAN_EXPERT: "expert",
}
"""torchtitan's names for the same meshes: under them, a merged dimension has torchtitan's
name too (``meshes["fsdp"]["dp_replicate", "fsdp"]``)."""


class Meshes(Mapping[str, DeviceMesh]):
    """Read-only mesh name -> DeviceMesh; also answers to the names of MESH_ALIASES, with
    torchtitan's names of their dimensions (a mesh over the same groups, made on first use).

    >>> Meshes({})["fsdp"]
    Traceback (most recent call last):
    ...
    KeyError: "mesh 'fsdp' (the name of 'dp_shard_cp') is not built here; built: none"

    :param meshes: mesh name -> DeviceMesh, by the names of MESH_NAMES (and of MESH_ALIASES,
        for meshes with torchtitan's names made already).
    :param owner: what the meshes belong to (a Gangs), recorded for
        ``mesh_origins.origin_of``.
    """

    __slots__ = ("_meshes", "_owner", "_renamed")

    def __init__(self, meshes: Mapping[str, DeviceMesh], owner: object = None) -> None:
        self._meshes = {name: mesh for name, mesh in meshes.items() if name in MESH_NAMES}
        self._owner = None if owner is None else weakref.ref(owner)  # no cycle with a Gangs
        self._renamed = {name: mesh for name, mesh in meshes.items() if name in MESH_ALIASES}
        for mesh in meshes.values():
            adopt(mesh, owner)

    @override
    def __getitem__(self, name: str) -> DeviceMesh:
        canonical = MESH_ALIASES.get(name, name)
        mesh = self._meshes.get(canonical)
        if mesh is None:
            alias = f" (the name of {canonical!r})" if canonical != name else ""
            built = ", ".join(self._meshes) or "none"
            known = ", ".join([*MESH_NAMES, *MESH_ALIASES])
            if canonical in MESH_NAMES:
                raise KeyError(f"mesh {name!r}{alias} is not built here; built: {built}")
            raise KeyError(f"mesh {name!r}: expected one of {known}")
        merged = MESH_NAMES[canonical][1]
        if merged is None or name == canonical:
            return mesh
        renamed = self._renamed.get(name)
        if renamed is None:
            renamed = self._renamed[name] = _renamed(mesh, merged, name)
            record(renamed, name, None if self._owner is None else self._owner())
        return renamed

    @override
    def __iter__(self) -> Iterator[str]:
        return iter(self._meshes)

    @override
    def __len__(self) -> int:
        return len(self._meshes)

    @override
    def __repr__(self) -> str:
        shown = ", ".join(
            f"{name}: {dict(zip(mesh.mesh_dim_names or (), mesh.shape, strict=True))}"
            for name, mesh in self._meshes.items()
        )
        return f"Meshes({{{shown}}})"


def _renamed(mesh: DeviceMesh, old: str, new: str) -> DeviceMesh:
    """``mesh`` over the same groups, its dimension ``old`` named ``new``."""
    names = tuple(mesh.mesh_dim_names or ())
    return DeviceMesh.from_group(
        [mesh.get_group(name) for name in names],
        mesh.device_type,
        mesh=mesh.mesh,
        mesh_dim_names=tuple(new if name == old else name for name in names),
    )


def mesh_dims(view: View, flattened: Dim | None) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The dimension names of a mesh over ``view`` with ``flattened``'s dimensions merged,
    and the view's axes in the order that lays them out (merged ones together)."""
    members = FLATTENED[flattened] if flattened else ()
    names: list[str] = []
    axes: list[int] = []
    for index, name in enumerate(view.names):
        if name not in members:
            names.append(name)
            axes.append(index)
        elif not any(view.names.index(m) < index for m in members):
            names.append(flattened or name)
            axes.extend(sorted(view.names.index(m) for m in members))
    return tuple(names), tuple(axes)


def build_meshes(
    device_type: str,
    plan: MeshTopology,
    group: Callable[[str], ProcessGroup],
    global_ranks: Sequence[int],
) -> dict[str, DeviceMesh]:
    """Every mesh of MESH_NAMES that ``plan`` has, over ``group(name)`` for each dimension;
    those over the expert view only where the job uses it (:attr:`MeshTopology.uses_experts`).
    The plan's rank ``r`` is global rank ``global_ranks[r]`` (ascending).

    :raises ValueError: torch refuses a mesh (groups that do not match the plan).
    """
    meshes: dict[str, DeviceMesh] = {}
    for mesh_name, (expert, flattened) in MESH_NAMES.items():
        if expert and not plan.uses_experts:
            continue
        view = plan.view(expert=expert)
        names, axes = mesh_dims(view, flattened)
        ranks = torch.as_tensor(global_ranks, dtype=torch.int)[torch.from_numpy(view.grid())]
        shape = tuple(plan.size_of(name) for name in names)
        layout = ranks.permute(axes).reshape(shape)
        if flattened and flattened in names:  # members ascend, as in the merged dim's group
            layout = layout.sort(dim=names.index(flattened)).values
        meshes[mesh_name] = DeviceMesh.from_group(
            [group(name) for name in names],
            device_type,
            mesh=layout,
            mesh_dim_names=names,
        )
        record(meshes[mesh_name], mesh_name)
    return meshes
