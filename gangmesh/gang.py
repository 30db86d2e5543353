"""The Gang interface: a set of processes that run collectives together."""

from __future__ import annotations

import atexit
import gc
import logging
import weakref
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import timedelta
from enum import Enum
from typing import Any, NoReturn, final

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed import ProcessGroup, ReduceOp

from gangmesh._validate import (
    check_gather_output,
    check_gather_outputs,
    check_index,
    check_positive,
    check_ranks,
    check_tensor,
)

log = logging.getLogger("gangmesh")

DEFAULT_TIMEOUT = timedelta(minutes=15)
"""Timeout of every process group gangmesh creates when the caller gives none."""


class ReduceOperation(Enum):
    """How all_reduce combines the tensors of a gang."""

    SUM = 1
    MEAN = 2
    PRODUCT = 3
    MIN = 4
    MAX = 5


class GangError(RuntimeError):
    """A collective failed: a timeout, a dead peer or a backend error."""


class Gang(ABC):
    """A set of processes that run collective operations together.

    Arguments are validated here, before any communication; subclasses implement
    the underscore methods and may assume valid input.
    """

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's rank inside the gang, in ``[0, size)``."""

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of processes in the gang."""

    @property
    @abstractmethod
    def device(self) -> torch.device:
        """Device that tensors passed to the collectives must live on."""

    @property
    @abstractmethod
    def supports_process_group(self) -> bool:
        """Whether :meth:`as_process_group` returns a torch ProcessGroup."""

    @abstractmethod
    def close(self) -> None:
        """Release the gang's resources; safe to call more than once."""

    @abstractmethod
    def as_process_group(self) -> ProcessGroup:
        """The torch ProcessGroup behind this gang, for torch.distributed APIs."""

    def create_gang(self, ranks: Sequence[int]) -> Gang | None:
        """Create a sub-gang of the given gang-local ranks.

        Every process of *this* gang calls it with the same ``ranks``, in the same
        order as its other ``create_gang`` calls. A process's rank in the sub-gang
        is its position in ``ranks``. Returns ``None`` on processes not in ``ranks``.

        Raises ValueError if ``ranks`` is empty, has duplicates or a rank outside
        ``[0, size)``; GangError if the process group cannot be created.
        """
        checked = check_ranks(ranks, self.size)
        return self._create_gang(checked)

    def make_gang(self, ranks: Sequence[int]) -> Gang | None:
        """Same as :meth:`create_gang` (the name older code uses)."""
        return self.create_gang(ranks)

    def barrier(self) -> None:
        """Block until every process of the gang has reached this call.

        Raises GangError on failure or timeout.
        """
        self._barrier()

    def all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None:
        """Reduce ``tensor`` in place over the gang with ``op``.

        Raises TypeError for a non-tensor or an unknown ``op`` (or MEAN on an
        integer tensor), ValueError for a tensor on another device, GangError on
        failure.
        """
        check_tensor("tensor", tensor, self.device)
        if not isinstance(op, ReduceOperation):
            raise TypeError(f"op: expected a ReduceOperation, got {op!r}")
        if op is ReduceOperation.MEAN and not (tensor.is_floating_point() or tensor.is_complex()):
            raise TypeError(
                f"tensor: ReduceOperation.MEAN needs a floating-point or complex tensor, "
                f"got dtype {tensor.dtype}"
            )
        self._all_reduce(tensor, op)

    def all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None:
        """Gather ``input_tensor`` of every process into ``output_tensor``, in rank order.

        ``output_tensor`` is contiguous with shape ``[size, *input_tensor.shape]``,
        ``[size * input_tensor.shape[0], *input_tensor.shape[1:]]`` or
        ``[size * input_tensor.numel()]``. Raises TypeError/ValueError for
        mismatched types, dtypes, devices or shapes; GangError on failure.
        """
        check_tensor("input_tensor", input_tensor, self.device)
        check_tensor("output_tensor", output_tensor, self.device)
        check_gather_output(output_tensor, input_tensor, self.size)
        self._all_gather(output_tensor, input_tensor)

    def all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None:
        """Gather ``input_tensor`` of every process into ``output_tensors[rank]``.

        Raises TypeError/ValueError if ``output_tensors`` does not hold ``size``
        tensors shaped like ``input_tensor``; GangError on failure.
        """
        check_tensor("input_tensor", input_tensor, self.device)
        check_gather_outputs(output_tensors, input_tensor, self.size, self.device)
        self._all_gather_to_list(output_tensors, input_tensor)

    def broadcast(self, tensor: Tensor, source_rank: int = 0) -> None:
        """Copy ``tensor`` of gang rank ``source_rank`` into ``tensor`` of every process.

        ``source_rank`` is a rank inside this gang. Raises ValueError if it is
        outside ``[0, size)``; GangError on failure.
        """
        check_tensor("tensor", tensor, self.device)
        check_index("source_rank", source_rank, self.size)
        self._broadcast(tensor, source_rank)

    def broadcast_objects(self, objects: list[Any], source_rank: int = 0) -> None:
        """Replace the items of ``objects`` with those of gang rank ``source_rank``.

        Every process passes a list of the same length; the objects must be
        picklable. Raises TypeError if ``objects`` is not a list, ValueError for
        a ``source_rank`` outside ``[0, size)``; GangError on failure.
        """
        if not isinstance(objects, list):
            raise TypeError(f"objects: expected a list, got {type(objects).__name__}")
        check_index("source_rank", source_rank, self.size)
        self._broadcast_objects(objects, source_rank)

    def describe(self) -> str:
        """A short description for messages: kind, size and rank."""
        return f"{type(self).__name__}(size={self.size}, rank={self.rank})"

    @abstractmethod
    def _create_gang(self, ranks: list[int]) -> Gang | None: ...

    @abstractmethod
    def _barrier(self) -> None: ...

    @abstractmethod
    def _all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None: ...

    @abstractmethod
    def _all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None: ...

    @abstractmethod
    def _all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None: ...

    @abstractmethod
    def _broadcast(self, tensor: Tensor, source_rank: int) -> None: ...

    @abstractmethod
    def _broadcast_objects(self, objects: list[Any], source_rank: int) -> None: ...


