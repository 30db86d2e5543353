"""Parts of a job: runs of consecutive global ranks, each with a root gang of its own, and
bridges, gangs that join chosen processes of several parts.

Several models in one job (a trainer and a generator, a student and a teacher) each take a
part; :func:`~gangmesh.create_gangs` builds a part's gangs on ``parts.root`` as it builds a
job's on the root gang, and tensors cross between parts over bridges.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, final

import torch.distributed as dist
from typing_extensions import override

from gangmesh.assembly.agreement import Agreement
from gangmesh.assembly.roots import check_root, mark_part_root
from gangmesh.plan._checks import check_timeout
from gangmesh.plan.cluster import Site
from gangmesh.plan.layout import Layout
from gangmesh.plan.multipart import MultiPartPlan
from gangmesh.plan.parts import PartsPlan, span_text
from gangmesh.plan.placement import given_sites, placement_request, this_site
from gangmesh.runtime.communicators import CommunicatorKey, Parent, split
from gangmesh.runtime.fake_gang import FakeGang
from gangmesh.runtime.faults import gang_error
from gangmesh.runtime.gang import DEFAULT_TIMEOUT, Gang
from gangmesh.runtime.ops import all_gather_objects
from gangmesh.runtime.process_group_gang import ProcessGroupGang

log = logging.getLogger("gangmesh")


def create_parts(
    root_gang: Gang,
    *,
    placement: bool | Sequence[Site] | None = None,
    timeout: timedelta | None = None,
    **sizes: int,
) -> Parts:
    """Split the job into parts, in the order given, each a run of consecutive global ranks.

    >>> import torch, gangmesh as gm
    >>> parts = gm.create_parts(gm.FakeGang(torch.device("cpu"), rank=5, size=8),
    ...                         trainer=4, rollout=-1)
    >>> parts.name, parts.root.rank, parts.root.size, parts.ranks("trainer")
    ('rollout', 1, 4, [0, 1, 2, 3])

    Every process of the job calls it with the same arguments (processes that differ are
    named within seconds). One size may be -1 (the rest of the world). Each part's root gang
    (:attr:`Parts.root`) is made as one split of the job's group, and takes
    :func:`~gangmesh.create_gangs` as the job's root gang does: the part's plan numbers its
    processes from 0 (``parts.ranks(name)[r]`` is the global rank of its rank ``r``).

    :param root_gang: the gang of every process, from :func:`~gangmesh.setup_root_gang`.
    :param placement: True: every process reports its site (as ``create_gangs`` gathers it)
        and each part must hold whole hosts; a sequence: the
        :class:`~gangmesh.plan.cluster.Site` of each global rank; None or False: no check.
    :param timeout: timeout of the parts' and bridges' groups; default: the root gang's.
    :param sizes: part name -> number of processes.
    :raises ValueError: sizes that do not add up to the job's size, two -1, a part named
        like a dimension, a part that shares a host with another where placement is asked,
        or processes that asked for different parts.
    :raises GangError: a peer did not come, or a group cannot be created.
    """
    check_root(root_gang, parts=False)
    request = {"parts": ",".join(f"{n}={s}" for n, s in sizes.items()), "timeout": timeout}
    agreeing = Agreement(
        root_gang, "create_parts", {**request, "placement": placement_request(placement)}
    )
    try:
        plan = PartsPlan(root_gang.size, sizes)
        timeout = check_timeout(timeout)
        given = given_sites(placement, root_gang.size)
    except (TypeError, ValueError):
        agreeing.leave_request()
        raise
    timeout = timeout or getattr(root_gang, "timeout", None) or DEFAULT_TIMEOUT
    agreeing.wait(timeout)
    if placement is True:
        given = all_gather_objects(root_gang, this_site())
    if given:
        _check_whole_hosts(plan, given)
    name = plan.part_of(root_gang.rank)
    log.info("Creating parts %s", plan)
    return Parts(plan, name, root_gang, _part_root(root_gang, plan, name, timeout), timeout)


def _check_whole_hosts(plan: PartsPlan, sites: Sequence[Site]) -> None:
    """:raises ValueError: a host holds processes of two parts, naming both and the host."""
    owner: dict[str, str] = {}
    for rank, site in enumerate(sites):
        part = plan.part_of(rank)
        first = owner.setdefault(site.host, part)
        if first != part:
            raise ValueError(
                f"placement: expected each part on whole hosts, but host {site.host} runs "
                f"ranks of {first} and of {part} (rank {rank}); give each part a multiple "
                f"of the ranks per host, in the order the launcher numbers the hosts"
            )


def _part_root(root: Gang, plan: PartsPlan, name: str, timeout: timedelta) -> Gang:
    """This process's part's root gang: one split of ``root``'s group, every process entering."""
    groups = [plan.ranks(part) for part in plan.names]
    gang = _split_gang(root, groups, plan.ranks(name), timeout, f"part:{name}")
    assert gang is not None  # every process is in its part
    mark_part_root(gang)
    return gang


