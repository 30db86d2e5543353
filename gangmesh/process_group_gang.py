"""ProcessGroupGang: a gang over a torch.distributed ProcessGroup (gloo on CPU, NCCL on CUDA)."""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn, final

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed import ProcessGroup

from gangmesh import _backend, _c10d
from gangmesh._checks import InvalidTypeError
from gangmesh._exit import release_at_exit
from gangmesh._validate import normalized_device
from gangmesh.communicators import CommunicatorKey, Lease, acquire
from gangmesh.gang import DEFAULT_TIMEOUT, Gang, GangError, ReduceOperation

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

log = logging.getLogger("gangmesh")

_broadcast_object_list = _c10d.undecorated(dist.broadcast_object_list)
_barrier = _c10d.undecorated(dist.barrier)


@final
class ProcessGroupGang(Gang):
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
    :raises TypeError: ``pg`` is not a ProcessGroup or ``device`` not a torch.device.
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
        if not isinstance(pg, ProcessGroup):
            raise InvalidTypeError(f"pg: expected a torch ProcessGroup, got {pg!r}")
        self._device = normalized_device(device)
        self._pg: ProcessGroup | None = pg
        self._name = name
        self._rank = dist.get_rank(pg)
        self._size = dist.get_world_size(pg)
        self._global_ranks = dist.get_process_group_ranks(pg)
        self._to_group: list[int] | None = None
        self._from_group: list[int] | None = None
        self._backend = dist.get_backend(pg)
        self._timeout = _c10d.group_timeout(pg, self._device) or timeout or DEFAULT_TIMEOUT
        self._high_priority = high_priority
        self._lease: Lease | None = None
        self._owns_default_group = False
        self._monitor_group: ProcessGroup | None = None
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

        NCCL communicators are created when first used, not split from the default
        one: gangmesh creates each group among its members only, and a split would
        need every process of the job.

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
        :raises ValueError: another device type.
        :raises RuntimeError: torch.distributed is already initialised.
        :raises GangError: initialisation fails.
        """
        if dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is already initialised; use setup_root_gang() to wrap it"
            )
        device = normalized_device(device)
        backend = backend or backend_for(device)
        timeout = timeout or DEFAULT_TIMEOUT
        if device.type == "cuda":
            torch.cuda.set_device(device)
        try:
            dist.init_process_group(
                backend,
                init_method=None if store is not None else init_method,
                store=store,
                timeout=timeout,
                rank=rank,
                world_size=world_size,
                pg_options=_c10d.backend_options(backend, timeout, high_priority),
            )
        except (RuntimeError, ValueError) as ex:
            raise GangError(f"the default process group ({backend}) failed to start: {ex}") from ex
        world = dist.group.WORLD
        assert isinstance(world, ProcessGroup)
        log.info("Root gang up: %s, rank %d of %d", backend, dist.get_rank(), dist.get_world_size())
        gang = cls(
            world,
            device,
            name="root",
            timeout=timeout,
            monitored=monitored,
            high_priority=high_priority,
        )
        gang._owns_default_group = True
        return gang

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

    def _renumber(self, members: list[int]) -> None:
        """Number the gang by ``members``: collectives map gang ranks to group ranks."""
        position = {member: index for index, member in enumerate(self._global_ranks)}
        self._to_group = [position[member] for member in members]
        self._from_group = [0] * len(members)
        for gang_rank, group_rank in enumerate(self._to_group):
            self._from_group[group_rank] = gang_rank
        self._rank = self._from_group[self._rank]
        self._global_ranks = list(members)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def supports_process_group(self) -> bool:
        return True

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

    def as_process_group(self) -> ProcessGroup:
        """The ProcessGroup. Its ranks ascend with the global ranks, so a sub-gang made with
        ranks out of order (``create_gang([2, 0])``) numbers its members otherwise.

        :raises GangError: the gang is closed.
        """
        if self._pg is None:
            self._closed("as_process_group")
        return self._pg

    def describe(self) -> str:
        return (
            f"gang '{self._name}' (size {self._size}, rank {self._rank}, "
            f"global rank {self._global_ranks[self._rank]})"
        )

    def __repr__(self) -> str:
        members = self._global_ranks
        shown = members if len(members) <= 8 else [*members[:7], "...", members[-1]]
        return (
            f"ProcessGroupGang(name={self._name!r}, rank={self._rank}, size={self._size}, "
            f"global_ranks=[{', '.join(map(str, shown))}], backend={self._backend})"
        )

    def close(self) -> None:
        """Release this gang's hold on its group; later calls do nothing.

        A group shared with other gangs lives until the last of them closes;
        a group gangmesh was handed is never destroyed. The root gang that
        started torch.distributed shuts it down. Communicates with no peer.
        """
        pg, lease, monitor = self._pg, self._lease, self._monitor_lease
        self._release()
        if monitor is not None:
            monitor.release()
        if lease is not None:
            lease.release()
        elif pg is not None and self._owns_default_group and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except (RuntimeError, ValueError) as ex:
                log.debug("shutting torch.distributed down failed: %s", ex)

    def _release(self) -> None:
        """Drop the references to torch's groups; the gang is closed from now on."""
        self._pg = None
        self._lease = None
        self._monitor_group = None
        self._monitor_lease = None

    def _key(self, global_ranks: list[int], backend: str) -> CommunicatorKey:
        """The key of a group of ``global_ranks``: groups number their members ascending."""
        return CommunicatorKey(
            tuple(sorted(global_ranks)), backend, self._timeout, self._high_priority
        )

    def _monitor_with_gloo(self, pg: ProcessGroup) -> None:
        """Run monitored barriers on this gang's own group if it is gloo, else on a gloo twin."""
        if self._backend == "gloo":
            self._monitor_group = pg
        else:
            self._monitor_lease = acquire(self._key(self._global_ranks, "gloo"), self._name)
            self._monitor_group = self._monitor_lease.group

    def _create_gang(self, ranks: list[int]) -> ProcessGroupGang | None:
        self.as_process_group()
        if self._rank not in ranks:
            return None
        members = [self._global_ranks[r] for r in ranks]
        try:
            lease = acquire(self._key(members, self._backend), f"{self._name}[sub]")
        except (RuntimeError, ValueError) as ex:
            raise GangError(f"create_gang({ranks}) failed on {self.describe()}: {ex}") from ex
        return ProcessGroupGang._leased(
            lease,
            self._device,
            name=f"{self._name}[{','.join(map(str, ranks))}]",
            monitored=self._monitor_group is not None,
            high_priority=self._high_priority,
            members=members,
        )

    def _barrier(self) -> None:
        pg = self._pg
        if pg is None:
            self._closed("barrier")
        if self._monitor_group is not None:
            try:
                dist.monitored_barrier(
                    group=self._monitor_group, timeout=self._timeout, wait_all_ranks=True
                )
            except RuntimeError as ex:
                self._fail("barrier", ex, self._absentees(str(ex)))
            return
        try:
            if self._device.type == "cuda":
                _barrier(group=pg, device_ids=[self._device.index])
            else:
                _barrier(group=pg)
        except RuntimeError as ex:
            self._fail("barrier", ex)

    def _all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None:
        pg = self._pg
        if pg is None:
            self._closed("all_reduce")
        try:
            _backend.all_reduce(pg, tensor, op)
        except RuntimeError as ex:
            self._fail(f"all_reduce({op.name})", ex)

    def _all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None:
        pg = self._pg
        if pg is None:
            self._closed("all_gather")
        if input_tensor.dim() == 0:
            input_tensor = input_tensor.view(1)
        if output_tensor.dim() != input_tensor.dim():  # stacked or flat: concatenate instead
            output_tensor = output_tensor.view(-1, *input_tensor.shape[1:])
        try:
            if self._from_group is None:
                _backend.all_gather_single(pg, output_tensor, input_tensor.contiguous())
            else:
                chunks = output_tensor.chunk(self._size)
                outputs = [chunks[r] for r in self._from_group]
                _backend.all_gather(pg, outputs, input_tensor.contiguous())
        except RuntimeError as ex:
            self._fail("all_gather", ex)

    def _all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None:
        pg = self._pg
        if pg is None:
            self._closed("all_gather_to_list")
        if self._from_group is not None:
            output_tensors = [output_tensors[r] for r in self._from_group]
        try:
            _backend.all_gather(pg, output_tensors, input_tensor)
        except RuntimeError as ex:
            self._fail("all_gather_to_list", ex)

    def _reduce_scatter(
        self, output_tensor: Tensor, input_tensor: Tensor, op: ReduceOperation
    ) -> None:
        pg = self._pg
        if pg is None:
            self._closed("reduce_scatter")
        if output_tensor.dim() == 0:
            output_tensor = output_tensor.view(1)
        if input_tensor.dim() != output_tensor.dim():  # stacked: concatenate instead
            input_tensor = input_tensor.view(-1, *output_tensor.shape[1:])
        if self._from_group is not None:
            chunks = input_tensor.chunk(self._size)
            input_tensor = torch.cat([chunks[r] for r in self._from_group])
        try:
            _backend.reduce_scatter_single(pg, output_tensor, input_tensor.contiguous(), op)
        except RuntimeError as ex:
            self._fail(f"reduce_scatter({op.name})", ex)

    def _all_to_all(
        self,
        output_tensor: Tensor,
        input_tensor: Tensor,
        output_split_sizes: list[int] | None,
        input_split_sizes: list[int] | None,
    ) -> None:
        pg = self._pg
        if pg is None:
            self._closed("all_to_all")
        if self._from_group is not None:
            self._all_to_all_renumbered(
                pg, output_tensor, input_tensor, output_split_sizes, input_split_sizes
            )
            return
        try:
            _backend.all_to_all_single(
                pg, output_tensor, input_tensor.contiguous(), output_split_sizes, input_split_sizes
            )
        except RuntimeError as ex:
            self._fail("all_to_all", ex)

    def _all_to_all_renumbered(
        self,
        pg: ProcessGroup,
        output_tensor: Tensor,
        input_tensor: Tensor,
        output_split_sizes: list[int] | None,
        input_split_sizes: list[int] | None,
    ) -> None:
        """all_to_all in gang rank order over a group numbered otherwise."""
        order = self._from_group
        assert order is not None
        sends = _split(input_tensor, input_split_sizes, self._size)
        receives = _split(output_tensor, output_split_sizes, self._size)
        received = torch.empty_like(output_tensor)
        by_group = [receives[r].shape[0] for r in order]
        try:
            _backend.all_to_all_single(
                pg,
                received,
                torch.cat([sends[r] for r in order]),
                by_group,
                [sends[r].shape[0] for r in order],
            )
        except RuntimeError as ex:
            self._fail("all_to_all", ex)
        for piece, r in zip(torch.split(received, by_group), order, strict=True):
            receives[r].copy_(piece)

    def _group_rank(self, rank: int) -> int:
        """The rank in the group of gang rank ``rank``."""
        return rank if self._to_group is None else self._to_group[rank]

    def _broadcast(self, tensor: Tensor, source_rank: int) -> None:
        pg = self._pg
        if pg is None:
            self._closed("broadcast")
        try:
            to_group = self._to_group
            _backend.broadcast(
                pg, tensor, source_rank if to_group is None else to_group[source_rank]
            )
        except RuntimeError as ex:
            self._fail(f"broadcast(source_rank={source_rank})", ex)

    def _broadcast_objects(self, objects: list[Any], source_rank: int) -> None:
        pg = self._pg
        if pg is None:
            self._closed("broadcast_objects")
        try:
            _broadcast_object_list(
                objects, group=pg, group_src=self._group_rank(source_rank), device=self._device
            )
        except RuntimeError as ex:
            self._fail(f"broadcast_objects(source_rank={source_rank})", ex)

    def _absentees(self, error: str) -> str:
        """Who a failed monitored barrier waited for, in gang and global ranks."""
        seconds = self._timeout.total_seconds()
        found = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", error)
        if found:
            ranks = [int(r) for r in found.group(1).split(",")]
            if self._from_group is not None:
                ranks = [self._from_group[r] for r in ranks]
            members = [self._global_ranks[r] for r in ranks]
            return f"gang ranks {ranks} (global ranks {members}) did not arrive in {seconds:g} s"
        return (
            f"gang rank 0 (global rank {self._global_ranks[0]}) did not confirm it in "
            f"{seconds:g} s: it is gone or stuck, or a rank did not arrive and rank 0 names it"
        )

    def _closed(self, op: str) -> NoReturn:
        raise GangError(f"{op}: {self.describe()} is closed")

    def _fail(self, op: str, cause: Exception, reason: str | None = None) -> NoReturn:
        raise GangError(f"{op} failed on {self.describe()}: {reason or cause}") from cause


def _split(tensor: Tensor, sizes: list[int] | None, parts: int) -> list[Tensor]:
    """``tensor`` cut along dim 0 into ``sizes`` rows each, or into ``parts`` equal parts."""
    return list(torch.split(tensor, sizes) if sizes else tensor.chunk(parts))


def backend_for(device: torch.device) -> str:
    """The torch.distributed backend for a device: gloo for cpu, nccl for cuda.

    :raises ValueError: any other device type.
    """
    if device.type == "cpu":
        return "gloo"
    if device.type == "cuda":
        return "nccl"
    raise ValueError(f"device: expected a cpu or cuda device, got {device}")