@final
class FakeGang(Gang):
    """A single process standing in for a gang of ``size`` identical processes.

    Every collective gives the result the real gang would give if all its
    processes held this process's tensor: SUM multiplies by ``size``, PRODUCT
    raises to the power ``size``, MEAN/MIN/MAX leave the tensor as it is.

    >>> import torch
    >>> gang = FakeGang(torch.device("cpu"), rank=1, size=4)
    >>> t = torch.tensor([3.0])
    >>> gang.all_reduce(t, ReduceOperation.SUM)
    >>> t
    tensor([12.])
    """

    def __init__(self, device: torch.device, *, rank: int = 0, size: int = 1) -> None:
        if not isinstance(device, torch.device):
            raise TypeError(f"device: expected a torch.device, got {device!r}")
        if device.type == "meta":
            raise ValueError("device: expected a real device, got the meta device")
        check_positive("size", size)
        check_index("rank", rank, size)
        self._device = device
        self._rank = rank
        self._size = size

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
        return False

    def close(self) -> None:
        """Nothing to release."""

    def as_process_group(self) -> NoReturn:
        raise NotImplementedError(
            "FakeGang has no process group; check gang.supports_process_group first"
        )

    def _create_gang(self, ranks: list[int]) -> FakeGang | None:
        if self._rank not in ranks:
            return None
        return FakeGang(self._device, rank=ranks.index(self._rank), size=len(ranks))

    def _barrier(self) -> None:
        pass

    def _all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None:
        if op is ReduceOperation.SUM:
            tensor.mul_(self._size)
        elif op is ReduceOperation.PRODUCT:
            tensor.pow_(self._size)

    def _all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None:
        output_tensor.view(self._size, -1).copy_(input_tensor.reshape(1, -1))

    def _all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None:
        for output in output_tensors:
            output.copy_(input_tensor)

    def _broadcast(self, tensor: Tensor, source_rank: int) -> None:
        pass

    def _broadcast_objects(self, objects: list[Any], source_rank: int) -> None:
        pass


