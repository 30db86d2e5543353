"""Locality of the parts of a job: each part's gangs where the part sits, and parts that
share a node.

A part's plan numbers its ranks from 0; the part sits at an offset, possibly in the middle
of a node. :class:`AtOffset` shows :func:`~gangmesh.plan.locality.find_crossings` the plan
in global ranks, so that its findings, and the layout changes it proposes, hold for the
nodes the part really touches. This module uses numpy only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from gangmesh.plan.cluster import Cluster
from gangmesh.plan.dims import ROOT
from gangmesh.plan.layout import Layout
from gangmesh.plan.locality import LocalityFinding, find_crossings
from gangmesh.plan.topology import MeshTopology
from gangmesh.plan.view import View

if TYPE_CHECKING:
    from gangmesh.plan.parts import PartsPlan


class AtOffset:
    """A part-local plan whose groups are given in global ranks (``offset`` added), as
    the locality check reads a plan (:class:`~gangmesh.plan.locality.Plan`).

    :param plan: the part's plan, in part-local ranks.
    """

    offset: ClassVar[int] = 0
    """The global rank of the part's rank 0."""

    def __init__(self, plan: MeshTopology) -> None:
        self._plan = plan

    @classmethod
    def at(cls, offset: int) -> type[AtOffset]:
        """The class whose plans sit at global rank ``offset``.

        :param offset: the global rank of the part's rank 0.
        """
        return type(f"AtOffset{offset}", (cls,), {"offset": offset})

    @classmethod
    def from_layout(cls, world_size: int, layout: Layout) -> AtOffset:
        """The plan of ``layout`` over the part's ``world_size`` ranks, at the same offset.

        :param world_size: number of ranks of the part.
        :param layout: the sizes and order asked for.
        """
        return cls(MeshTopology.from_layout(world_size, layout))

    @property
    def world_size(self) -> int:
        """Number of ranks of the part."""
        return self._plan.world_size

    @property
    def layout(self) -> Layout:
        """The layout of the part's plan."""
        return self._plan.layout

    def size_of(self, dim: str) -> int:
        """Size of a dimension of the part's plan.

        :param dim: a dimension name or alias.
        """
        return self._plan.size_of(dim)

    def view_of(self, dim: str) -> View:
        """The view of the part's plan that holds ``dim``.

        :param dim: a dimension name or alias.
        """
        return self._plan.view_of(dim)

    def groups(self, dim: str) -> np.ndarray:
        """Every group along ``dim``, in global ranks.

        :param dim: a dimension name or alias.
        """
        return self._plan.groups(dim) + self.offset


def part_findings(
    parts: PartsPlan, name: str, plan: MeshTopology, cluster: Cluster
) -> list[LocalityFinding]:
    """The locality findings of part ``name`` (whose plan is ``plan``), in global ranks:
    first whether it shares a node with another part, then its gangs that cross nodes
    (domains, racks).

    :param parts: the parts of the job.
    :param name: the part to check.
    :param plan: the part's plan, in part-local ranks.
    :param cluster: the job's nodes (domains, racks) of consecutive global ranks.
    """
    per_node = cluster.capacity["node"]
    span = parts.span(name)
    findings = find_crossings(AtOffset.at(span[0])(plan), cluster)
    shared = [node for node in (span[0] // per_node, span[-1] // per_node)
              if _others(parts, name, node, per_node)]  # fmt: skip
    if not shared:
        return findings
    nodes = sorted(set(shared))
    others = sorted({p for node in nodes for p in _others(parts, name, node, per_node)},
                    key=parts.names.index)  # fmt: skip
    with_others = f"part{'s' if len(others) > 1 else ''} {', '.join(others)}"
    one_host = per_node >= parts.world_size
    if one_host:  # expected: nothing to change
        message = (
            f"{ROOT}: one host: part {name} (ranks {span[0]}-{span[-1]}) shares it with "
            f"{with_others}, as every part of a job on one host does"
        )
    else:
        message = (
            f"{ROOT}: part {name} (ranks {span[0]}-{span[-1]}) shares node"
            f"{'s' if len(nodes) > 1 else ''} {nodes} with {with_others}, so their traffic "
            f"shares the node's links; parts of whole nodes ({per_node} ranks each) keep "
            f"them apart"
        )
    first = LocalityFinding(ROOT, list(span), nodes, message, not one_host, "node", 1)
    return [first, *findings]


def _others(parts: PartsPlan, name: str, node: int, per_node: int) -> list[str]:
    """The parts other than ``name`` with a rank on ``node``."""
    first, last = node * per_node, min(parts.world_size, (node + 1) * per_node) - 1
    names = parts.names
    held = names[names.index(parts.part_of(first)) : names.index(parts.part_of(last)) + 1]
    return [other for other in held if other != name]
