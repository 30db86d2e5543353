"""Placement: lay a plan over the ranks so that inner dimensions stay in a host, a domain, a rack.

Launchers number ranks in their own order: SLURM's cyclic distribution interleaves
hosts, torchrun numbers nodes in rendezvous order. Given the :class:`~gangmesh.plan.cluster.Site`
of every rank, :func:`placement_order` computes one permutation of the global ranks
(the same on every process) over which the plan's row-major layout keeps its innermost
dimensions inside a host first, then inside an NVLink domain, then a rack.

Each process learns its own site from the environment (:func:`this_site`):

- ``GANGMESH_HOST``: the host identity (default: ``socket.gethostname()``); set it to
  describe hosts that the machine cannot tell apart, e.g. in tests or on shared hosts;
- ``GANGMESH_DOMAIN``: the NVLink domain (e.g. the NVL72 system) of the host;
- ``GANGMESH_RACK``: the rack; else the switch above the node in ``SLURM_TOPOLOGY_ADDR``
  (SLURM's topology plugin, ``switch.switch.node``), where SLURM sets it.

NVML reports an NVLink fabric cluster id on NVLink-domain systems; it is not read here
(it needs an NVML binding that is no dependency): set ``GANGMESH_DOMAIN`` from it.

The ranks are first taken host by host (hosts within a domain, domains within a rack,
each in the order of its lowest rank), which keeps whatever inner dimensions fit a host
inside one, as consecutive numbering would. Then the slices along each dimension are
reordered, which keeps every group's members, so that the ranks ascend along every
dimension: torch numbers a group's members ascending, and a DeviceMesh's coordinates
must agree with that. Where the launcher's numbering allows no such order (no
numbering that launchers use is known to), the launcher's numbering stays and a
warning says so. This module uses numpy only.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import Mapping, Sequence

import numpy as np

from gangmesh.plan.cluster import Cluster, Site
from gangmesh.plan.dims import FLATTENED
from gangmesh.plan.locality import checked_dims
from gangmesh.plan.topology import MeshTopology

log = logging.getLogger("gangmesh")

HOST_ENV = "GANGMESH_HOST"
"""Environment variable that overrides the host identity of a process."""
DOMAIN_ENV = "GANGMESH_DOMAIN"
"""Environment variable that names the NVLink domain of a process's host."""
RACK_ENV = "GANGMESH_RACK"
"""Environment variable that names the rack of a process's host."""


def this_site(environ: Mapping[str, str] | None = None) -> Site:
    """Where this process runs, from the environment (see the module's documentation).

    >>> this_site({"GANGMESH_HOST": "a", "SLURM_TOPOLOGY_ADDR": "s0.s3.node7"})
    Site(host='a', domain='', rack='s0.s3')

    :param environ: the environment to read (default: ``os.environ``).
    """
    env = os.environ if environ is None else environ
    host = env.get(HOST_ENV) or socket.gethostname()
    rack = env.get(RACK_ENV, "")
    address = env.get("SLURM_TOPOLOGY_ADDR", "")
    if not rack and "." in address:
        rack = address.rsplit(".", 1)[0]
    return Site(host, env.get(DOMAIN_ENV, ""), rack)


def given_sites(placement: object, world_size: int) -> list[Site]:
    """The sites given as a ``placement`` argument; empty for None, False and True (where
    they are gathered from the processes).

    :raises ValueError: ``placement`` is neither a bool nor one Site per rank.
    """
    if placement is None or isinstance(placement, bool):
        return []
    if (
        not isinstance(placement, Sequence)
        or isinstance(placement, str)
        or len(placement) != world_size
        or not all(isinstance(s, Site) for s in placement)
    ):
        raise ValueError(
            f"placement: expected True, False, None or a gangmesh.Site for each of the "
            f"{world_size} ranks, got {placement!r:.200}"
        )
    return list(placement)


def placement_request(placement: object) -> object:
    """What the processes must agree on about a ``placement`` argument (JSON-ready)."""
    if placement is None or isinstance(placement, bool):
        return bool(placement)
    if isinstance(placement, Sequence) and not isinstance(placement, str):
        return [list(dataclasses.astuple(s)) if isinstance(s, Site) else repr(s) for s in placement]
    return repr(placement)