_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

_TORCH_OPS = {
    ReduceOperation.SUM: ReduceOp.SUM,
    ReduceOperation.MEAN: ReduceOp.AVG,
    ReduceOperation.PRODUCT: ReduceOp.PRODUCT,
    ReduceOperation.MIN: ReduceOp.MIN,
    ReduceOperation.MAX: ReduceOp.MAX,
}


@final
class ProcessGroupGang(Gang):
    """A gang backed by a torch.distributed ProcessGroup (gloo on CPU, NCCL on CUDA).

    ``name`` labels the gang in error messages (a mesh dimension such as "tp").
    ``owns_group`` says whether :meth:`close` destroys the process group.
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
        owns_group: bool = False,
    ) -> None:
        if not isinstance(pg, ProcessGroup):
            raise TypeError(f"pg: expected a torch ProcessGroup, got {pg!r}")
        if not isinstance(device, torch.device):
            raise TypeError(f"device: expected a torch.device, got {device!r}")
        self._pg: ProcessGroup | None = pg
        self._device = device
        self._name = name
        self._rank = dist.get_rank(pg)
        self._size = dist.get_world_size(pg)
        self._global_ranks = dist.get_process_group_ranks(pg)
        self._timeout = timeout or group_timeout(pg, device) or DEFAULT_TIMEOUT
        self._high_priority = high_priority
        self._owns_group = owns_group
        self._monitor_pg = _monitor_group(pg, self._global_ranks, self._timeout, monitored)
        _live_gangs.add(self)
        _install_exit_teardown()

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
    ) -> ProcessGroupGang:
        """Initialise torch's default process group and wrap it as the root gang.

        gloo for a CPU device, NCCL (eagerly, bound to ``device``) for CUDA. Without
        ``init_method`` torch reads MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE.
        Raises ValueError for another device type, RuntimeError if torch.distributed
        is already initialised, GangError if initialisation fails.
        """
        if dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is already initialised; use setup_root_gang() to wrap it"
            )
        backend = backend_for(device)
        timeout = timeout or DEFAULT_TIMEOUT
        kwargs: dict[str, Any] = {}
        if device.type == "cuda":
            if device.index is None:
                device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(device)
            kwargs["device_id"] = device
        try:
            dist.init_process_group(
                backend,
                init_method=init_method,
                timeout=timeout,
                rank=rank,
                world_size=world_size,
                pg_options=backend_options(backend, timeout, high_priority),
                **kwargs,
            )
        except (RuntimeError, ValueError) as ex:
            raise GangError(f"the default process group ({backend}) failed to start: {ex}") from ex
        world = dist.group.WORLD
        assert isinstance(world, ProcessGroup)
        log.info("Root gang up: %s, rank %d of %d", backend, dist.get_rank(), dist.get_world_size())
        return cls(
            world,
            device,
            name="root",
            timeout=timeout,
            monitored=monitored,
            high_priority=high_priority,
            owns_group=True,
        )

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
    def high_priority(self) -> bool:
        """Whether groups made from this gang use high-priority streams (NCCL)."""
        return self._high_priority

    @property
    def global_ranks(self) -> list[int]:
        """Global rank of each member, indexed by gang rank."""
        return list(self._global_ranks)

    def as_process_group(self) -> ProcessGroup:
        """The ProcessGroup; GangError once the gang is closed."""
        if self._pg is None:
            raise GangError(f"{self.describe()} is closed")
        return self._pg

    def describe(self) -> str:
        return (
            f"gang '{self._name}' (size {self._size}, rank {self._rank}, "
            f"global rank {self._global_ranks[self._rank]})"
        )

    def close(self) -> None:
        """Destroy the process group if this gang created it; later calls do nothing.

        Communicates with no peer, so it returns even when peers are gone.
        """
        pg, monitor = self._pg, self._monitor_pg
        self._release()
        if pg is None or not self._owns_group or not dist.is_initialized():
            return
        if monitor is not None and monitor is not pg:
            _destroy(monitor)
        if pg is dist.group.WORLD:
            dist.destroy_process_group()
        else:
            _destroy(pg)

    def _release(self) -> None:
        """Drop the references to torch's groups; the gang is closed from now on."""
        self._pg = None
        self._monitor_pg = None

    def _create_gang(self, ranks: list[int]) -> ProcessGroupGang | None:
        parent = self.as_process_group()
        member_ranks = [self._global_ranks[r] for r in ranks]
        backend = dist.get_backend(parent)
        options = backend_options(backend, self._timeout, self._high_priority)
        try:
            if parent is dist.group.WORLD:
                pg = dist.new_group(
                    member_ranks, timeout=self._timeout, pg_options=options, sort_ranks=False
                )
            else:
                self._align_group_names(self._rank in ranks)
                pg = dist.new_group(
                    member_ranks,
                    timeout=self._timeout,
                    pg_options=options,
                    use_local_synchronization=True,
                    sort_ranks=False,
                )
        except (RuntimeError, ValueError) as ex:
            raise GangError(f"create_gang({ranks}) failed on {self.describe()}: {ex}") from ex
        if self._rank not in ranks:
            return None
        assert isinstance(pg, ProcessGroup)
        return ProcessGroupGang(
            pg,
            self._device,
            name=f"{self._name}[{','.join(map(str, ranks))}]",
            timeout=self._timeout,
            monitored=self._monitor_pg is not None,
            high_priority=self._high_priority,
            owns_group=True,
        )

    def _align_group_names(self, joins: bool) -> None:
        """Let the members of a group made by part of the world agree on its name.

        torch names such a group by hashing its ranks with the number of groups
        the calling process already belongs to; members with different counts
        would pick different store prefixes and never meet. Members below the
        gang's highest count catch up with single-process groups first.
        """
        count = torch.tensor([_registered_group_count()], device=self._device)
        self._all_reduce(count, ReduceOperation.MAX)
        if not joins:
            return
        me = self._global_ranks[self._rank]
        for _ in range(int(count.item()) - _registered_group_count()):
            dist.new_group([me], timeout=self._timeout, use_local_synchronization=True)

    def _barrier(self) -> None:
        try:
            if self._monitor_pg is not None:
                dist.monitored_barrier(
                    group=self._monitor_pg, timeout=self._timeout, wait_all_ranks=True
                )
            elif self._device.type == "cuda":
                dist.barrier(group=self.as_process_group(), device_ids=[self._device_index()])
            else:
                dist.barrier(group=self.as_process_group())
        except RuntimeError as ex:
            self._fail("barrier", ex)

    def _all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None:
        try:
            dist.all_reduce(tensor, _TORCH_OPS[op], group=self.as_process_group())
        except RuntimeError as ex:
            self._fail(f"all_reduce({op.name})", ex)

    def _all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None:
        # Every accepted output shape has the memory layout of the flat form,
        # the only one all backends take.
        try:
            _all_gather_single(
                output_tensor.view(-1),
                input_tensor.contiguous().view(-1),
                group=self.as_process_group(),
            )
        except RuntimeError as ex:
            self._fail("all_gather", ex)

    def _all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None:
        try:
            dist.all_gather(output_tensors, input_tensor, group=self.as_process_group())
        except RuntimeError as ex:
            self._fail("all_gather_to_list", ex)

    def _broadcast(self, tensor: Tensor, source_rank: int) -> None:
        try:
            dist.broadcast(tensor, group=self.as_process_group(), group_src=source_rank)
        except RuntimeError as ex:
            self._fail(f"broadcast(source_rank={source_rank})", ex)

    def _broadcast_objects(self, objects: list[Any], source_rank: int) -> None:
        try:
            dist.broadcast_object_list(
                objects, group=self.as_process_group(), group_src=source_rank, device=self._device
            )
        except RuntimeError as ex:
            self._fail(f"broadcast_objects(source_rank={source_rank})", ex)

    def _device_index(self) -> int:
        return self._device.index if self._device.index is not None else 0

    def _fail(self, op: str, cause: Exception) -> NoReturn:
        raise GangError(f"{op} failed on {self.describe()}: {cause}") from cause


