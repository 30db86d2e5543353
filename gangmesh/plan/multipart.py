"""The plan of each part of a job: its layout over its ranks, its groups in global ranks,
ranks of several parts paired by a coordinate, and its locality.

>>> plan = MultiPartPlan(PartsPlan(8, {"trainer": 4, "generator": 4}),
...                      {"trainer": Layout(tp=2), "generator": Layout(tp=2)})
>>> plan.groups("generator", "tp").tolist()
[[4, 5], [6, 7]]

This module uses numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import final

import numpy as np
from typing_extensions import override

from gangmesh.plan._checks import InvalidTypeError, check_index
from gangmesh.plan.cluster import Cluster
from gangmesh.plan.dims import ALIASES, FLATTENED
from gangmesh.plan.layout import Layout
from gangmesh.plan.locality import LocalityFinding
from gangmesh.plan.parts import PartsPlan
from gangmesh.plan.parts_locality import part_findings
from gangmesh.plan.topology import MeshTopology

__all__ = ["MultiPartPlan"]


@final
class MultiPartPlan:
    """The plan of each part of a :class:`~gangmesh.plan.parts.PartsPlan`: groups in
    part-local ranks from :meth:`plan`, in global ranks from :meth:`groups` and
    :meth:`group_of`.

    :param parts: the parts.
    :param layouts: part name -> layout; a part left out gets ``Layout()``.
    :raises TypeError: a layout that is not a :class:`~gangmesh.plan.layout.Layout`.
    :raises ValueError: an unknown part, or a layout that does not fit its part.
    """

    __slots__ = ("_parts", "_plans")

    def __init__(self, parts: PartsPlan, layouts: Mapping[str, Layout]) -> None:
        unknown = [name for name in layouts if name not in parts.names]
        if unknown:
            raise ValueError(
                f"layouts: unknown part {', '.join(map(str, unknown))}; expected parts of "
                f"{', '.join(parts.names)}"
            )
        self._parts = parts
        self._plans: dict[str, MeshTopology] = {}
        for name in parts.names:
            layout = layouts.get(name, Layout())
            if not isinstance(layout, Layout):
                raise InvalidTypeError(f"layouts[{name!r}]: expected a Layout, got {layout!r}")
            try:
                self._plans[name] = MeshTopology.from_layout(parts.size(name), layout)
            except ValueError as ex:
                raise ValueError(
                    f"layouts[{name!r}]: part {name} has {parts.size(name)} ranks: {ex}"
                ) from ex

    @override
    def __repr__(self) -> str:
        plans = ", ".join(f"{name}={plan!r}" for name, plan in self._plans.items())
        return f"MultiPartPlan({self._parts!r}, {plans})"

    @override
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MultiPartPlan):
            return NotImplemented
        return self._parts == other._parts and self._plans == other._plans

    @override
    def __hash__(self) -> int:
        return hash((self._parts, tuple(self._plans.values())))

    @property
    def parts(self) -> PartsPlan:
        """The parts: names, sizes and ranks."""
        return self._parts

    def plan(self, name: str) -> MeshTopology:
        """The plan of part ``name``, in part-local ranks ``0 .. size - 1``.

        :param name: a part name.
        :raises ValueError: no part has that name.
        """
        return self._plans[self._parts.known(name)]

    def groups(self, name: str, dim: str | tuple[str, ...]) -> np.ndarray:
        """Every group of part ``name`` along ``dim``, in global ranks: an int64 array
        ``[n_groups, group_size]`` (the part's :meth:`~gangmesh.MeshTopology.groups` shifted).

        :param name: a part name.
        :param dim: a dimension name or alias, or a tuple of dimension names.
        :raises ValueError: an unknown part or dimension.
        """
        return self.plan(name).groups(dim) + self._parts.offset(name)

    def group_of(self, rank: int, dim: str | tuple[str, ...]) -> list[int]:
        """The group along ``dim`` that holds global rank ``rank``, in global ranks.

        :param rank: a global rank.
        :param dim: a dimension name or alias, or a tuple of dimension names.
        :raises ValueError: ``rank`` is no rank of the job, or an unknown dimension.
        """
        name = self._parts.part_of(rank)
        offset = self._parts.offset(name)
        return [offset + r for r in self._plans[name].group_of(rank - offset, dim)]

    def coordinate(self, rank: int) -> dict[str, int]:
        """The coordinate of global rank ``rank`` in its part's plan.

        :param rank: a global rank.
        :raises ValueError: ``rank`` is no rank of the job.
        """
        name = self._parts.part_of(rank)
        return self._plans[name].coordinate(rank - self._parts.offset(name))

    def pair_by_coordinate(
        self,
        dim: str,
        *,
        parts: Sequence[str] | None = None,
        where: Mapping[str, Mapping[str, int]] | None = None,
    ) -> list[dict[str, list[int]]]:
        """For each coordinate ``c`` along ``dim``, the ranks of each part at ``c``: what
        ``parts.bridge(**pairs[c])`` takes to join the ranks that hold the same shard.

        >>> plan = MultiPartPlan(PartsPlan(8, {"trainer": 4, "generator": 4}),
        ...     {"trainer": Layout(tp=2), "generator": Layout(tp=2)})
        >>> plan.pair_by_coordinate("tp", where={"trainer": {"dp_shard": 0}})
        [{'trainer': [0], 'generator': [4, 6]}, {'trainer': [1], 'generator': [5, 7]}]

        :param dim: a dimension of the mesh (or an alias of one), the same size in every
            part paired.
        :param parts: the parts to pair, in the order the dicts list them (default: all).
        :param where: part name -> coordinates its ranks must also have (e.g. only the
            trainer ranks with dp_shard coordinate 0).
        :raises ValueError: an unknown part or dimension, ``dim`` of different sizes in
            the parts, ``where`` naming a part not paired, fixing ``dim`` itself, or
            leaving a part no rank at a coordinate.
        """
        names = list(self._parts.names if parts is None else parts)
        for name in names:
            self._parts.known(name, "parts")
        if not names or len(set(names)) != len(names):
            raise ValueError(f"parts: expected distinct part names, got {names}")
        axis = self._axis(dim)
        sizes = {name: self._plans[name].size_of(axis) for name in names}
        if len(set(sizes.values())) > 1:
            shown = ", ".join(f"{name} {size}" for name, size in sizes.items())
            raise ValueError(f"dim: {axis} has different sizes in the parts paired: {shown}")
        fixed = dict(where or {})
        stray = [name for name in fixed if name not in names]
        if stray:
            raise ValueError(
                f"where: part {', '.join(stray)} is not paired; expected some of {', '.join(names)}"
            )
        pairs: list[dict[str, list[int]]] = [{} for _ in range(sizes[names[0]])]
        for name in names:
            at = self._coordinates_where(name, axis, fixed.get(name, {}))
            for c, pair in enumerate(pairs):
                pair[name] = at[c]
        return pairs

    def _coordinates_where(self, name: str, axis: str, fixed: Mapping[str, int]) -> list[list[int]]:
        """Per coordinate along ``axis``, the global ranks of part ``name`` there that have
        the ``fixed`` coordinates too."""
        plan = self._plans[name]
        local = np.arange(plan.world_size, dtype=np.int64)
        keep = np.ones(plan.world_size, dtype=bool)
        for other, value in fixed.items():
            along = self._axis(other, f"where[{name!r}]")
            if along == axis:
                raise ValueError(f"where[{name!r}]: cannot fix {axis}, the dimension paired")
            check_index(f"where[{name!r}][{other!r}]", value, plan.size_of(along), "a coordinate")
            keep &= _positions(plan, along, local) == value
        positions = _positions(plan, axis, local)
        offset = self._parts.offset(name)
        out = []
        for c in range(plan.size_of(axis)):
            ranks = (local[keep & (positions == c)] + offset).tolist()
            if not ranks:
                raise ValueError(
                    f"where[{name!r}]: no rank of part {name} has {axis}={c} and {dict(fixed)}"
                )
            out.append(ranks)
        return out

    def _axis(self, dim: str, argument: str = "dim") -> str:
        """The one mesh dimension ``dim`` names; ValueError naming ``argument`` otherwise."""
        if not isinstance(dim, str):
            names: tuple[str, ...] = ()
        else:
            names = (dim,) if dim in FLATTENED else ALIASES.get(dim, (dim,))
        plan = next(iter(self._plans.values()))
        known_dims = [*plan.coordinate(0), *FLATTENED]
        if len(names) != 1 or names[0] not in known_dims:
            known = ", ".join(known_dims)
            raise ValueError(
                f"{argument}: expected one dimension of the mesh ({known}), got {dim!r}"
            )
        return str(names[0])

    def check_locality(
        self,
        ranks_per_node: int,
        *,
        hosts_per_domain: int | None = None,
        domains_per_rack: int | None = None,
    ) -> dict[str, list[LocalityFinding]]:
        """The locality findings of each part, in global ranks and nodes (nodes hold
        ``ranks_per_node`` consecutive global ranks; domains and racks, where given, hold
        consecutive nodes and domains): its gangs that cross them, as
        :meth:`~gangmesh.MeshTopology.check_locality` finds them where the part sits, and a
        finding for the root gang where a part shares a node with another part.

        >>> plan = MultiPartPlan(PartsPlan(8, {"a": 6, "b": 2}), {})
        >>> [f.dim for f in plan.check_locality(4)["b"]]
        ['root']

        :param ranks_per_node: how many consecutive ranks share a node.
        :param hosts_per_domain: nodes per NVLink domain; None: no domains.
        :param domains_per_rack: domains per rack; None: no racks.
        :raises ValueError: a size that is not positive or does not divide the world.
        """
        cluster = Cluster.uniform(
            self._parts.world_size, ranks_per_node, hosts_per_domain, domains_per_rack
        )
        return {
            name: part_findings(self._parts, name, plan, cluster)
            for name, plan in self._plans.items()
        }


def _positions(plan: MeshTopology, axis: str, local: np.ndarray) -> np.ndarray:
    """The coordinate along ``axis`` of each of the ``local`` ranks; a flattened dimension's
    is the rank's place in its group."""
    if axis in FLATTENED:
        return np.array([plan.rank_in(int(rank), axis) for rank in local], dtype=np.int64)
    return plan.view_of(axis).coordinates(local)[axis]
