"""UnbuiltGang: a gang of the plan that a job did not ask for, so none was made."""

from __future__ import annotations

from typing import NoReturn, final

import torch
from typing_extensions import override

from gangmesh.runtime.gang import GangError, PlacedGang
from gangmesh.runtime.refusing_gang import RefusingGang


@final
class UnbuiltGang(RefusingGang, PlacedGang):
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

    @override
    def close(self) -> None:
        """Nothing to release."""

    @override
    def describe(self) -> str:
        return f"gang '{self._name}' (size {self._size}, rank {self._rank}, not built)"

    @override
    def _refuse(self, op: str) -> NoReturn:
        raise GangError(f"{op}: {self.describe()}: {self._hint}")
