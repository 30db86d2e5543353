"""Read the plan of DeviceMeshes a user built, and check that they number ranks as it does."""

from __future__ import annotations

from typing import Any

from torch.distributed import ProcessGroup
from torch.distributed.device_mesh import DeviceMesh

from gangmesh.plan.dims import (
    DENSE_DIMS,
    EXPERT_DIMS,
    FACTS,
    FLATTENED,
    SHARED_DIMS,
    SIZE_NAMES,
    Dim,
)
from gangmesh.plan.layout import Layout
from gangmesh.plan.topology import MeshTopology

_SHARDS = Dim.DP_SHARD
"""What a merged data dimension of a user's mesh is read as: the ranks FSDP shards over."""

_MERGED: dict[str, Dim] = {
    name: merged
    for merged, facts in FACTS.items()
    if facts.members and not facts.expert
    for name in (merged.value, facts.torchtitan)
    if name is not None
}
"""Each name of a merged data dimension (gangmesh's and torchtitan's: dp, batch, dp_shard_cp,
fsdp, dp_cp, loss) -> the dimension it merges, which a dense mesh may have instead of its
members."""


def read_meshes(
    mesh: DeviceMesh, expert_mesh: DeviceMesh | None
) -> tuple[MeshTopology, dict[str, ProcessGroup]]:
    """The plan of a dense mesh (and an expert one), and plan dimension -> group.

    The dense mesh has names among pp, dp_replicate, dp_shard, cp, tp in any order,
    or one merged data dimension instead of its members (dp or batch, dp_shard_cp or fsdp,
    dp_cp or loss: the meshes gangmesh hands out, built by hand), read as dp_shard (fully
    sharded); missing dimensions have size 1. The expert mesh has names among pp,
    dp_replicate, efsdp, ep, etp.

    :raises ValueError: unknown or missing names, a merged dimension beside one of its
        members, or meshes that do not number the ranks row-major as the plan does.
    """
    dense = _dims_of("mesh", mesh, (*DENSE_DIMS, *_MERGED))
    read_as = _read_as(dense)
    dense = {read_as.get(name, name): size for name, size in dense.items()}
    expert = (
        {}
        if expert_mesh is None
        else _dims_of("expert_mesh", expert_mesh, (*SHARED_DIMS, *EXPERT_DIMS))
    )
    sizes: dict[str, Any] = {
        name: (dense if name in DENSE_DIMS else expert).get(name, 1) for name in SIZE_NAMES
    }
    layout = Layout(**sizes, order=_order(list(dense)), expert=expert_mesh is not None)
    plan = MeshTopology.from_layout(mesh.size(), layout)
    _check_row_major("mesh", mesh, plan)
    groups = {read_as.get(name, name): mesh.get_group(name) for name in mesh.mesh_dim_names or ()}
    if expert_mesh is not None:
        _check_expert_mesh(expert_mesh, expert, plan)
        groups.update(
            (name, expert_mesh.get_group(name))
            for name in expert_mesh.mesh_dim_names or ()
            if name in EXPERT_DIMS
        )
    return plan, groups


def _read_as(dense: dict[str, int]) -> dict[str, str]:
    """The merged data dimension of a mesh with dimensions ``dense`` -> dp_shard; ValueError
    for two of them, or one beside one of its members."""
    merged = [name for name in dense if name in _MERGED]
    if not merged:
        return {}
    name, members = merged[0], FLATTENED[_MERGED[merged[0]]]
    beside = [other for other in dense if other in members or other in merged[1:]]
    if beside:
        raise ValueError(
            f"mesh: a dimension named {name!r} (merging {', '.join(members)}) cannot go with "
            f"{' or '.join(beside)}, got {tuple(dense)}"
        )
    return {name: _SHARDS}


def _order(present: list[str]) -> list[str]:
    """The mesh's dimensions in its order, with the missing ones (all of size 1) placed where
    the plan's rules want them: pp and dp_replicate outermost, the others just inside the
    last of those the mesh has (so that tp, when present and innermost, stays innermost)."""
    shared = [name for name in SHARED_DIMS if name not in present]
    others = [name for name in DENSE_DIMS if name not in present and name not in SHARED_DIMS]
    inside = max((i + 1 for i, name in enumerate(present) if name in SHARED_DIMS), default=0)
    return [*shared, *present[:inside], *others, *present[inside:]]


def _dims_of(argument: str, mesh: DeviceMesh, known: tuple[str, ...]) -> dict[str, int]:
    """Dimension name -> size of a user's mesh; ValueError for missing or unknown names."""
    names = mesh.mesh_dim_names
    if not names:
        raise ValueError(f"{argument}: expected dimension names among {known}, got none")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(
            f"{argument}: unknown dimension names {unknown}; expected names among {known}"
        )
    return dict(zip(names, mesh.shape, strict=True))


def _check_row_major(
    argument: str, mesh: DeviceMesh, plan: MeshTopology, expert: bool = False
) -> None:
    """Raise unless ``mesh`` numbers the ranks as the plan's view does (row-major)."""
    expected = plan.view(expert=expert).grid()
    if mesh.mesh.reshape(-1).tolist() == expected.reshape(-1).tolist():
        return
    if expert:  # at ep = 1 the expert view may reorder the dense dimensions
        raise ValueError(
            f"{argument}: expected the plan's expert layout of the ranks, "
            f"{expected.tolist()}; got {mesh.mesh.tolist()}"
        )
    raise ValueError(
        f"{argument}: expected ranks 0..{plan.world_size - 1} numbered row-major over its "
        f"dimensions, as init_device_mesh does; got {mesh.mesh.tolist()}"
    )


def _check_expert_mesh(mesh: DeviceMesh, dims: dict[str, int], plan: MeshTopology) -> None:
    """Raise unless the expert mesh is the expert view of the dense plan."""
    view = plan.expert_dims
    names = [name for name in view if view[name] > 1 or name in dims]
    if list(dims) != names or any(dims[name] != view[name] for name in dims):
        raise ValueError(
            f"expert_mesh: expected the dimensions {dict((n, view[n]) for n in names)} (the "
            f"expert view of the dense mesh, outermost first), got {dims}"
        )
    _check_row_major("expert_mesh", mesh, plan, expert=True)
