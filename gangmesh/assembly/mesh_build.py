"""Build the gangs and DeviceMeshes of a plan, one communicator per distinct set of ranks."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup
from torch.distributed.device_mesh import DeviceMesh

from gangmesh.assembly.mesh_views import build_meshes
from gangmesh.plan.dims import FACTS, Dim
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime import _c10d
from gangmesh.runtime.communicators import CommunicatorKey, Lease, Parent, holds, lend, split
from gangmesh.runtime.fake_gang import FakeGang
from gangmesh.runtime.faults import gang_error
from gangmesh.runtime.gang import Gang, GangError, ReduceOperation
from gangmesh.runtime.process_group_gang import ProcessGroupGang
from gangmesh.runtime.unbuilt_gang import UnbuiltGang

log = logging.getLogger("gangmesh")

BUILT_NAMES: tuple[Dim, ...] = tuple(FACTS)
"""Every gang a Gangs holds besides root: each dimension of the registry, flattened ones
included."""


@dataclass
class Built:
    """What building a plan gives one process."""

    gangs: dict[str, Gang]
    meshes: dict[str, DeviceMesh] = field(default_factory=dict)
    """Mesh name (of mesh_views.MESH_NAMES) -> DeviceMesh."""
    leases: list[Lease] = field(default_factory=list)
    """Groups the meshes use beyond the gangs' own (the root's, one-process ones)."""


def fake_gangs(root: Gang, plan: MeshTopology) -> Built:
    """FakeGangs with the ranks and sizes ``plan`` gives the root gang's rank."""
    rank = root.rank
    gangs: dict[str, Gang] = {
        name: _unbuilt(root, plan, name)
        if _unasked(plan, name)
        else FakeGang(root.device, rank=plan.rank_in(rank, name), size=plan.size_of(name))
        for name in BUILT_NAMES
    }
    return Built(gangs)


def _unasked(plan: MeshTopology, name: Dim) -> bool:
    """Whether dimension ``name`` has groups of several processes that only the expert view,
    which the job did not ask for, uses (efsdp and edp at ep = 1 and etp = 1)."""
    return FACTS[name].expert and not plan.uses_experts and plan.size_of(name) > 1


def _unbuilt(root: Gang, plan: MeshTopology, name: Dim) -> UnbuiltGang:
    """The stand-in for the gang of an expert dimension the job did not ask for."""
    return UnbuiltGang(
        root.device,
        name=name,
        rank=plan.rank_in(root.rank, name),
        size=plan.size_of(name),
        hint="the job asked for no expert view (ep = 1, etp = 1); "
        "create_gangs(..., expert=True) builds it",
    )


def build(root: ProcessGroupGang, plan: MeshTopology, timeout: timedelta) -> Built:
    """The gangs and meshes of ``root``'s rank; every process of ``root`` calls it.

    The plan numbers the root's processes: its rank ``r`` is the root's ``r``-th member
    (global ranks ascend in the root, which spans the job or one part of it).

    A set of ranks that several dimensions share (or the whole world, or a group
    an earlier Gangs holds) gets one communicator; a dimension of size 1 gets a
    FakeGang and, in the meshes, one one-process group of the root's backend.

    :raises GangError: a process group or a mesh cannot be created, or a peer does not
        finish making them.
    """
    needed = _needed_anywhere(root, plan, {}, timeout)
    built = _with_meshes(root, plan, _gangs(root, plan, {}, timeout, needed), timeout, needed)
    log.debug("rank %d: gangs of %s built", root.rank, plan)
    return built


def wrap(
    root: ProcessGroupGang,
    plan: MeshTopology,
    groups: dict[str, ProcessGroup],
    timeout: timedelta,
) -> Built:
    """Gangs over the groups of meshes a user built; only missing groups are created.

    ``groups`` maps each dimension of ``plan`` that a user's mesh has to its group.
    Those groups are lent to gangmesh: closing the gangs never destroys them.

    The meshes are built over the gangs' groups, as :func:`build` builds them.

    :raises GangError: a flattened group or a mesh cannot be created.
    """
    needed = _needed_anywhere(root, plan, groups, timeout)
    return _with_meshes(root, plan, _gangs(root, plan, groups, timeout, needed), timeout, needed)


