"""Collectives in code that torch.compile or torch.export traces: torch's functional
collectives, by group name.

Inside a compiled function dynamo cannot call a ProcessGroup's own methods (the eager fast
path, :mod:`gangmesh.runtime._backend`): it sees the group as an opaque object and traces
few of its members. Of the public calls it rewrites into graph ops, broadcast and barrier
are missing on every supported torch. The functional collectives trace on all of them, each
op taking its group by name (a plain string, so dynamo never touches the ProcessGroup) and
giving its result as a new tensor, which is copied into the caller's tensor: the call keeps
its in-place meaning. The copy is made without autograd, as a ProcessGroup writes its result:
autograd sees the tensor unchanged, also one that requires grad (a parameter that is
broadcast). They run on the same backend call as the eager path, so the results are the same
to the bit. Nothing here has a Python side effect (no counter, record or log line), which
would break the graph, or run once while tracing instead of at every call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import torch
from torch import Tensor

from gangmesh.runtime import _c10d
from gangmesh.runtime._validate import Splits
from gangmesh.runtime.gang import ReduceOperation
from gangmesh.runtime.rank_order import RankOrder

_REDUCTIONS = {
    ReduceOperation.SUM: "sum",
    ReduceOperation.MEAN: "avg",
    ReduceOperation.PRODUCT: "product",
    ReduceOperation.MIN: "min",
    ReduceOperation.MAX: "max",
}
"""The functional collectives' name of each reduction."""


@final
class TracedGroup:
    """The collectives of the process group named ``name``, as a gang of ``size`` numbers its
    members (``order``: None where it numbers them as the group does), for traced code.

    Each method takes what the gang's public method checked and gives what the eager call
    gives.

    :param name: the group's name (``ProcessGroup.group_name``).
    :param size: the number of members.
    :param order: gang rank <-> group rank, where they differ.
    :param device: the gang's device.
    """

    __slots__ = ("device", "name", "order", "size")

    def __init__(self, name: str, size: int, order: RankOrder | None, device: torch.device) -> None:
        self.name, self.size, self.order, self.device = name, size, order, device

    def barrier(self) -> None:
        """A one-element all-reduce, waited for: no process passes before all have come."""
        all_reduce = _c10d.functional_collective("all_reduce")
        all_reduce(torch.zeros(1, device=self.device), "sum", self.name)

    def all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None:
        all_reduce = _c10d.functional_collective("all_reduce")
        with torch.no_grad():
            tensor.copy_(all_reduce(tensor, _REDUCTIONS[op], self.name))

    def broadcast(self, tensor: Tensor, source_rank: int) -> None:
        source = source_rank if self.order is None else self.order.to_group[source_rank]
        with torch.no_grad():
            tensor.copy_(_c10d.functional_collective("broadcast")(tensor, source, self.name))

    def all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None:
        """Gather into ``output_tensor`` (contiguous, any accepted shape), in gang rank order."""
        with torch.no_grad():
            output_tensor.view(-1).copy_(self._gathered(input_tensor))

    def all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None:
        with torch.no_grad():
            pieces = self._gathered(input_tensor).chunk(self.size)
            for output, piece in zip(output_tensors, pieces, strict=True):
                output.copy_(piece.view(input_tensor.shape))

    def reduce_scatter(
        self, output_tensor: Tensor, input_tensor: Tensor, op: ReduceOperation
    ) -> None:
        """Reduce ``input_tensor`` (``size`` chunks along dim 0) and keep this rank's chunk."""
        reduce_scatter = _c10d.functional_collective(
            "reduce_scatter_single", "reduce_scatter_tensor"
        )
        with torch.no_grad():
            chunks = input_tensor.reshape(self.size, -1)
            if self.order is not None:
                chunks = torch.stack(self.order.in_group_order(chunks.unbind()))
            reduced = reduce_scatter(chunks.reshape(-1), _REDUCTIONS[op], 0, self.name)
            output_tensor.copy_(reduced.view(output_tensor.shape))

    def all_to_all(self, output_tensor: Tensor, input_tensor: Tensor, splits: Splits) -> None:
        with torch.no_grad():
            if self.order is None:
                self.exchange(output_tensor, input_tensor.contiguous(), *splits)
            else:
                self.order.all_to_all(self.exchange, output_tensor, input_tensor, splits)

    def exchange(
        self,
        output_tensor: Tensor,
        input_tensor: Tensor,
        output_split_sizes: Sequence[int] | None,
        input_split_sizes: Sequence[int] | None,
    ) -> None:
        """all_to_all in group rank order, rows along dim 0; None: equal parts."""
        received = _c10d.functional_collective("all_to_all_single")(
            input_tensor,
            self._rows(output_split_sizes, output_tensor),
            self._rows(input_split_sizes, input_tensor),
            self.name,
        )
        output_tensor.copy_(received)

    def _gathered(self, input_tensor: Tensor) -> Tensor:
        """Every member's ``input_tensor``, flat, one after the other in gang rank order."""
        all_gather = _c10d.functional_collective("all_gather_single", "all_gather_tensor")
        gathered: Tensor = all_gather(input_tensor.reshape(-1), 0, self.name)
        if self.order is None:
            return gathered
        pieces = gathered.chunk(self.size)
        return torch.cat([pieces[group_rank] for group_rank in self.order.to_group])

    def _rows(self, sizes: Sequence[int] | None, tensor: Tensor) -> list[int]:
        """``sizes`` as a list, or equal parts of ``tensor``'s rows."""
        return list(sizes) if sizes is not None else [tensor.shape[0] // self.size] * self.size
