"""Plan a parallel layout without processes: which ranks form which gang.

The dense view has the dimensions pp, dp_replicate, dp_shard, cp and tp, outermost
(slowest-varying) first by default; ``order`` permutes them. A rank is the row-major
index of its coordinate, so inner dimensions hold adjacent ranks and stay on one node
first. The same ranks also form an expert view: pp and dp_replicate as in the dense
view, then efsdp, ep and etp. At ``ep = 1`` its groups are still real: efsdp holds the
ranks that shard one expert's weights, edp those that hold the same expert shard.

The names and facts of the dimensions come from :mod:`gangmesh.plan.dims`, the layout
asked for from :mod:`gangmesh.plan.layout`, the views and every group's ranks from
:mod:`gangmesh.plan.view`, the expert view's rules from :mod:`gangmesh.plan.expert`, and
the questions a plan answers about its groups from :mod:`gangmesh.plan.group_queries`.
This module uses numpy only; nothing here imports torch or starts a process.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from typing_extensions import Unpack, final, override

from gangmesh.plan._checks import check_rank_order, check_world_size
from gangmesh.plan.cluster import Cluster, Site
from gangmesh.plan.dim_keywords import with_keywords
from gangmesh.plan.dims import (
    ALIASES,
    DENSE_DIMS,
    EXPERT_DIMS,
    FLATTENED,
    GANG_NAMES,
    MEGATRON_NAMES,
    SHARED_DIMS,
    SIZE_NAMES,
    Dim,
)
from gangmesh.plan.expert import expert_view
from gangmesh.plan.group_queries import GroupQueries
from gangmesh.plan.layout import LAYOUT_DEFAULTS, Layout, LayoutKeywords
from gangmesh.plan.locality import LocalityFinding, find_crossings
from gangmesh.plan.view import View

__all__ = [
    "ALIASES",
    "DENSE_DIMS",
    "DIM_NAMES",
    "EXPERT_DIMS",
    "FLATTENED",
    "GANG_NAMES",
    "MEGATRON_NAMES",
    "SHARED_DIMS",
    "Dim",
    "Layout",
    "MeshTopology",
    "View",
]

DIM_NAMES = DENSE_DIMS
"""The dense dimension names (the name older code uses)."""


@final
class MeshTopology(GroupQueries):
    """The rank layout of a job with named parallel dimensions.

    Exactly one dense size may be -1; it is inferred from ``world_size``. ``order``
    is a permutation of the dense names, outermost first (a sequence, or a string
    such as ``"tp,pp,dp_replicate,dp_shard,cp"``), or the Megatron-Core spelling that
    :meth:`megatron_order` writes. :meth:`from_layout` takes a checked
    :class:`~gangmesh.plan.layout.Layout`.

    >>> plan = MeshTopology(8, tp=2)
    >>> plan.dims
    {'pp': 1, 'dp_replicate': 1, 'dp_shard': 4, 'cp': 1, 'tp': 2}
    >>> plan.groups("tp").tolist()
    [[0, 1], [2, 3], [4, 5], [6, 7]]
    >>> plan.group_of(5, "dp")
    [1, 3, 5, 7]
    >>> moe = MeshTopology(8, dp_shard=4, tp=2, ep=4)
    >>> moe.expert_dims
    {'pp': 1, 'dp_replicate': 1, 'efsdp': 2, 'ep': 4, 'etp': 1}
    >>> moe.groups("ep").tolist()
    [[0, 1, 2, 3], [4, 5, 6, 7]]

    :param world_size: number of processes in the job.
    :param pp: pipeline parallel size (stages).
    :param dp_replicate: replicated data parallel size (the replicas of HSDP).
    :param dp_shard: sharded data parallel size (FSDP); -1 infers it.
    :param cp: context parallel size.
    :param tp: tensor parallel size.
    :param ep: expert parallel size.
    :param etp: tensor parallel size of the experts: 1 or ``tp``.
    :param order: the dense dimensions, outermost first (or Megatron-Core's spelling).
    :param expert: whether the job's gangs include the expert view at ep = 1 and etp = 1
        (:attr:`uses_experts`); the view itself is planned either way.
    :raises ValueError: sizes that are not positive or whose product is not
        ``world_size`` (naming the dimensions, sizes and world size), or ``ep``,
        ``etp`` or ``order`` breaking a rule (naming it).
    """

    @with_keywords(LayoutKeywords, LAYOUT_DEFAULTS)
    def __init__(self, world_size: int, **keywords: Unpack[LayoutKeywords]) -> None:
        layout = Layout(**keywords)
        self._lay_out(check_world_size(world_size), layout)

    @classmethod
    def from_layout(cls, world_size: int, layout: Layout) -> MeshTopology:
        """The plan of ``layout`` over ``world_size`` processes.

        >>> MeshTopology.from_layout(8, Layout(tp=2)) == MeshTopology(8, tp=2)
        True

        :param world_size: number of processes in the job.
        :param layout: the sizes and order asked for.
        :raises ValueError: as :class:`MeshTopology` does.
        """
        plan = cls.__new__(cls)
        plan._lay_out(check_world_size(world_size), layout)
        return plan

    def _lay_out(self, world_size: int, layout: Layout) -> None:
        self._world_size = world_size
        self._sites: tuple[Site, ...] = ()
        sizes = layout.resolve(self._world_size)
        self._order = layout.order
        self._uses_experts = layout.uses_experts
        self._expert_asked = layout.expert
        self._dense = View(self._order, tuple(sizes[name] for name in self._order))
        self._expert = expert_view(self._dense, layout.ep, layout.etp)

    def placed(
        self,
        ranks: Sequence[int] | np.ndarray,
        expert: Sequence[int] | np.ndarray | None = None,
        *,
        sites: Sequence[Site] = (),
    ) -> MeshTopology:
        """This plan laid over a permutation of the global ranks: ``ranks[i]`` takes the
        place that rank ``i`` has in the dense view of the plan of the same layout, unplaced
        (``expert[i]`` in the expert view; default: the ranks that ``ranks`` puts at the
        same dense places). Every method then answers for the placed groups; groups of
        several dimensions list their ranks ascending. :func:`gangmesh.plan.placement.place`
        computes the permutations from where the ranks run, and keeps those ``sites``.

        >>> plan = MeshTopology(4, tp=2).placed([0, 2, 1, 3])
        >>> plan.groups("tp").tolist(), plan.coordinate(2)["tp"]
        ([[0, 2], [1, 3]], 1)

        :param ranks: a permutation of ``range(world_size)`` that keeps rank 0 first.
        :param expert: the same for the expert view.
        :param sites: where each global rank runs, if known (kept as :attr:`sites`).
        :raises ValueError: ``ranks`` or ``expert`` is no such permutation, or ``sites``
            does not hold one site per rank.
        """
        world = self._world_size
        dense = check_rank_order("ranks", ranks, world)
        if sites and len(sites) != world:
            raise ValueError(
                f"sites: expected the site of each of the {world} ranks, got {len(sites)} sites"
            )
        base = MeshTopology.from_layout(world, self.layout)
        unplaced = np.arange(world, dtype=np.int64)
        default = dense[base._expert.ranks(unplaced)]
        by_expert = default if expert is None else check_rank_order("expert", expert, world)
        if not np.array_equal(dense, unplaced) or not np.array_equal(by_expert, default):
            base._dense = base._dense.placed_over(dense)
            base._expert = base._expert.placed_over(by_expert)
        base._sites = tuple(sites)
        return base

    @property
    def sites(self) -> tuple[Site, ...]:
        """Where each global rank runs, where placement was given it; else empty."""
        return self._sites

    @property
    def placement(self) -> tuple[int, ...]:
        """The global rank at each dense place (see :meth:`placed`); empty where the ranks
        keep the launcher's numbering."""
        return self._dense.placed

    @override
    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={size}" for name, size in self.sizes().items())
        order = "" if self._order == DENSE_DIMS else f", order={','.join(self._order)!r}"
        expert = ", expert=True" if self._expert_asked else ""
        placed = ", placed" if self._dense.placed else ""
        return f"MeshTopology({self._world_size}, {sizes}{order}{expert}{placed})"

    @override
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MeshTopology):
            return NotImplemented
        return self._key == other._key

    @override
    def __hash__(self) -> int:
        return hash(self._key)

    @property
    def _key(self) -> tuple[int, View, View, bool]:
        return self._world_size, self._dense, self._expert, self._expert_asked

    @property
    def world_size(self) -> int:
        """Number of processes in the job."""
        return self._world_size

    @property
    def order(self) -> tuple[Dim, ...]:
        """The dense dimension names, outermost first."""
        return self._order

    @property
    def dims(self) -> dict[str, int]:
        """Dense dimension name -> size, outermost first."""
        return dict(zip(self._dense.names, self._dense.sizes, strict=True))

    @property
    def shape(self) -> tuple[int, ...]:
        """Dense sizes in mesh order, the shape of the dense DeviceMesh."""
        return self._dense.sizes

    @property
    def expert_dims(self) -> dict[str, int]:
        """Expert view name -> size, outermost first."""
        return dict(zip(self._expert.names, self._expert.sizes, strict=True))

    @property
    def expert_shape(self) -> tuple[int, ...]:
        """Sizes of the expert view, the shape of the expert DeviceMesh."""
        return self._expert.sizes

    @property
    def layout(self) -> Layout:
        """The layout of this plan, every size resolved (none is -1)."""
        return Layout(**self.sizes(), order=self._order, expert=self._expert_asked)

    @property
    def uses_experts(self) -> bool:
        """Whether the job's gangs include the expert view: ep or etp above 1, or asked for
        with ``expert=True``. Without it a dense job makes no group that only the expert
        view needs (efsdp and edp at ep = 1)."""
        return self._uses_experts

    def sizes(self) -> dict[str, int]:
        """Every size the layout was built from: the five dense ones, then ep and etp."""
        return {name: self.size_of(name) for name in SIZE_NAMES}

    def megatron_order(self) -> str:
        """The order as Megatron-Core writes it: innermost first, dashes, ep beside dp.

        ``order=`` (and ``gangmesh plan --order``) takes this spelling too.

        >>> MeshTopology(8, tp=2).megatron_order()
        'tp-cp-ep-dp-pp'

        :raises ValueError: an order Megatron-Core cannot write (dp_replicate not
            directly outside dp_shard: its one dp stands for both).
        """
        return self.layout.megatron_order()

    def check_locality(
        self,
        ranks_per_node: int | Cluster,
        *,
        hosts_per_domain: int | None = None,
        domains_per_rack: int | None = None,
    ) -> list[LocalityFinding]:
        """Gangs that cross nodes (domains, racks) where they should not; empty when all
        is local.

        See :func:`gangmesh.plan.locality.find_crossings` for the rules.

        >>> [f.level for f in MeshTopology(16, ep=8).check_locality(4, hosts_per_domain=2)]
        ['node']

        :param ranks_per_node: how many consecutive ranks share a node, or a
            :class:`~gangmesh.plan.cluster.Cluster`.
        :param hosts_per_domain: nodes per NVLink domain; None: no domains.
        :param domains_per_rack: domains per rack; None: no racks.
        :raises ValueError: a size that does not divide the world size.
        """
        return find_crossings(self, ranks_per_node, hosts_per_domain=hosts_per_domain,
                              domains_per_rack=domains_per_rack)  # fmt: skip
