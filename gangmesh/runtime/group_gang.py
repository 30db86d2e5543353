"""GroupGang: the collectives of a gang over a torch.distributed ProcessGroup.

Each collective checks that the gang is open, runs on the group in the gang's own rank
order (see :mod:`gangmesh.runtime.rank_order`) and turns torch's errors into GangErrors that name
the gang. In code that torch.compile or torch.export traces, it takes the traced path
instead (:mod:`gangmesh.runtime._traced`), which counts nothing and catches nothing: a
collective that fails there raises torch's error from the compiled code, which leaving
``with gangs:`` names the culprit. :class:`~gangmesh.ProcessGroupGang` adds how a gang holds
its group.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import Tensor
from torch.compiler import is_compiling
from torch.distributed import ProcessGroup
from typing_extensions import override

from gangmesh.plan._checks import InvalidTypeError, check_timeout
from gangmesh.runtime import _backend, _c10d
from gangmesh.runtime._traced import TracedGroup
from gangmesh.runtime._validate import Splits, normalized_device
from gangmesh.runtime.faults import Call, gang_error
from gangmesh.runtime.gang import DEFAULT_TIMEOUT, GangError, PlacedGang, ReduceOperation
from gangmesh.runtime.held import held_ranks
from gangmesh.runtime.rank_order import RankOrder

_broadcast_object_list = _c10d.undecorated(dist.broadcast_object_list)
_barrier = _c10d.undecorated(dist.barrier)


class GroupGang(PlacedGang):
    """A gang whose collectives run on a torch.distributed ProcessGroup.

    :param pg: the group.
    :param device: where the tensors passed to the collectives live.
    :param name: the gang's label in messages.
    :param timeout: the group's timeout, where the backend does not tell it.
    :raises TypeError: ``pg`` is not a ProcessGroup, ``device`` not a torch.device or
        ``timeout`` not a timedelta.
    :raises ValueError: ``timeout`` is not positive, or ``pg`` is not a group of this job (of
        another world, or destroyed).
    """

    def __init__(
        self, pg: ProcessGroup, device: torch.device, name: str, timeout: timedelta | None
    ) -> None:
        if not isinstance(pg, ProcessGroup):
            raise InvalidTypeError(f"pg: expected a torch ProcessGroup, got {pg!r}")
        self._global_ranks = held_ranks("pg", pg)
        timeout = check_timeout(timeout)
        self._device = normalized_device(device)
        self._device_ids = [self._device.index] if self._device.type == "cuda" else None
        """What a barrier tells torch of the device: its index on CUDA, as NCCL needs."""
        self._pg: ProcessGroup | None = pg
        self._name = name
        self._rank = dist.get_rank(pg)
        self._size = dist.get_world_size(pg)
        self._order: RankOrder | None = None
        self._backend = dist.get_backend(pg)
        self._timeout = _c10d.group_timeout(pg, self._device) or timeout or DEFAULT_TIMEOUT
        self._monitor_group: ProcessGroup | None = None
        """Where :meth:`~Gang.barrier` runs a monitored barrier; None for a plain one."""
        self._calls = 0
        """The collectives this process entered on the gang: the number of the current one."""
        self._traced: TracedGroup | None = TracedGroup(
            pg.group_name, self._size, None, self._device
        )
        """The gang's collectives in traced code; None once the gang is closed."""

    @property
    @override
    def supports_process_group(self) -> bool:
        return True

    @override
    def describe(self) -> str:
        return (
            f"gang '{self._name}' (size {self._size}, rank {self._rank}, "
            f"global rank {self._global_ranks[self._rank]})"
        )

    def _renumber(self, members: list[int]) -> None:
        """Number the gang by ``members``: collectives map gang ranks to group ranks."""
        self._order = RankOrder(self._global_ranks, members)
        self._rank = self._order.from_group[self._rank]
        self._global_ranks = list(members)
        if self._traced is not None:
            self._traced = TracedGroup(self._traced.name, self._size, self._order, self._device)

    def _live(self, op: str) -> ProcessGroup:
        """The group, for collective ``op``.

        :raises GangError: the gang is closed.
        """
        if self._pg is None:
            self._closed(op)
        self._calls += 1
        return self._pg

    def _in_trace(self, op: str) -> TracedGroup:
        """The gang's collectives in traced code, for collective ``op``.

        :raises GangError: the gang is closed.
        """
        if self._traced is None:
            self._closed(op)
        return self._traced

    @override
    def _barrier(self) -> None:
        if is_compiling():
            self._in_trace("barrier").barrier()
            return
        pg = self._pg
        if pg is None:
            self._closed("barrier")
        self._calls += 1
        try:
            if self._monitor_group is None:
                _barrier(group=pg, device_ids=self._device_ids)
            else:
                dist.monitored_barrier(
                    group=self._monitor_group, timeout=self._timeout, wait_all_ranks=True
                )
        except RuntimeError as ex:
            monitored = self._monitor_group is not None
            self._fail("barrier", ex, reason=self._absentees(str(ex)) if monitored else None)

    @override
    def _all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None:
        if is_compiling():
            self._in_trace("all_reduce").all_reduce(tensor, op)
            return
        pg = self._live("all_reduce")
        try:
            _backend.all_reduce(pg, tensor, op)
        except RuntimeError as ex:
            self._fail(f"all_reduce({op.name})", ex, tensor)

    @override
    def _all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None:
        if is_compiling():
            self._in_trace("all_gather").all_gather(output_tensor, input_tensor)
            return
        pg = self._pg
        if pg is None:
            self._closed("all_gather")
        self._calls += 1
        dims = input_tensor.dim()
        if dims == 0:
            input_tensor, dims = input_tensor.view(1), 1
        if output_tensor.dim() != dims:  # stacked or flat: concatenate instead
            output_tensor = output_tensor.view(-1, *input_tensor.shape[1:])
        try:
            if self._order is None:
                _backend.all_gather_single(pg, output_tensor, input_tensor.contiguous())
            else:
                outputs = self._order.in_group_order(output_tensor.chunk(self._size))
                _backend.all_gather(pg, outputs, input_tensor.contiguous())
        except RuntimeError as ex:
            self._fail("all_gather", ex, input_tensor)

    @override
    def _all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None:
        if is_compiling():
            self._in_trace("all_gather_to_list").all_gather_to_list(output_tensors, input_tensor)
            return
        pg = self._live("all_gather_to_list")
        if self._order is not None:
            output_tensors = self._order.in_group_order(output_tensors)
        try:
            _backend.all_gather(pg, output_tensors, input_tensor)
        except RuntimeError as ex:
            self._fail("all_gather_to_list", ex, input_tensor)

    @override
    def _reduce_scatter(
        self, output_tensor: Tensor, input_tensor: Tensor, op: ReduceOperation
    ) -> None:
        if is_compiling():
            self._in_trace("reduce_scatter").reduce_scatter(output_tensor, input_tensor, op)
            return
        pg = self._pg
        if pg is None:
            self._closed("reduce_scatter")
        self._calls += 1
        dims = output_tensor.dim()
        if dims == 0:
            output_tensor, dims = output_tensor.view(1), 1
        if input_tensor.dim() != dims:  # stacked: concatenate instead
            input_tensor = input_tensor.view(-1, *output_tensor.shape[1:])
        if self._order is not None:
            input_tensor = torch.cat(self._order.in_group_order(input_tensor.chunk(self._size)))
        try:
            _backend.reduce_scatter_single(pg, output_tensor, input_tensor.contiguous(), op)
        except RuntimeError as ex:
            self._fail(f"reduce_scatter({op.name})", ex, output_tensor)

    @override
    def _all_to_all(self, output_tensor: Tensor, input_tensor: Tensor, splits: Splits) -> None:
        if is_compiling():
            self._in_trace("all_to_all").all_to_all(output_tensor, input_tensor, splits)
            return
        pg = self._live("all_to_all")
        try:
            if self._order is not None:
                exchange = partial(_backend.all_to_all_single, pg)
                self._order.all_to_all(exchange, output_tensor, input_tensor, splits)
            else:
                _backend.all_to_all_single(pg, output_tensor, input_tensor.contiguous(), *splits)
        except RuntimeError as ex:
            self._fail("all_to_all", ex, input_tensor)

    def _group_rank(self, rank: int) -> int:
        """The rank in the group of gang rank ``rank``."""
        return rank if self._order is None else self._order.to_group[rank]

    @override
    def _broadcast(self, tensor: Tensor, source_rank: int) -> None:
        if is_compiling():
            self._in_trace("broadcast").broadcast(tensor, source_rank)
            return
        pg = self._live("broadcast")
        try:
            _backend.broadcast(pg, tensor, self._group_rank(source_rank))
        except RuntimeError as ex:
            self._fail(f"broadcast(source_rank={source_rank})", ex, tensor)

    @override
    def _broadcast_objects(self, objects: list[Any], source_rank: int) -> None:
        pg = self._live("broadcast_objects")
        try:
            _broadcast_object_list(
                objects, group=pg, group_src=self._group_rank(source_rank), device=self._device
            )
        except RuntimeError as ex:
            self._fail(f"broadcast_objects(source_rank={source_rank})", ex)

    def _absentees(self, error: str) -> tuple[str, tuple[int, ...]]:
        """Who a failed monitored barrier waited for, in gang and global ranks; and the
        global ranks it names (none where rank 0 could not say)."""
        seconds = self._timeout.total_seconds()
        found = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", error)
        if found:
            ranks = [int(r) for r in found.group(1).split(",")]
            if self._order is not None:
                ranks = [self._order.from_group[r] for r in ranks]
            members = [self._global_ranks[r] for r in ranks]
            text = f"gang ranks {ranks} (global ranks {members}) did not arrive in {seconds:g} s"
            return text, tuple(members)
        return (
            f"gang rank 0 (global rank {self._global_ranks[0]}) did not confirm it in "
            f"{seconds:g} s: it is gone or stuck, or a rank did not arrive and rank 0 names it"
        ), ()

    def _closed(self, op: str) -> NoReturn:
        raise GangError(f"{op}: {self.describe()} is closed")

    def _fail(
        self,
        op: str,
        cause: Exception,
        tensor: Tensor | None = None,
        reason: tuple[str, tuple[int, ...]] | None = None,
    ) -> NoReturn:
        """Raise the GangError of failed collective ``op`` (on ``tensor``), naming the rank
        that broke it (see :func:`~gangmesh.runtime.faults.blame.gang_error`)."""
        call = Call(self._name, tuple(self._global_ranks), self._calls, op)
        if tensor is not None:
            call = replace(call, shape=tuple(tensor.shape), dtype=str(tensor.dtype))
        what = f"{op} failed on {self.describe()}"
        raise gang_error(
            what, self._global_ranks, self._rank, self._timeout, cause, reason, call
        ) from cause