def _split_gang(
    job: Gang, groups: list[list[int]], members: list[int], timeout: timedelta, label: str
) -> Gang | None:
    """The gang of ``members`` (global ranks, ascending; one of ``groups``) made as one
    split of ``job``'s group that every process of it enters; None where this process is
    not a member. A FakeGang job gives FakeGangs.

    :raises GangError: the group cannot be created.
    """
    mine = job.rank in members
    if not isinstance(job, ProcessGroupGang):
        return (
            FakeGang(job.device, rank=members.index(job.rank), size=len(members)) if mine else None
        )
    key = _key(job, members, timeout) if mine else None
    try:
        parent = Parent(job.as_process_group(), job.timeout, job.high_priority)
        lease = split(parent, groups, key, label, job._anyone_lacks(key))
    except (RuntimeError, ValueError) as ex:
        what = f"creating {label} of ranks {members} failed on rank {job.rank}"
        raise gang_error(what, job.global_ranks, job.rank, job.timeout, ex) from ex
    if lease is None:
        return None
    return ProcessGroupGang._leased(
        lease, job.device, name=label, monitored=job.monitored, high_priority=job.high_priority
    )


def _key(job: ProcessGroupGang, members: list[int], timeout: timedelta) -> CommunicatorKey:
    """The key of a group of ``members`` (global ranks, ascending) made off ``job``'s."""
    backend = dist.get_backend(job.as_process_group())
    return CommunicatorKey(tuple(members), backend, timeout, job.high_priority)


@final
class Parts:
    """The parts of a job, seen from one process: its part, that part's root gang, every
    part's ranks, and bridges between parts. Made by :func:`create_parts`.

    Closing a part's Gangs leaves the other parts and the bridges working; :meth:`close`
    closes what the Parts made (its part's root gang and its bridges), and nothing else.

    :param plan: every part's name and size.
    :param name: this process's part.
    :param job: the gang of every process of the job, which bridges are split from.
    :param root: the gang of this process's part.
    :param timeout: timeout of the bridges' groups.
    """

    __slots__ = ("_bridges", "_job", "_timeout", "name", "plan", "root")

    name: str
    """The part of this process."""
    root: Gang
    """The gang of this process's part: every process of it, numbered from 0."""
    plan: PartsPlan
    """Every part's name and ranks."""

    def __init__(
        self, plan: PartsPlan, name: str, job: Gang, root: Gang, timeout: timedelta
    ) -> None:
        self.plan, self.name, self.root = plan, name, root
        self._job, self._timeout = job, timeout
        self._bridges: list[Gang] = []

    def ranks(self, name: str) -> list[int]:
        """The global ranks of part ``name``, ascending.

        :param name: a part's name.
        :raises ValueError: no part of that name.
        """
        return self.plan.ranks(name)

    def bridge(self, **ranks_by_part: Sequence[int]) -> Gang | None:
        """A gang of the processes named, by part: ``bridge(trainer=[0], rollout=[4, 5])``;
        None on the processes not named. Every process of the job calls it with the same
        arguments. Its ranks follow the global ranks (on a ProcessGroupGang,
        ``bridge.global_ranks.index(0)`` is where global rank 0 sits), and it is closed by
        :meth:`close`. Bad arguments are refused on each process before it waits for another.

        :param ranks_by_part: part name -> global ranks of that part.
        :raises ValueError: an unknown part, a rank outside its part, or processes that
            asked for different bridges.
        :raises GangError: a peer did not come, or the group cannot be created.
        """
        members = list(self.plan.bridge_ranks(**ranks_by_part))
        by_part = {
            name: [r for r in members if r in self.plan.span(name)] for name in ranks_by_part
        }
        Agreement(self._job, "bridge", by_part).wait(self._timeout)
        gang = _split_gang(self._job, [members], members, self._timeout, "bridge")
        if gang is not None:
            self._bridges.append(gang)
        return gang

    def pair_by_coordinate(
        self,
        dim: str,
        layouts: Mapping[str, Layout | Mapping[str, Any]],
        where: Mapping[str, Mapping[str, int]] | None = None,
    ) -> list[dict[str, list[int]]]:
        """The ranks of each part that share a coordinate along ``dim``, per coordinate:
        what :meth:`bridge` takes to join, say, each generator tp rank with the trainer
        ranks that hold its shard. Every process can compute it.

        :param dim: a dimension every part of ``layouts`` has, of one size in all.
        :param layouts: part name -> the layout its gangs are built with (a Layout, or
            the keywords given to :func:`~gangmesh.create_gangs`); the parts paired, in order.
        :param where: part name -> coordinates its ranks must also have (``{"trainer":
            {"dp_shard": 0}}``).
        :raises ValueError: as :meth:`gangmesh.plan.multipart.MultiPartPlan.pair_by_coordinate`
            raises it, or a layout that is not one.
        """
        given = {
            name: layout if isinstance(layout, Layout) else Layout(**layout)
            for name, layout in layouts.items()
        }
        plan = MultiPartPlan(self.plan, given)
        return plan.pair_by_coordinate(dim, parts=list(given), where=where)

    def close(self) -> None:
        """Close this process's bridges and its part's root gang; later calls do nothing.

        Gangs built on :attr:`root` are closed by their own ``close``. Communicates with no
        peer.
        """
        for gang in self._bridges:
            gang.close()
        self._bridges.clear()
        self.root.close()

    def __enter__(self) -> Parts:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @override
    def __repr__(self) -> str:
        parts = ", ".join(f"{name} {span_text(self.plan.span(name))}" for name in self.plan.names)
        return f"Parts({parts}; this process: {self.name} rank {self.root.rank})"
