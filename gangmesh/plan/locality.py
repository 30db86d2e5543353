"""Which gangs of a plan cross node boundaries, why it matters and what would keep them local.

Nodes hold ``ranks_per_node`` consecutive ranks (torchrun and SLURM number ranks so);
NVLink domains and racks, where described, hold consecutive nodes and domains. A
:class:`~gangmesh.plan.cluster.Cluster` built from the site of every rank describes other
numberings. Each level is checked on its own: a finding names the level it crosses.
The gangs that carry the most traffic should stay on one node first: tp, then cp, then
ep; with HSDP (dp_replicate > 1) also dp_shard, since the replicas are the gangs meant
to cross. pp and dp_replicate groups are expected to cross nodes and are not checked.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from typing_extensions import override

from gangmesh.plan.cluster import Cluster
from gangmesh.plan.cluster import check_ranks_per_node as check_ranks_per_node
from gangmesh.plan.dims import DENSE_DIMS, FACTS, LOCALITY_PRIORITY, MESH_DIMS, Dim
from gangmesh.plan.layout import Layout
from gangmesh.plan.view import View


class Plan(Protocol):
    """What the locality check reads of a plan (a :class:`~gangmesh.MeshTopology`)."""

    @property
    def world_size(self) -> int: ...

    def size_of(self, dim: str) -> int: ...

    def groups(self, dim: str) -> np.ndarray: ...

    def view_of(self, dim: str) -> View: ...

    @property
    def layout(self) -> Layout: ...

    @classmethod
    def from_layout(cls, world_size: int, layout: Layout) -> Plan: ...


@dataclass(frozen=True)
class LocalityFinding:
    """A gang that crosses node (domain, rack) boundaries.

    ``avoidable`` findings point at a size or an order to change; the others say
    that the dimensions inside the gang already fill a node, so it has to cross.
    """

    dim: str
    """The dimension whose groups cross."""
    group: list[int]
    """The first group that crosses, as global ranks."""
    nodes: list[int]
    """The nodes (domains, racks) that group touches."""
    message: str
    """What crosses, why it matters and what to change; also ``str(finding)``."""
    avoidable: bool = True
    """Whether a change of sizes or order avoids the crossing."""
    level: str = "node"
    """What the groups cross: "node" (a host), "domain" (an NVLink domain) or "rack"."""
    count: int = 1
    """How many groups of the dimension cross."""
    fix: dict[str, Any] | None = None
    """The layout change the advice proposes (keywords of :class:`~gangmesh.plan.layout.Layout`,
    -1 where a size follows), verified to keep the groups inside; None where the advice is
    no change of layout."""

    @override
    def __str__(self) -> str:
        return self.message


def checked_dims(plan: Plan) -> list[Dim]:
    """The dimensions whose groups :func:`find_crossings` checks, for this plan, the most
    important first.

    :param plan: the layout to check.
    """
    return [
        name
        for name in LOCALITY_PRIORITY
        if plan.size_of(name) > 1 and _built(plan, name) and _checks(plan, name)
    ]


def unchecked_dims(plan: Plan) -> list[Dim]:
    """The dimensions of size > 1 whose groups are meant to cross nodes, in mesh order.

    :param plan: the layout to check.
    """
    return [
        name
        for name in MESH_DIMS
        if FACTS[name].node_check in ("meant_to_cross", "with_replicas")
        and plan.size_of(name) > 1
        and _built(plan, name)
        and not _checks(plan, name)
    ]


def _built(plan: Plan, name: Dim) -> bool:
    """Whether the job builds ``name``'s gangs: an expert dimension only where it uses
    experts (a dense job builds none)."""
    return not FACTS[name].expert or plan.layout.uses_experts


def _checks(plan: Plan, name: Dim) -> bool:
    check = FACTS[name].node_check
    return check == "always" or (check == "with_replicas" and plan.size_of(Dim.DP_REPLICATE) > 1)


def find_crossings(
    plan: Plan,
    ranks_per_node: int | Cluster,
    *,
    hosts_per_domain: int | None = None,
    domains_per_rack: int | None = None,
) -> list[LocalityFinding]:
    """Every checked dimension whose groups cross a node (domain, rack), with the reason
    and one change that avoids it; host findings first, then domain, then rack ones.

    :param plan: the layout to check.
    :param ranks_per_node: how many consecutive ranks share a node, or a
        :class:`~gangmesh.plan.cluster.Cluster` (e.g. from the site of every rank).
    :param hosts_per_domain: nodes per NVLink domain (consecutive nodes); None: no domains.
    :param domains_per_rack: domains per rack; None: no racks.
    :raises ValueError: a size that does not divide the world size, or racks without
        domains.
    """
    if isinstance(ranks_per_node, Cluster):
        cluster = ranks_per_node
    else:
        cluster = Cluster.uniform(plan.world_size, ranks_per_node, hosts_per_domain,
                                  domains_per_rack)  # fmt: skip
    findings = []
    for level in cluster.levels():
        units, capacity = cluster.units[level], cluster.capacity[level]
        for name in checked_dims(plan):
            finding = _crossing(plan, name, level, units, capacity, cluster.consecutive)
            if finding is not None:
                findings.append(finding)
    return findings


def _crossing(
    plan: Plan, name: Dim, level: str, units: np.ndarray, capacity: int, consecutive: bool
) -> LocalityFinding | None:
    """The finding for ``name``'s groups on units of ``level``, if any crosses."""
    groups = plan.groups(name)
    touched = units[groups]
    crossing = touched.min(axis=1) != touched.max(axis=1)
    if not crossing.any():
        return None
    index = int(np.argmax(crossing))
    if not consecutive and not _crosses(plan, name, capacity):
        advice = (
            f"the launcher's numbering splits them across {level}s; "
            f"create_gangs(..., placement=True) lays them out {level} by {level}"
        )
        avoidable, fix = True, None
    else:
        avoidable, advice, fix = _advice(plan, name, level, capacity)
    group, where = groups[index].tolist(), sorted(set(touched[index].tolist()))
    message = (
        f"{name}: {int(crossing.sum())} of {len(groups)} groups span {level}s, e.g. "
        f"{_short(group)} on {level}s {where}; {advice}"
    )
    return LocalityFinding(name, group, where, message, avoidable, level, int(crossing.sum()),
                           fix)  # fmt: skip


