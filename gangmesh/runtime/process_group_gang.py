"""ProcessGroupGang: a gang over a torch.distributed ProcessGroup (gloo on CPU, NCCL on CUDA)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, final

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup
from typing_extensions import override

from gangmesh.plan._checks import check_positive, check_timeout
from gangmesh.plan.dims import ROOT
from gangmesh.runtime import _c10d, default_group, faults
from gangmesh.runtime._exit import release_at_exit
from gangmesh.runtime._validate import normalized_device
from gangmesh.runtime.communicators import (
    CommunicatorKey,
    Lease,
    Parent,
    acquire,
    holds,
    split,
)
from gangmesh.runtime.environment import read_launch_environment
from gangmesh.runtime.gang import DEFAULT_TIMEOUT, ReduceOperation
from gangmesh.runtime.group_gang import GroupGang

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

log = logging.getLogger("gangmesh")


@final
class ProcessGroupGang(GroupGang):
    """A gang backed by a torch.distributed ProcessGroup.

    Wrapping a group does not take it over: :meth:`close` releases only what
    gangmesh created for this gang, never a group it was handed. ``name`` labels
    the gang in messages (a mesh dimension such as "tp"). ``timeout`` is the one
    the group was created with (read back from the backend where it tells).
    ``monitored`` makes :meth:`~Gang.barrier` name the ranks that did not arrive;
    ``high_priority`` gives the groups made from this gang NCCL's high-priority
    streams.

    :param pg: the group to wrap.
    :param device: where the tensors passed to the collectives live.
    :param name: the gang's label in messages.
    :param timeout: the group's timeout, where the backend does not tell it.
    :param monitored: whether barriers name the ranks that did not arrive.
    :param high_priority: whether groups made from this gang use high-priority streams.
    :raises TypeError: ``pg`` is not a ProcessGroup, ``device`` not a torch.device or
        ``timeout`` not a timedelta.
    :raises ValueError: ``timeout`` is not positive, or ``pg`` is not a group of this job (of
        another world, or destroyed).
    """

    def __init__(
        self,
        pg: ProcessGroup,
        device: torch.device,
        *,
        name: str = "gang",
        timeout: timedelta | None = None,
        monitored: bool = False,
        high_priority: bool = False,
    ) -> None:
        super().__init__(pg, device, name, timeout)
        self._high_priority = high_priority
        self._lease: Lease | None = None
        self._owns_default_group = False
        self._monitor_lease: Lease | None = None
        if monitored:
            self._monitor_with_gloo(pg)
        release_at_exit(self)

    @classmethod
    def create_default_process_group(
        cls,
        device: torch.device,
        *,
        timeout: timedelta | None = None,
        high_priority: bool = False,
        monitored: bool = False,
        init_method: str | None = None,
        rank: int = -1,
        world_size: int = -1,
        store: Store | None = None,
        backend: str | None = None,
    ) -> ProcessGroupGang:
        """Initialise torch's default process group and wrap it as the root gang.

        gloo for a CPU device, NCCL for CUDA, unless ``backend`` names another.
        Without ``init_method`` or ``store`` torch reads MASTER_ADDR, MASTER_PORT,
        RANK and WORLD_SIZE. The root gang owns
        the default group: closing it shuts torch.distributed down.

        A CUDA device is bound to the default group (``device_id``), as torch 2.15's
        "nccl" binds one itself: each group gangmesh makes is then a split of its
        parent, which gangmesh asks for as torch requires (docs: "How groups are made").

        :param device: the device of this process: ``cpu``, or ``cuda`` with an index.
        :param timeout: timeout of the group and of every group made from it (default
            :data:`~gangmesh.DEFAULT_TIMEOUT`).
        :param high_priority: whether NCCL uses high-priority streams.
        :param monitored: whether barriers name the ranks that did not arrive.
        :param init_method: where the processes meet, such as ``tcp://host:port`` or
            ``file:///path``.
        :param rank: this process's rank; -1 reads RANK.
        :param world_size: the number of processes; -1 reads WORLD_SIZE.
        :param store: a store to meet through instead of ``init_method``.
        :param backend: the torch.distributed backend, instead of the device's.
        :raises ValueError: another device type, or a timeout that is not positive (TypeError
            too where it is no timedelta).
        :raises RuntimeError: torch.distributed is already initialised.
        :raises GangError: initialisation fails.
        """
        device = normalized_device(device)
        timeout = check_timeout(timeout) or DEFAULT_TIMEOUT
        world = default_group.start(
            device,
            backend=backend,
            timeout=timeout,
            high_priority=high_priority,
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            store=store,
        )
        gang = cls(
            world,
            device,
            name=ROOT,
            timeout=timeout,
            monitored=monitored,
            high_priority=high_priority,
        )
        gang._owns_default_group = True
        faults.open_reports(world, gang.timeout)
        return gang

    @classmethod
    def from_default_process_group(
        cls,
        device: torch.device | None = None,
        *,
        timeout: timedelta | None = None,
        monitored: bool = False,
        high_priority: bool = False,
    ) -> ProcessGroupGang:
        """Wrap torch's default process group, started elsewhere, without owning it.

        :param device: this process's device; default, where the group runs NCCL (alone
            or as a mixed backend's CUDA leg): the device torch bound it to, else the
            current CUDA device; cpu otherwise.
        :param timeout: the group's timeout, where the backend does not tell it.
        :param monitored: whether barriers name the ranks that did not arrive.
        :param high_priority: whether groups made from this gang use high-priority streams.
        :raises RuntimeError: torch.distributed is not initialised.
        """
        world = default_group.running()
        gang = cls(
            world,
            device or default_group.device_of(world),
            name=ROOT,
            timeout=timeout,
            monitored=monitored,
            high_priority=high_priority,
        )
        faults.open_reports(world, gang.timeout)
        return gang

    @classmethod
    def init_default_process_group(
        cls,
        *,
        device: torch.device | None = None,
        timeout: timedelta | None = None,
        num_threads: int | None = None,
        monitored: bool = False,
        ok_initialized: bool = False,
    ) -> ProcessGroupGang:
        """fairseq2's older call: :meth:`create_default_process_group` from torchrun's variables.

        ``device`` defaults to ``cuda:LOCAL_RANK`` where CUDA is available, else cpu;
        ``num_threads``, if given, is torch's intra-op thread count; ``ok_initialized``
        wraps a running default group (:meth:`from_default_process_group`) instead of
        raising. Prefer :func:`~gangmesh.setup_root_gang`.

        :raises RuntimeError: torch.distributed is already initialised (and not
            ``ok_initialized``).
        :raises GangError: initialisation fails.
        """
        if num_threads is not None:
            torch.set_num_threads(check_positive("num_threads", num_threads))
        if ok_initialized and dist.is_initialized():
            return cls.from_default_process_group(device, timeout=timeout, monitored=monitored)
        if device is None:
            env = read_launch_environment()
            place = (env.local_rank, env.local_world_size) if env else (0, 1)
            device = default_group.default_device(*place)
        return cls.create_default_process_group(device, timeout=timeout, monitored=monitored)

    @classmethod
    def _leased(
        cls,
        lease: Lease,
        device: torch.device,
        *,
        name: str,
        monitored: bool,
        high_priority: bool,
        members: list[int] | None = None,
    ) -> ProcessGroupGang:
        """A gang over a shared group; closing it gives the lease back.

        ``members`` (global ranks, in gang rank order) numbers the gang otherwise
        than the group, whose ranks ascend.
        """
        gang = cls(
            lease.group,
            device,
            name=name,
            timeout=lease.key.timeout,
            monitored=monitored,
            high_priority=high_priority,
        )
        gang._lease = lease
        if members is not None and members != gang._global_ranks:
            gang._renumber(members)
        return gang

    @property
    def name(self) -> str:
        """Label of the gang in messages, such as a mesh dimension name."""
        return self._name

    @property
    def timeout(self) -> timedelta:
        """Timeout of this gang's collectives."""
        return self._timeout

    @property
    def monitored(self) -> bool:
        """Whether :meth:`~Gang.barrier` names the ranks that did not arrive."""
        return self._monitor_group is not None

    @property
    def high_priority(self) -> bool:
        """Whether groups made from this gang use high-priority streams (NCCL)."""
        return self._high_priority

    @property
    def global_ranks(self) -> list[int]:
        """Global rank of each member, indexed by gang rank."""
        return list(self._global_ranks)

    @override
    def as_process_group(self) -> ProcessGroup:
        """The ProcessGroup. Its ranks ascend with the global ranks, so a sub-gang made with
        ranks out of order (``create_gang([2, 0])``) numbers its members otherwise.

        :raises GangError: the gang is closed.
        """
        if self._pg is None:
            self._closed("as_process_group")
        return self._pg

    @override
    def __repr__(self) -> str:
        members = self._global_ranks
        shown = members if len(members) <= 8 else [*members[:7], "...", members[-1]]
        return (
            f"ProcessGroupGang(name={self._name!r}, rank={self._rank}, size={self._size}, "
            f"global_ranks=[{', '.join(map(str, shown))}], backend={self._backend})"
        )

    @override
    def close(self) -> None:
        """Release this gang's hold on its group; later calls do nothing.

        A group shared with other gangs lives until the last of them closes;
        a group gangmesh was handed is never destroyed. The root gang that
        started torch.distributed shuts it down (after a failure, where this
        process serves the job's store, once the others have read the failure
        reports, or the timeout and a few seconds passed). Communicates with no peer.
        """
        pg, lease, monitor = self._pg, self._lease, self._monitor_lease
        self._release()
        if monitor is not None:
            monitor.release()
        if lease is not None:
            lease.release()
        elif pg is not None and self._owns_default_group and dist.is_initialized():
            faults.close_reports()
            try:
                dist.destroy_process_group()
            except (RuntimeError, ValueError) as ex:
                log.debug("shutting torch.distributed down failed: %s", ex)

    def _release(self) -> None:
        """Drop the references to torch's groups; the gang is closed from now on."""
        self._pg = None
        self._traced = None
        self._lease = None
        self._monitor_group = None
        self._monitor_lease = None

    def _key(self, global_ranks: list[int], backend: str) -> CommunicatorKey:
        """The key of a group of ``global_ranks``: groups number their members ascending."""
        return CommunicatorKey(
            tuple(sorted(global_ranks)), backend, self._timeout, self._high_priority
        )

    def _anyone_lacks(self, mine: CommunicatorKey | None) -> bool:
        """Whether some process of this gang lacks the group it asks for (``mine``; None:
        it asks for none), where torch splits: one all_reduce (MAX) over the gang. A split
        that makes no process a group costs the whole gang an ncclCommSplit for nothing."""
        if not _c10d.splits_new_groups(self._backend):
            return True
        lacks = torch.tensor([int(mine is not None and not holds(mine))], device=self._device)
        self.all_reduce(lacks, ReduceOperation.MAX)
        return bool(lacks.item())

    def _monitor_with_gloo(self, pg: ProcessGroup) -> None:
        """Run monitored barriers on this gang's own group if it is gloo, else on a gloo twin."""
        if self._backend == "gloo":
            self._monitor_group = pg
        else:
            self._monitor_lease = acquire(self._key(self._global_ranks, "gloo"), self._name)
            self._monitor_group = self._monitor_lease.group

    @override
    def _create_gang(self, ranks: list[int]) -> ProcessGroupGang | None:
        pg = self.as_process_group()
        members = [self._global_ranks[r] for r in ranks]
        mine = self._key(members, self._backend) if self._rank in ranks else None
        try:
            parent = Parent(pg, self._timeout, self._high_priority)
            needed = self._anyone_lacks(mine)
            lease = split(parent, [sorted(members)], mine, f"{self._name}[sub]", needed)
        except (RuntimeError, ValueError) as ex:
            what = f"create_gang({ranks}) failed on {self.describe()}"
            raise faults.gang_error(what, self._global_ranks, self._rank, self._timeout, ex) from ex
        if lease is None:
            return None
        return ProcessGroupGang._leased(
            lease,
            self._device,
            name=f"{self._name}[{','.join(map(str, ranks))}]",
            monitored=self._monitor_group is not None,
            high_priority=self._high_priority,
            members=members,
        )
