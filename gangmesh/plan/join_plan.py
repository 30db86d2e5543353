"""Two jobs launched apart, seen together: each job's plan in its own ranks, and the ranks of
both paired by a coordinate, for the bridges between them.

>>> plan = JoinPlan({"trainer": MeshTopology(4, dp_shard=2, tp=2),
...                  "generator": MeshTopology(4, dp_replicate=2, tp=2)})
>>> plan.pair_by_coordinate("tp", where={"trainer": {"dp_shard": 0}})
[{'trainer': [0], 'generator': [0, 2]}, {'trainer': [1], 'generator': [1, 3]}]

This module uses numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, final

from typing_extensions import override

from gangmesh.plan.layout import Layout
from gangmesh.plan.multipart import MultiPartPlan
from gangmesh.plan.parts import PartsPlan, check_part_name
from gangmesh.plan.topology import MeshTopology

__all__ = ["JoinPlan", "plan_from_record", "plan_record"]


def plan_record(plan: MeshTopology) -> dict[str, Any]:
    """``plan`` as JSON-ready data, for the other job of a join.

    :param plan: a job's plan.
    """
    layout = plan.layout
    said = {f.name: getattr(layout, f.name) for f in fields(layout)}
    return {"world_size": plan.world_size, **said, "order": list(layout.order)}


def plan_from_record(record: Mapping[str, Any]) -> MeshTopology:
    """The plan :func:`plan_record` wrote.

    :param record: what :func:`plan_record` returned (read back from JSON).
    :raises ValueError: a record that is no plan's.
    """
    try:
        sizes = {f.name: record[f.name] for f in fields(Layout)}
        return MeshTopology.from_layout(int(record["world_size"]), Layout(**sizes))
    except (KeyError, TypeError) as ex:
        raise ValueError(f"record: expected a plan's record, got {dict(record)!r}") from ex


@final
class JoinPlan:
    """The plans of two joined jobs, by job name (each numbers its ranks from 0).

    :param plans: job name -> its plan; two jobs.
    :raises ValueError: not two jobs, or a name that cannot name a job (as a part's).
    """

    __slots__ = ("_parts", "plans")

    def __init__(self, plans: Mapping[str, MeshTopology]) -> None:
        if len(plans) != 2:
            raise ValueError(f"plans: expected the plans of two jobs, got {len(plans)}")
        for name in plans:
            check_part_name(name, "plans")
        self.plans = dict(plans)
        """Job name -> its plan."""
        sizes = {name: plan.world_size for name, plan in plans.items()}
        self._parts = MultiPartPlan(
            PartsPlan(sum(sizes.values()), sizes),
            {name: plan.layout for name, plan in plans.items()},
        )

    @override
    def __repr__(self) -> str:
        return f"JoinPlan({', '.join(f'{n}={p!r}' for n, p in self.plans.items())})"

    @property
    def names(self) -> tuple[str, ...]:
        """The two jobs' names."""
        return tuple(self.plans)

    def pair_by_coordinate(
        self, dim: str, where: Mapping[str, Mapping[str, int]] | None = None
    ) -> list[dict[str, list[int]]]:
        """For each coordinate along ``dim``, the ranks of each job at it (each job's own
        ranks): the bridges that join the ranks holding the same shard.

        :param dim: a dimension of both layouts, of one size in both.
        :param where: job name -> coordinates its ranks must also have.
        :raises ValueError: as :meth:`~gangmesh.plan.multipart.MultiPartPlan.pair_by_coordinate`.
        """
        pairs = self._parts.pair_by_coordinate(dim, where=where)
        offsets = {name: self._parts.parts.offset(name) for name in self.names}
        return [
            {name: [rank - offsets[name] for rank in ranks] for name, ranks in pair.items()}
            for pair in pairs
        ]