def _crosses(plan: Plan, name: str, capacity: int) -> bool:
    """Whether ``name``'s groups cross units of ``capacity`` consecutive ranks."""
    units = plan.groups(name) // capacity
    return bool((units.min(axis=1) != units.max(axis=1)).any())


def _advice(
    plan: Plan, name: Dim, level: str, per_node: int
) -> tuple[bool, str, dict[str, Any] | None]:
    """Whether the crossing can be avoided, the sentence that says why and how, and the
    change of layout (keywords of :class:`~gangmesh.plan.layout.Layout`) that avoids it."""
    view = plan.view_of(name)
    position = view.names.index(name)
    inside = [n for n, s in zip(view.names[position + 1 :], view.sizes[position + 1 :], strict=True)
              if s > 1]  # fmt: skip
    lower = [n for n in inside if _priority(n) > _priority(name)]
    inner = math.prod(view.size(n) for n in inside)
    size = view.size(name)
    what = FACTS[name].traffic
    if lower:
        order = _order_fix(plan, name, per_node)
        if order is not None:
            return (
                True,
                (
                    f"{' and '.join(lower)} {'lie' if len(lower) > 1 else 'lies'} inside {name} in "
                    f"the order, so {what} strides across {level}s; put {name} inside "
                    f"{' and '.join(lower)} (--order {','.join(order)})"
                ),
                {"order": order},
            )
    if inside and inner >= per_node:
        held = " * ".join(f"{n}={view.size(n)}" for n in inside)
        return (
            False,
            (
                f"{held} already {'fill' if len(inside) > 1 else 'fills'} a {level} of {per_node} "
                f"ranks, so {name} has to cross {level}s; "
                f"nothing to change unless those sizes shrink"
            ),
            None,
        )
    room = per_node // inner
    if inner * size > per_node and FACTS[name].spreads:
        return (
            False,
            (
                f"{name}={size} is larger than the {room} ranks a {level} leaves it, so "
                f"{what} crosses {level}s; expected at this size"
            ),
            None,
        )
    resized = _size_fix(plan, name, per_node)
    if resized is None:
        return (
            False,
            (
                f"no other size of {name} alone keeps its groups inside a {level} of {per_node} "
                f"ranks at this world size; change the sizes inside it or the {level} size"
            ),
            None,
        )
    change = _change_text(plan, resized)
    if inner * size <= per_node:
        return (
            True,
            (
                f"{name}={size} fits in a {level} of {per_node} ranks, but its {inner * size}-rank "
                f"blocks are not aligned to {level}s; {change}"
            ),
            resized,
        )
    return True, f"{name}={size} needs more than a {level} of {per_node} ranks; {change}", resized


