"""BridgeGang: a gang of processes of two jobs, over a backend made on a store of their own.

Its group belongs to no job's world: torch's default group, the groups gangmesh made and
their failure reports are not touched by it. A failed collective is named by whoever made
the gang (``blame``), who knows both jobs.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn, final

import torch
import torch.distributed as dist
from torch import Tensor
from typing_extensions import override

from gangmesh.runtime import _c10d
from gangmesh.runtime._backend import TORCH_OPS
from gangmesh.runtime._validate import Splits, normalized_device
from gangmesh.runtime.call_thread import CallThread
from gangmesh.runtime.gang import GangError, PlacedGang, ReduceOperation

_MEETING_MARGIN = 5.0
"""Seconds a bridge's meeting may take beyond its timeout before its store is given up on."""

Blame = Callable[[str, BaseException], GangError]
"""The GangError of a failed collective (``"broadcast failed on ..."``), and torch's error."""


@final
class Pending:
    """A collective started on a bridge, waited for by :meth:`wait`.

    :param work: torch's work of the collective.
    :param gang: the bridge it runs on.
    :param op: the collective, in words.
    """

    def __init__(self, work: Any, gang: BridgeGang, op: str) -> None:
        self._work, self._gang, self._op = work, gang, op

    def wait(self) -> None:
        """Wait for the collective to end.

        :raises GangError: it failed, naming who broke it.
        """
        try:
            self._work.wait()
        except RuntimeError as ex:
            self._work = None  # its traceback keeps this frame: not the backend's connections
            self._gang.fail(self._op, ex)


@final
class BridgeGang(PlacedGang):
    """A gang over a backend of ``size`` processes that met in ``store``.

    :param store: where the members meet (a namespace no other group uses).
    :param rank: this process's rank in the gang.
    :param size: the number of members.
    :param device: where the tensors live: gloo for a CPU, NCCL for a CUDA device.
    :param timeout: the timeout of its collectives, and of its members' meeting.
    :param name: its label in messages.
    :param members: who each member is, by gang rank (in a join: its job and rank there).
    :param blame: the GangError of a failed collective.
    :raises GangError: the members did not all come within ``timeout``.
    """

    def __init__(
        self,
        store: Any,
        rank: int,
        size: int,
        device: torch.device,
        timeout: timedelta,
        *,
        name: str,
        members: tuple[tuple[str, int], ...],
        blame: Blame,
    ) -> None:
        self.members = members
        """Who each member is, by gang rank: ``bridge.members.index(("trainer", 0))`` is the
        gang rank of rank 0 of job trainer."""
        self._rank, self._size, self._device = rank, size, normalized_device(device)
        self._name, self._blame, self.timeout = name, blame, timeout
        meeting = CallThread("gangmesh-bridge-meeting")
        try:  # the meeting's store calls wait without end for a server that is stopped
            self._backend: Any = meeting.call(
                lambda: _c10d.standalone_backend(store, rank, size, self._device, timeout),
                timeout.total_seconds() + _MEETING_MARGIN,
            )
        except TimeoutError:
            raise GangError(
                f"creating {self.describe()} failed: its store did not answer within "
                f"{timeout.total_seconds() + _MEETING_MARGIN:g} s (the join server stopped?)"
            ) from None
        except RuntimeError as ex:
            raise blame(f"creating {self.describe()} failed", ex) from ex
        finally:
            meeting.end(0)

    @property
    @override
    def supports_process_group(self) -> bool:
        return False

    @override
    def as_process_group(self) -> NoReturn:
        """A bridge has no process group of torch.distributed's world.

        :raises NotImplementedError: always.
        """
        raise NotImplementedError(f"{self.describe()} has no process group of this job's world")

    @override
    def describe(self) -> str:
        return f"bridge '{self._name}' (size {self._size}, rank {self._rank})"

    @override
    def close(self) -> None:
        """Drop the backend: its threads end and its connections close once no collective
        holds them. Communicates with no peer."""
        self._backend = None

    def fail(self, op: str, cause: BaseException) -> NoReturn:
        """Raise the GangError of collective ``op``, which ``cause`` ended."""
        raise self._blame(f"{op} failed on {self.describe()}", cause) from cause

    def _live(self, op: str) -> Any:
        if self._backend is None:
            raise GangError(f"{op}: {self.describe()} is closed")
        return self._backend

    def start_broadcast(self, tensor: Tensor, source_rank: int) -> Pending:
        """Start broadcasting ``tensor`` from gang rank ``source_rank``; wait with
        :meth:`Pending.wait`.

        :param tensor: the data on ``source_rank``; receives it on the other members.
        :param source_rank: the gang rank that sends (the caller checks it).
        :raises GangError: the collective cannot be started.
        """
        options = dist.BroadcastOptions()
        options.rootRank, options.rootTensor = source_rank, 0
        op = f"broadcast(source_rank={source_rank})"
        return self._start(op, lambda backend: backend.broadcast([tensor], options))

    def _start(self, op: str, call: Callable[[Any], Any]) -> Pending:
        backend = self._live(op)  # a closed bridge is the caller's mistake, not a failure
        try:
            return Pending(call(backend), self, op)
        except RuntimeError as ex:
            self.fail(op, ex)

    def _run(self, op: str, call: Callable[[Any], Any]) -> None:
        self._start(op, call).wait()

    @override
    def _create_gang(self, ranks: list[int]) -> NoReturn:
        raise NotImplementedError(
            f"{self.describe()} makes no sub-gangs; ask the join for a bridge of those ranks"
        )

    @override
    def _barrier(self) -> None:
        self._run("barrier", lambda backend: backend.barrier(dist.BarrierOptions()))

    @override
    def _all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None:
        options: Any = dist.AllreduceOptions()
        options.reduceOp = TORCH_OPS[op]
        self._run(f"all_reduce({op.name})", lambda backend: backend.allreduce([tensor], options))

    @override
    def _all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None:
        chunks = list(output_tensor.reshape(self._size, -1).unbind())
        flat = input_tensor.reshape(-1)
        self._all_gather_to_list(chunks, flat)

    @override
    def _all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None:
        options = _c10d.allgather_options()
        self._run(
            "all_gather",
            lambda backend: backend.allgather([output_tensors], [input_tensor], options),
        )

    @override
    def _reduce_scatter(
        self, output_tensor: Tensor, input_tensor: Tensor, op: ReduceOperation
    ) -> None:
        total = input_tensor.reshape(self._size, -1).clone()
        self._all_reduce(total, op)
        output_tensor.copy_(total[self._rank].reshape(output_tensor.shape))

    @override
    def _all_to_all(self, output_tensor: Tensor, input_tensor: Tensor, splits: Splits) -> None:
        outputs, inputs = splits
        self._run(
            "all_to_all",
            lambda backend: backend.alltoall_base(
                output_tensor, input_tensor.contiguous(), outputs or [], inputs or [],
                dist.AllToAllOptions(),
            ),
        )  # fmt: skip

    @override
    def _broadcast(self, tensor: Tensor, source_rank: int) -> None:
        self.start_broadcast(tensor, source_rank).wait()

    @override
    def _broadcast_objects(self, objects: list[Any], source_rank: int) -> None:
        payload = pickle.dumps(objects) if self._rank == source_rank else b""
        length = torch.tensor([len(payload)], dtype=torch.int64, device=self._device)
        self._broadcast(length, source_rank)
        data = torch.zeros(int(length.item()), dtype=torch.uint8, device=self._device)
        if self._rank == source_rank:
            data.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
        self._broadcast(data, source_rank)
        objects[:] = pickle.loads(data.cpu().numpy().tobytes())