def _with_meshes(
    root: ProcessGroupGang, plan: MeshTopology, built: Built, timeout: timedelta, needed: Needed
) -> Built:
    """``built`` with the meshes of ``plan`` over its gangs' groups.

    :raises GangError: a mesh cannot be created (the gangs are closed first).
    """
    try:
        lone = _lone_group(root, timeout, needed)
        built.leases.append(lone)
        built.meshes = meshes_of(root, plan, built.gangs, lone.group)
    except (RuntimeError, ValueError) as ex:
        release(built)
        what = f"creating the meshes of {plan} failed on rank {root.rank}"
        raise gang_error(what, root.global_ranks, root.rank, timeout, ex) from ex
    # gloo's handshake can end on one side of a new group before the other: a process that
    # closed its gangs at once would break a slower peer's setup. Past this barrier, every
    # process has finished making every group.
    try:
        root.barrier()
    except GangError:
        release(built)
        raise
    return built


def _lone_key(root: ProcessGroupGang, timeout: timedelta) -> CommunicatorKey:
    """The key of this process's one-process group."""
    backend = dist.get_backend(root.as_process_group())
    return CommunicatorKey((dist.get_rank(),), backend, timeout, root.high_priority)


def _root_is_lone(root: ProcessGroupGang, timeout: timedelta) -> bool:
    """Whether the root's group stands for the one-process group: a world of one process,
    with the root's timeout."""
    return root.size == 1 and timeout == root.timeout


def _lone_group(root: ProcessGroupGang, timeout: timedelta, needed: Needed) -> Lease:
    """The group that stands for every size-1 dimension in the meshes: the root's where the
    world is one process, else a one-process group of the root's backend.

    Its collectives must be real: FSDP2 on torch 2.9 runs its reduce-scatter even on a shard
    group of one process, and reads the output.
    """
    group, key = root.as_process_group(), _lone_key(root, timeout)
    if _root_is_lone(root, timeout):
        return lend(group, key)
    split_all = _c10d.splits_new_groups(key.backend) and LONE in needed
    alone = [[r] for r in root.global_ranks] if split_all else []
    return split(Parent(group, root.timeout, root.high_priority), alone, key, "size-1")


Needed = frozenset[str]
"""The dimensions (and :data:`LONE`) whose group some process of the root does not hold yet:
only those are split, where torch splits."""

LONE = "size-1"
"""The one-process group of each process, in :data:`Needed`."""


def _pool(
    root: ProcessGroupGang, lent: dict[str, ProcessGroup], timeout: timedelta
) -> dict[tuple[int, ...], ProcessGroup]:
    """The groups a dimension takes as they are, by their members: the lent ones, and the
    root's where it has the timeout asked for."""
    pool = {tuple(sorted(dist.get_process_group_ranks(g))): g for g in lent.values()}
    if timeout == root.timeout:
        pool.setdefault(tuple(root.global_ranks), root.as_process_group())
    return pool


def _needed_anywhere(
    root: ProcessGroupGang, plan: MeshTopology, lent: dict[str, ProcessGroup], timeout: timedelta
) -> Needed:
    """What some process of the root lacks, where torch splits: a split that no process needs
    costs an ncclCommSplit of the whole parent. One all_reduce (MAX) of what this process
    lacks, over the root gang; elsewhere each group is made by its members alone, and all
    count as needed."""
    backend = dist.get_backend(root.as_process_group())
    names = [*BUILT_NAMES, LONE]
    if not _c10d.splits_new_groups(backend):
        return frozenset(names)
    pool, rank = _pool(root, lent, timeout), root.rank
    to_global = np.asarray(root.global_ranks)
    lacks = []
    for name in BUILT_NAMES:
        members = tuple(sorted(to_global[plan.group_of(rank, name)].tolist()))
        wanted = len(members) > 1 and not _unasked(plan, name) and members not in pool
        key = CommunicatorKey(members, backend, timeout, root.high_priority)
        lacks.append(wanted and not holds(key))
    lacks.append(not _root_is_lone(root, timeout) and not holds(_lone_key(root, timeout)))
    flags = torch.tensor(lacks, dtype=torch.int32, device=root.device)
    root.all_reduce(flags, ReduceOperation.MAX)
    return frozenset(name for name, flag in zip(names, flags.tolist(), strict=True) if flag)