def _replanned(plan: Plan, change: dict[str, Any]) -> Plan | None:
    """``plan`` with the layout changed, or None where the change is no valid layout."""
    try:
        layout = dataclasses.replace(plan.layout, **change)
        return type(plan).from_layout(plan.world_size, layout)
    except ValueError:
        return None


def _fixes(plan: Plan, name: str, per_node: int, change: dict[str, Any]) -> bool:
    """Whether ``change`` is a valid layout whose ``name`` groups stay in units of
    ``per_node`` consecutive ranks."""
    changed = _replanned(plan, change)
    return changed is not None and not _crosses(changed, name, per_node)


def _order_fix(plan: Plan, name: str, per_node: int) -> tuple[str, ...] | None:
    """An order that moves ``name`` inward past the dimensions of lower priority, if that
    keeps its groups in a unit."""
    order = [n for n in plan.layout.order if n != name]
    for at in range(len(order), -1, -1):
        candidate = tuple(str(n) for n in (*order[:at], name, *order[at:]))
        if candidate != tuple(plan.layout.order) and _fixes(plan, name, per_node,
                                                            {"order": candidate}):  # fmt: skip
            return candidate
    return None


def _size_fix(plan: Plan, name: str, per_node: int) -> dict[str, Any] | None:
    """The size of ``name`` nearest its own (the smaller of two as near), up to what a unit
    leaves it, that keeps its groups in a unit (another dimension inferring the rest), as
    a layout change."""
    layout = plan.layout
    view = plan.view_of(name)
    inner = math.prod(view.sizes[view.names.index(name) + 1 :])
    relief = FACTS[Dim(name)].relief or (Dim.DP_SHARD if name != Dim.DP_SHARD else None)
    current = layout.size(name)
    sizes = range(1, max(current - 1, per_node // inner) + 1)
    for size in sorted((s for s in sizes if s != current), key=lambda s: (abs(s - current), s)):
        change: dict[str, Any] = {name: size}
        if name in DENSE_DIMS and relief is not None:
            change[relief] = -1
        if name == Dim.TP and layout.etp == layout.tp > 1:
            change[Dim.ETP] = size
        if _fixes(plan, name, per_node, change):
            return change
    return None


def _change_text(plan: Plan, change: dict[str, Any]) -> str:
    """``"use tp=3 (dp_shard becomes 4)"`` for a change of sizes."""
    changed = _replanned(plan, change)
    assert changed is not None
    asked = [f"{n}={v}" for n, v in change.items() if v != -1]
    follows = [f"{n} becomes {changed.size_of(n)}" for n, v in change.items() if v == -1]
    text = "use " + " and ".join(asked)
    return text + (f" ({', '.join(follows)})" if follows else "")


def _priority(name: str) -> int:
    return LOCALITY_PRIORITY.index(name) if name in LOCALITY_PRIORITY else len(LOCALITY_PRIORITY)


def _short(group: list[int], limit: int = 8) -> str:
    if len(group) <= limit:
        return str(group)
    return "[" + ", ".join(map(str, group[:limit])) + f", ... ({len(group)} ranks)]"