def backend_for(device: torch.device) -> str:
    """The torch.distributed backend for a device: gloo for cpu, nccl for cuda."""
    if device.type == "cpu":
        return "gloo"
    if device.type == "cuda":
        return "nccl"
    raise ValueError(f"device: expected a cpu or cuda device, got {device}")


def backend_options(backend: str, timeout: timedelta, high_priority: bool = False) -> Any | None:
    """Backend options carrying ``timeout`` (and NCCL's high-priority streams)."""
    options: Any
    if backend == "gloo":
        options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    elif backend == "nccl" and hasattr(dist, "ProcessGroupNCCL"):
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = high_priority
    else:
        return None
    options._timeout = timeout
    return options


def group_timeout(pg: ProcessGroup, device: torch.device) -> timedelta | None:
    """The timeout a process group was created with, when its backend tells."""
    try:
        timeout = pg._get_backend(device).options._timeout
    except (AttributeError, RuntimeError):
        return None
    return timeout if isinstance(timeout, timedelta) else None


def _monitor_group(
    pg: ProcessGroup, global_ranks: list[int], timeout: timedelta, monitored: bool
) -> ProcessGroup | None:
    """The gloo group monitored barriers run on: ``pg`` itself or a gloo twin."""
    if not monitored:
        return None
    if dist.get_backend(pg) == "gloo":
        return pg
    twin = dist.new_group(
        global_ranks,
        timeout=timeout,
        backend="gloo",
        use_local_synchronization=pg is not dist.group.WORLD,
        sort_ranks=False,
    )
    assert isinstance(twin, ProcessGroup)
    return twin


