"""Where ranks run: hosts, NVLink domains and racks, described by sizes or by each rank's site.

A :class:`Cluster` says which unit of each level (host, domain, rack) holds each global
rank. :meth:`Cluster.uniform` describes launchers that number ranks consecutively (a host
holds ``ranks_per_host`` consecutive ranks, a domain ``hosts_per_domain`` consecutive
hosts, a rack ``domains_per_rack`` consecutive domains); :meth:`Cluster.of_sites` takes the
site every rank reported (see :mod:`gangmesh.plan.placement`). This module uses numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gangmesh.plan._checks import InvalidTypeError, check_listable, check_positive


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


LEVELS: tuple[str, ...] = ("node", "domain", "rack")
"""The levels of a cluster, innermost first: a node (host), an NVLink domain, a rack."""


@dataclass(frozen=True)
class Site:
    """Where one rank runs: its host and, where known, its NVLink domain and rack.

    :param host: the host (node) name, or what ``GANGMESH_HOST`` says.
    :param domain: the NVLink domain; empty: unknown.
    :param rack: the rack; empty: unknown.
    """

    host: str
    """The host (node)."""
    domain: str = ""
    """The NVLink domain (e.g. an NVL72 system); empty: unknown (the host stands alone)."""
    rack: str = ""
    """The rack; empty: unknown."""

    def __post_init__(self) -> None:
        for name in ("host", "domain", "rack"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidTypeError(f"{name}: expected a string, got {value!r}")
        if not self.host:
            raise ValueError("host: expected a host name, got an empty string")


@dataclass(frozen=True, eq=False)
class Cluster:
    """The unit of each level that holds each rank, and how many ranks a unit holds.

    Made by :meth:`uniform` or :meth:`of_sites`.

    :param world_size: number of processes in the job.
    :param units: level -> the unit index of every global rank.
    :param capacity: level -> ranks in one unit.
    :param consecutive: whether every unit holds consecutive ranks.
    """

    world_size: int
    """Number of processes in the job."""
    units: dict[str, np.ndarray] = field(default_factory=dict)
    """Level name ("node", "domain", "rack") -> the unit index of every global rank (int64)."""
    capacity: dict[str, int] = field(default_factory=dict)
    """Level name -> ranks in one unit (the fewest any unit holds)."""
    consecutive: bool = True
    """Whether every unit holds consecutive ranks (the numbering torchrun and SLURM use)."""

    @classmethod
    def uniform(
        cls,
        world_size: int,
        ranks_per_host: int,
        hosts_per_domain: int | None = None,
        domains_per_rack: int | None = None,
    ) -> Cluster:
        """Units of consecutive ranks; a level without its size is left out.

        >>> Cluster.uniform(16, 4, hosts_per_domain=2).capacity
        {'node': 4, 'domain': 8}

        :param world_size: number of processes in the job.
        :param ranks_per_host: ranks on one host (node).
        :param hosts_per_domain: hosts in one NVLink domain; None: no domains.
        :param domains_per_rack: domains in one rack; None: no racks (needs domains).
        :raises ValueError: a size that is not positive, a unit that is smaller than the
            world and does not divide it, or racks without domains.
        """
        world = check_positive("world_size", world_size)
        check_positive("ranks_per_node", ranks_per_host)
        check_listable("world_size", world, "a locality check")
        sizes = [("ranks_per_node", ranks_per_host), ("hosts_per_domain", hosts_per_domain)]
        if domains_per_rack is not None and hosts_per_domain is None:
            raise ValueError(
                f"domains_per_rack: needs hosts_per_domain (racks hold domains), got "
                f"domains_per_rack={domains_per_rack} without it"
            )
        sizes.append(("domains_per_rack", domains_per_rack))
        units: dict[str, np.ndarray] = {}
        capacity: dict[str, int] = {}
        span = 1
        ranks = np.arange(world, dtype=np.int64)
        for level, (name, size) in zip(LEVELS, sizes, strict=True):
            if size is None:
                break
            span *= check_positive(name, size)
            if level == "node":
                check_ranks_per_node(world, span)
            elif span < world and world % span:
                raise ValueError(
                    f"{name}: expected {level}s of {span} ranks to divide world_size {world} "
                    f"(every {level} holds the same number of ranks), got {name}={size}"
                )
            units[level] = ranks // min(span, world)  # one unit holds a world it exceeds
            capacity[level] = span
        return cls(world, units, capacity, True)

    @classmethod
    def of_sites(cls, sites: Sequence[Site]) -> Cluster:
        """The cluster that the sites of every rank (indexed by global rank) describe.

        A level is kept where some site names it: a rank without a domain (rack) is
        its host's (domain's) only member.

        :param sites: the site of each global rank.
        :raises ValueError: ``sites`` is empty.
        """
        if isinstance(sites, (str, bytes)) or not isinstance(sites, Sequence):
            raise InvalidTypeError(f"sites: expected a sequence of Sites, got {sites!r}")
        if not sites:
            raise ValueError("sites: expected the site of every rank, got none")
        for rank, site in enumerate(sites):
            if not isinstance(site, Site):
                raise InvalidTypeError(f"sites[{rank}]: expected a Site, got {site!r}")
        keys = [
            [s.host for s in sites],
            [(s.domain or f"host {s.host}") for s in sites],
            [(s.rack or f"domain {s.domain or s.host}") for s in sites],
        ]
        named = [True, any(s.domain for s in sites), any(s.rack for s in sites)]
        units: dict[str, np.ndarray] = {}
        capacity: dict[str, int] = {}
        consecutive = True
        for level, key, kept in zip(LEVELS, keys, named, strict=True):
            if not kept:
                continue
            index: dict[object, int] = {}
            unit = np.array([index.setdefault(k, len(index)) for k in key], dtype=np.int64)
            units[level] = unit
            capacity[level] = int(np.bincount(unit).min())
            consecutive = consecutive and bool((np.diff(unit) >= 0).all())
        return cls(len(sites), units, capacity, consecutive)

    def levels(self) -> list[str]:
        """The levels described, innermost first."""
        return [level for level in LEVELS if level in self.units]
