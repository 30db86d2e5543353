"""Which gangs of a plan cross node boundaries, why it matters and what would keep them local.

Nodes hold ``ranks_per_node`` consecutive ranks (torchrun and SLURM number ranks so).
The gangs that carry the most traffic should stay on one node first: tp, then cp, then
ep; with HSDP (dp_replicate > 1) also dp_shard, since the replicas are the gangs meant
to cross. pp and dp_replicate groups are expected to cross nodes and are not checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gangmesh._checks import check_positive
from gangmesh.dims import FACTS, LOCALITY_PRIORITY, MESH_DIMS, Dim
from gangmesh.view import View


class Plan(Protocol):
    """What the locality check reads of a plan (a :class:`~gangmesh.MeshTopology`)."""

    @property
    def world_size(self) -> int: ...

    def size_of(self, dim: str) -> int: ...

    def groups(self, dim: str) -> np.ndarray: ...

    def view_of(self, dim: str) -> View: ...


@dataclass(frozen=True)
class LocalityFinding:
    """A gang that crosses node boundaries.

    ``avoidable`` findings point at a size or an order to change; the others say
    that the dimensions inside the gang already fill a node, so it has to cross.
    """

    dim: str
    """The dimension whose groups cross nodes."""
    group: list[int]
    """The first group that crosses, as global ranks."""
    nodes: list[int]
    """The nodes that group touches."""
    message: str
    """What crosses, why it matters and what to change; also ``str(finding)``."""
    avoidable: bool = True
    """Whether a change of sizes or order avoids the crossing."""

    def __str__(self) -> str:
        return self.message


def check_ranks_per_node(world_size: int, ranks_per_node: int) -> int:
    """``ranks_per_node`` if nodes of that size can hold the world; ValueError otherwise.

    :param world_size: number of processes in the job.
    :param ranks_per_node: how many consecutive ranks share a node.
    :raises ValueError: ``ranks_per_node`` is not positive, or is smaller than the world
        and does not divide it.
    """
    per_node = check_positive("ranks_per_node", ranks_per_node)
    if per_node < world_size and world_size % per_node:
        raise ValueError(
            f"ranks_per_node: expected a factor of world_size {world_size} (every node holds "
            f"the same number of ranks), got {per_node}"
        )
    return per_node


def checked_dims(plan: Plan) -> list[Dim]:
    """The dimensions whose groups :func:`find_crossings` checks, for this plan, the most
    important first.

    :param plan: the layout to check.
    """
    return [name for name in LOCALITY_PRIORITY if plan.size_of(name) > 1 and _checks(plan, name)]


def unchecked_dims(plan: Plan) -> list[Dim]:
    """The dimensions of size > 1 whose groups are meant to cross nodes, in mesh order.

    :param plan: the layout to check.
    """
    return [
        name
        for name in MESH_DIMS
        if FACTS[name].node_check in ("meant_to_cross", "with_replicas")
        and plan.size_of(name) > 1
        and not _checks(plan, name)
    ]


def _checks(plan: Plan, name: Dim) -> bool:
    check = FACTS[name].node_check
    return check == "always" or (check == "with_replicas" and plan.size_of(Dim.DP_REPLICATE) > 1)


def find_crossings(plan: Plan, ranks_per_node: int) -> list[LocalityFinding]:
    """Every checked dimension whose groups cross nodes, with the reason and the fix.

    :param plan: the layout to check.
    :param ranks_per_node: how many consecutive ranks share a node.
    :raises ValueError: ``ranks_per_node`` does not divide the world size.
    """
    per_node = check_ranks_per_node(plan.world_size, ranks_per_node)
    findings = []
    for name in checked_dims(plan):
        groups = plan.groups(name)
        nodes = groups // per_node
        crossing = nodes.min(axis=1) != nodes.max(axis=1)
        if crossing.any():
            index = int(np.argmax(crossing))
            view = plan.view_of(name)
            avoidable, advice = _advice(name, view, per_node)
            message = (
                f"{name}: {int(crossing.sum())} of {len(groups)} groups span nodes, e.g. "
                f"{_short(groups[index].tolist())} on nodes {sorted(set(nodes[index].tolist()))}; "
                f"{advice}"
            )
            group, touched = groups[index].tolist(), sorted(set(nodes[index].tolist()))
            findings.append(LocalityFinding(name, group, touched, message, avoidable))
    return findings


def _advice(name: Dim, view: View, per_node: int) -> tuple[bool, str]:
    """Whether the crossing can be avoided, and the sentence that says why and how."""
    position = view.names.index(name)
    inside = [n for n, s in zip(view.names[position + 1 :], view.sizes[position + 1 :], strict=True)
              if s > 1]  # fmt: skip
    lower = [n for n in inside if _priority(n) > _priority(name)]
    inner = math.prod(view.size(n) for n in inside)
    block = inner * view.size(name)
    what = FACTS[name].traffic
    if lower:
        return True, (
            f"{' and '.join(lower)} {'lie' if len(lower) > 1 else 'lies'} inside {name} in "
            f"the order, so {what} strides across nodes; put {name} inside "
            f"{' and '.join(lower)} (--order)"
        )
    if inside and inner >= per_node:
        held = " * ".join(f"{n}={view.size(n)}" for n in inside)
        return False, (
            f"{held} already {'fill' if len(inside) > 1 else 'fills'} a node of {per_node} "
            f"ranks, so {name} has to cross nodes; "
            f"nothing to change unless those sizes shrink"
        )
    if block <= per_node:
        return True, (
            f"{name}={view.size(name)} fits in a node of {per_node} ranks, but its {block}-rank "
            f"blocks are not aligned to nodes; make {per_node} a multiple of {block} "
            f"(e.g. {name}={_largest_factor(per_node // inner, view.size(name))})"
        )
    room = per_node // inner
    if FACTS[name].spreads:
        return False, (
            f"{name}={view.size(name)} is larger than the {room} ranks a node leaves it, so "
            f"{what} crosses nodes; expected at this size"
        )
    relief = FACTS[name].relief
    fix = f"lower {name} to {room} or less" + (f" and raise {relief} to match" if relief else "")
    return True, f"{name}={view.size(name)} needs more than a node of {per_node} ranks; {fix}"


def _priority(name: str) -> int:
    return LOCALITY_PRIORITY.index(name) if name in LOCALITY_PRIORITY else len(LOCALITY_PRIORITY)


def _largest_factor(limit: int, size: int) -> int:
    """The largest factor of ``limit`` that is at most ``size``."""
    return max(f for f in range(1, min(limit, size) + 1) if limit % f == 0)


def _short(group: list[int], limit: int = 8) -> str:
    if len(group) <= limit:
        return str(group)
    return "[" + ", ".join(map(str, group[:limit])) + f", ... ({len(group)} ranks)]"