def placement_order(plan: MeshTopology, sites: Sequence[Site]) -> tuple[np.ndarray, np.ndarray]:
    """The global rank at each place of the dense view and of the expert view of ``plan``
    so that its inner dimensions stay in a host, then a domain, then a rack; rank 0
    first, and every group's ranks ascending along each dimension. Every group has the
    members it has in ``plan`` laid over :func:`host_order`. Both are ``plan``'s own
    numbering where the sites already hold consecutive ranks, where the launcher's
    numbering crosses fewer units (compared level by level, innermost first), or where no
    such permutation exists (a warning says so).

    >>> sites = [Site("a" if rank % 2 == 0 else "b") for rank in range(8)]
    >>> dense, expert = placement_order(MeshTopology(8, tp=2), sites)
    >>> dense.tolist(), expert.tolist()
    ([0, 2, 1, 3, 4, 6, 5, 7], [0, 1, 2, 3, 4, 5, 6, 7])

    :param plan: the plan to place (unplaced).
    :param sites: the site of each global rank.
    :raises ValueError: ``sites`` does not hold one site per rank of ``plan``.
    """
    world = plan.world_size
    if len(sites) != world:
        raise ValueError(
            f"sites: expected the site of each of the {world} ranks, got {len(sites)} sites"
        )
    if plan.placement:
        plan = MeshTopology.from_layout(world, plan.layout)
    everywhere = np.arange(world, dtype=np.int64)
    dense_view, expert_view = plan.view(), plan.view(expert=True)
    unplaced = everywhere, expert_view.ranks(everywhere)
    grouped = host_order(sites)
    if np.array_equal(grouped, everywhere):
        return unplaced
    dense = _ascending(grouped.reshape(dense_view.sizes))
    expert = _ascending(grouped[unplaced[1]].reshape(expert_view.sizes))
    if dense is None or expert is None:
        log.warning(
            "placement: no order of the ranks keeps the groups of %s inside hosts as well as "
            "every group's members ascending (as torch numbers them); keeping the launcher's "
            "numbering",
            plan,
        )
        return unplaced
    placed = plan.placed(dense, expert)
    if not all(_uniform(placed, name) for name in FLATTENED):
        log.warning("placement: merged dimensions of %s would not ascend; keeping the "
                    "launcher's numbering", plan)  # fmt: skip
        return unplaced
    cluster = Cluster.of_sites(sites)
    if _crossings(placed, cluster) > _crossings(plan, cluster):
        return unplaced
    return dense, expert


def _crossings(plan: MeshTopology, cluster: Cluster) -> list[int]:
    """How many groups cross, per level (innermost first) and checked dimension (the most
    important first): what placement makes smaller, compared in that order."""
    counts = []
    for level in cluster.levels():
        units = cluster.units[level]
        for name in checked_dims(plan):
            touched = units[plan.groups(name)]
            counts.append(int((touched.min(axis=1) != touched.max(axis=1)).sum()))
    return counts


def host_order(sites: Sequence[Site]) -> np.ndarray:
    """The ranks host by host: hosts within a domain, domains within a rack, each in the
    order of its lowest rank, and the ranks of a host ascending.

    Laid row-major, a plan over these ranks keeps inner dimensions in a host (domain,
    rack) exactly where it would over consecutively numbered ranks; :func:`placement_order`
    then reorders slices of the mesh, which keeps every group's members.

    >>> host_order([Site("a"), Site("b"), Site("a"), Site("b")]).tolist()
    [0, 2, 1, 3]

    :param sites: the site of each global rank.
    :raises ValueError: ``sites`` is empty.
    """
    cluster = Cluster.of_sites(sites)
    levels = [cluster.units[level] for level in cluster.levels()]
    everywhere = np.arange(len(sites), dtype=np.int64)
    return np.lexsort([everywhere, *levels])  # the outermost level is the first key


def _ascending(grid: np.ndarray) -> np.ndarray | None:
    """``grid`` (ranks) with the slices along each axis reordered so that the ranks ascend
    along every axis, flattened; None where the lines along an axis disagree on the order."""
    for axis in range(grid.ndim):
        lines = np.moveaxis(grid, axis, -1).reshape(-1, grid.shape[axis])
        orders = np.argsort(lines, axis=1, kind="stable")
        if not (orders == orders[0]).all():
            return None
        grid = np.take(grid, orders[0], axis=axis)
    return grid.reshape(-1)


def _uniform(plan: MeshTopology, name: str) -> bool:
    """Whether the lines of a flattened dimension sort the same way everywhere, so that a
    mesh that merges its dimensions (ascending) keeps every other dimension's groups."""
    view, names = plan.view_of(name), plan.resolve(name)
    inner = [view.names.index(n) for n in names]
    outer = [i for i in range(len(view.names)) if i not in inner]
    lines = view.grid().transpose(outer + inner).reshape(-1, plan.size_of(name))
    orders = np.argsort(lines, axis=1, kind="stable")
    return bool((orders == orders[0]).all())


def place(plan: MeshTopology, sites: Sequence[Site]) -> MeshTopology:
    """``plan`` laid over :func:`placement_order` of ``sites``, which it keeps
    (:attr:`~gangmesh.MeshTopology.sites`).

    :param plan: the plan to place (unplaced).
    :param sites: the site of each global rank.
    :raises ValueError: ``sites`` does not hold one site per rank of ``plan``.
    """
    dense, expert = placement_order(plan, sites)
    return plan.placed(dense, expert, sites=sites)