_live_gangs: weakref.WeakSet[ProcessGroupGang] = weakref.WeakSet()
_exit_teardown_installed = False


def _install_exit_teardown() -> None:
    """Shut every process group down at interpreter exit, once per process.

    A gloo worker thread may still hold the last reference to a finished
    collective's tensors when the main thread returns. Freeing them needs the
    GIL; during interpreter finalisation taking the GIL ends the thread, the
    forced unwind meets a noexcept frame and the process aborts (SIGABRT,
    "terminate called without an active exception"). Shutting the groups down
    from an atexit hook is not enough while Python objects still reference
    the groups: the backends, and their threads, live on. So the hook also
    releases every gang's references, which destroys the backends and joins
    their threads while the interpreter still runs.
    """
    global _exit_teardown_installed
    if not _exit_teardown_installed:
        atexit.register(_teardown_at_exit)
        _exit_teardown_installed = True


def _teardown_at_exit() -> None:
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except (RuntimeError, ValueError) as ex:
            log.debug("shutting process groups down at exit failed: %s", ex)
    for gang in list(_live_gangs):
        gang._release()
    gc.collect()


def _registered_group_count() -> int:
    return len(dist.distributed_c10d._world.pg_names)


def _destroy(pg: ProcessGroup) -> None:
    try:
        dist.destroy_process_group(pg)
    except (RuntimeError, ValueError) as ex:
        log.debug("destroying a process group failed: %s", ex)
