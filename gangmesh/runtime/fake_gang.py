"""FakeGang: one process standing in for a gang of identical processes."""

from __future__ import annotations

from typing import Any, NoReturn, final

import torch
from torch import Tensor
from typing_extensions import override

from gangmesh.plan._checks import check_index, check_positive
from gangmesh.runtime._validate import Splits, normalized_device
from gangmesh.runtime.gang import PlacedGang, ReduceOperation


@final
class FakeGang(PlacedGang):
    """A single process standing in for a gang of ``size`` identical processes.

    Every collective gives the result the real gang would give if all its
    processes held this process's tensors: SUM multiplies by ``size``, PRODUCT
    raises to the power ``size``, MEAN, MIN and MAX leave the tensor as it is.

    >>> import torch
    >>> gang = FakeGang(torch.device("cpu"), rank=1, size=4)
    >>> t = torch.tensor([3.0])
    >>> gang.all_reduce(t, ReduceOperation.SUM)
    >>> t
    tensor([12.])

    :param device: where the tensors passed to the collectives live.
    :param rank: this process's rank in the simulated gang.
    :param size: the number of processes it stands for.
    :raises TypeError: ``device`` is not a torch.device.
    :raises ValueError: ``size`` < 1 or ``rank`` outside ``[0, size)``.
    """

    def __init__(self, device: torch.device, *, rank: int = 0, size: int = 1) -> None:
        self._device = normalized_device(device)
        self._size = check_positive("size", size)
        self._rank = check_index("rank", rank, size)

    @property
    @override
    def supports_process_group(self) -> bool:
        return False

    @override
    def close(self) -> None:
        """Nothing to release."""

    @override
    def as_process_group(self) -> NoReturn:
        """A FakeGang has no process group: check :attr:`~Gang.supports_process_group` first.

        :raises NotImplementedError: always.
        """
        raise NotImplementedError(
            "FakeGang has no process group; check gang.supports_process_group first"
        )

    @override
    def describe(self) -> str:
        return f"FakeGang(rank={self._rank}, size={self._size}, device={self._device})"

    @override
    def _create_gang(self, ranks: list[int]) -> FakeGang | None:
        if self._rank not in ranks:
            return None
        return FakeGang(self._device, rank=ranks.index(self._rank), size=len(ranks))

    @override
    def _barrier(self) -> None:
        pass

    @override
    def _all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None:
        _combine_with_itself(tensor, op, self._size)

    @override
    def _all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None:
        output_tensor.view(self._size, -1).copy_(input_tensor.reshape(1, -1))

    @override
    def _all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None:
        for output in output_tensors:
            output.copy_(input_tensor)

    @override
    def _reduce_scatter(
        self, output_tensor: Tensor, input_tensor: Tensor, op: ReduceOperation
    ) -> None:
        output_tensor.view(-1).copy_(input_tensor.reshape(self._size, -1)[self._rank])
        _combine_with_itself(output_tensor, op, self._size)

    @override
    def _all_to_all(self, output_tensor: Tensor, input_tensor: Tensor, splits: Splits) -> None:
        output_split_sizes, input_split_sizes = splits
        if input_split_sizes is None:
            rows = input_tensor.shape[0] // self._size
            start = rows * self._rank
        else:
            rows = input_split_sizes[self._rank]
            start = sum(input_split_sizes[: self._rank])
        expected = [rows] * self._size
        if output_split_sizes is None and output_tensor.shape[0] != rows * self._size:
            raise ValueError(
                f"output_tensor: identical processes each send this rank {rows} rows, so "
                f"expected {rows * self._size} rows, got {output_tensor.shape[0]}"
            )
        if output_split_sizes is not None and output_split_sizes != expected:
            raise ValueError(
                f"output_split_sizes: identical processes each send this rank the "
                f"input_split_sizes[{self._rank}] = {rows} rows, so expected {expected}, "
                f"got {output_split_sizes}"
            )
        chunk = input_tensor[start : start + rows]
        output_tensor.view(self._size, rows, *input_tensor.shape[1:]).copy_(chunk.unsqueeze(0))

    @override
    def _broadcast(self, tensor: Tensor, source_rank: int) -> None:
        pass

    @override
    def _broadcast_objects(self, objects: list[Any], source_rank: int) -> None:
        pass


def _combine_with_itself(tensor: Tensor, op: ReduceOperation, times: int) -> None:
    """``tensor`` combined with ``times - 1`` copies of itself by ``op``, in place; without
    autograd, as a process group writes its result (a parameter may be reduced, too)."""
    if times == 1 or op not in (ReduceOperation.SUM, ReduceOperation.PRODUCT):
        return
    with torch.no_grad():
        if op is ReduceOperation.SUM:
            tensor.mul_(times)
        else:
            tensor.pow_(times)
