"""RefusingGang: a gang whose operations raise unless a subclass offers them."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, NoReturn

from torch import Tensor
from typing_extensions import override

from gangmesh.runtime._validate import Splits
from gangmesh.runtime.gang import Gang, ReduceOperation


class RefusingGang(Gang):
    """A gang with no process group, whose collectives and sub-gangs raise what
    ``_refuse`` says, unless a subclass overrides them."""

    @property
    @override
    def supports_process_group(self) -> bool:
        return False

    @override
    def as_process_group(self) -> NoReturn:
        """:raises GangError: always: it has no group."""
        self._refuse("as_process_group")

    @abstractmethod
    def _refuse(self, op: str) -> NoReturn:
        """Raise the error that ``op`` asked of this gang gets."""

    @override
    def _create_gang(self, ranks: list[int]) -> Gang | None:
        self._refuse("create_gang")

    @override
    def _barrier(self) -> None:
        self._refuse("barrier")

    @override
    def _all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None:
        self._refuse("all_reduce")

    @override
    def _all_gather(self, output_tensor: Tensor, input_tensor: Tensor) -> None:
        self._refuse("all_gather")

    @override
    def _all_gather_to_list(self, output_tensors: list[Tensor], input_tensor: Tensor) -> None:
        self._refuse("all_gather_to_list")

    @override
    def _reduce_scatter(
        self, output_tensor: Tensor, input_tensor: Tensor, op: ReduceOperation
    ) -> None:
        self._refuse("reduce_scatter")

    @override
    def _all_to_all(self, output_tensor: Tensor, input_tensor: Tensor, splits: Splits) -> None:
        self._refuse("all_to_all")

    @override
    def _broadcast(self, tensor: Tensor, source_rank: int) -> None:
        self._refuse("broadcast")

    @override
    def _broadcast_objects(self, objects: list[Any], source_rank: int) -> None:
        self._refuse("broadcast_objects")
