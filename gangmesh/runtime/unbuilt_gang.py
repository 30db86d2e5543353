"""UnbuiltGang: a gang of the plan that a job did not ask for, so none was made."""

from __future__ import annotations

from typing import Any, NoReturn, final

import torch
from torch import Tensor
from typing_extensions import override

from gangmesh.runtime._validate import Splits
from gangmesh.runtime.gang import GangError, PlacedGang, ReduceOperation


@final
class UnbuiltGang(PlacedGang):
    """Stands where a gang was not built: its rank and size are the plan's, and every
    collective, sub-gang or process group asked of it raises, saying how to build it.

    A dense job (ep = 1, etp = 1) makes no group that only the expert view needs; its
    efsdp and edp gangs are UnbuiltGangs until the job asks with ``expert=True``.

    :param device: the device of the other gangs.
    :param name: the dimension, for messages.
    :param rank: this process's rank along it, in the plan.
    :param size: its size in the plan.
    :param hint: what builds it.
    """

    def __init__(self, device: torch.device, *, name: str, rank: int, size: int, hint: str) -> None:
        self._device, self._name, self._rank, self._size = device, name, rank, size
        self._hint = hint

    @property
    @override
    def supports_process_group(self) -> bool:
        return False

    @override
    def close(self) -> None:
        """Nothing to release."""

    @override
    def describe(self) -> str:
        return f"gang '{self._name}' (size {self._size}, rank {self._rank}, not built)"

    @override
    def as_process_group(self) -> NoReturn:
        """:raises GangError: always: it has no group."""
        self._refuse("as_process_group")

    def _refuse(self, op: str) -> NoReturn:
        raise GangError(f"{op}: {self.describe()}: {self._hint}")

    @override
    def _create_gang(self, ranks: list[int]) -> NoReturn:
        self._refuse("create_gang")

    @override
    def _barrier(self) -> NoReturn:
        self._refuse("barrier")

    @override
    def _all_reduce(self, tensor: Tensor, op: ReduceOperation) -> NoReturn:
        self._refuse("all_reduce")

    @override
    def _all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> NoReturn:
        self._refuse("all_gather")

    @override
    def _all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> NoReturn:
        self._refuse("all_gather_to_list")

    @override
    def _reduce_scatter(
        self, output_tensor: Tensor, input_tensor: Tensor, op: ReduceOperation
    ) -> NoReturn:
        self._refuse("reduce_scatter")

    @override
    def _all_to_all(self, output_tensor: Tensor, input_tensor: Tensor, splits: Splits) -> NoReturn:
        self._refuse("all_to_all")

    @override
    def _broadcast(self, tensor: Tensor, source_rank: int) -> NoReturn:
        self._refuse("broadcast")

    @override
    def _broadcast_objects(self, objects: list[Any], source_rank: int) -> NoReturn:
        self._refuse("broadcast_objects")