def _gangs(
    root: ProcessGroupGang,
    plan: MeshTopology,
    lent: dict[str, ProcessGroup],
    timeout: timedelta,
    needed: Needed,
) -> Built:
    """A gang per name of BUILT_NAMES: over a lent group with its members, over the root's
    group when it spans the world with the same timeout, else over a shared group created
    with ``timeout``, each dimension's groups as one split of the root's group."""
    world = root.as_process_group()
    parent = Parent(world, root.timeout, root.high_priority)
    backend = dist.get_backend(world)
    splitting = _c10d.splits_new_groups(backend)
    rank, to_global = root.rank, np.asarray(root.global_ranks)
    pool = _pool(root, lent, timeout)
    made: set[tuple[int, bytes]] = set()
    """The dimensions split already, each as all its groups: a later one alike splits none."""
    built = Built({})
    try:
        for name in BUILT_NAMES:
            members = to_global[plan.group_of(rank, name)].tolist()
            if len(members) == 1:
                built.gangs[name] = FakeGang(root.device)
                continue
            if _unasked(plan, name):
                built.gangs[name] = _unbuilt(root, plan, name)
                continue
            # Groups number their members ascending; the gang numbers them as the plan does
            # (a flattened expert dimension at ep = 1 may not ascend under another order).
            ranks = tuple(sorted(members))
            group = pool.get(ranks)
            if group is not None:
                actual = _c10d.group_timeout(group, root.device) or timeout
                lease = lend(group, CommunicatorKey(ranks, backend, actual, root.high_priority))
            else:
                key = CommunicatorKey(ranks, backend, timeout, root.high_priority)
                groups = to_global[_all_groups(plan, name)] if splitting else None
                if name not in needed:  # every process holds its group: nobody splits
                    groups = None
                split_as = None if groups is None else (groups.shape[1], groups.tobytes())
                if split_as is None or split_as in made:
                    lease = split(parent, [], key, name)
                else:
                    made.add(split_as)
                    lease = split(parent, groups.tolist(), key, name)  # type: ignore[union-attr]
            built.gangs[name] = ProcessGroupGang._leased(
                lease,
                root.device,
                name=name,
                monitored=root.monitored,
                high_priority=root.high_priority,
                members=members,
            )
    except (RuntimeError, ValueError) as ex:
        release(built)
        what = f"creating the gangs of {plan} failed on rank {rank}"
        raise gang_error(what, root.global_ranks, root.rank, timeout, ex) from ex
    return built


def _all_groups(plan: MeshTopology, name: str) -> np.ndarray:
    """Every group of dimension ``name``, members ascending, ordered by their first member."""
    groups = np.sort(plan.groups(name), axis=1)
    return groups[np.argsort(groups[:, 0])]


def release(built: Built) -> None:
    """Close every gang of ``built`` and give back the meshes' leases."""
    for gang in built.gangs.values():
        gang.close()
    for lease in built.leases:
        lease.release()


def meshes_of(
    root: ProcessGroupGang, plan: MeshTopology, gangs: dict[str, Gang], lone: ProcessGroup
) -> dict[str, DeviceMesh]:
    """The meshes of ``plan`` over the gangs' groups; ``lone`` stands for size-1 dimensions."""

    def group(name: str) -> ProcessGroup:
        gang = gangs[name]
        return gang.as_process_group() if gang.supports_process_group else lone

    return build_meshes(root.device.type, plan, group, root.global_ranks)
