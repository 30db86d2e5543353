"""ManagedGang: the replica groups that take part in this step, as torchft's Manager sees them."""

from __future__ import annotations

from typing import Any, NoReturn, final

import torch
import torch.distributed as dist
from torch import Tensor
from typing_extensions import override

from gangmesh.runtime.gang import GangError, ReduceOperation
from gangmesh.runtime.refusing_gang import RefusingGang
from gangmesh.runtime.replica_group import torchft_reason

_REDUCTIONS = {ReduceOperation.SUM: dist.ReduceOp.SUM, ReduceOperation.MEAN: dist.ReduceOp.AVG}


@final
class ManagedGang(RefusingGang):
    """One process of each replica group that takes part in this step (torchft's quorum).

    Its members change from step to step: ``rank`` and ``size`` are this step's participating
    replica rank and the number of participating replica groups, read from the Manager
    (they wait for the step's quorum, which the optimizer's ``zero_grad`` starts). A
    collective that fails does not raise: torchft marks the step so that it does not
    commit (the wrapped optimizer skips it and the step is tried again by the groups that
    are left), and the tensor's values are then undefined. all_reduce (SUM, MEAN),
    barrier and broadcast are offered; the others, sub-gangs and a process group are not,
    since the members change.

    :param manager: this process's torchft Manager.
    :param group: the torchft process group the Manager configures for each quorum.
    :param device: where the tensors passed to the collectives live.
    """

    def __init__(self, manager: Any, group: Any, device: torch.device) -> None:
        self._manager, self._group, self._device = manager, group, device

    @property
    @override
    def rank(self) -> int:
        rank = self._manager.participating_rank()
        if rank is None:
            raise GangError("this replica group takes no part in this step (it is healing)")
        return int(rank)

    @property
    @override
    def size(self) -> int:
        return int(self._manager.num_participants())

    @property
    @override
    def device(self) -> torch.device:
        return self._device

    @override
    def close(self) -> None:
        """Nothing to release: the Manager belongs to the Replicas."""

    @override
    def describe(self) -> str:
        return "ManagedGang(the replica groups of this step)"

    @override
    def _all_reduce(self, tensor: Tensor, op: ReduceOperation) -> None:
        reduction = _REDUCTIONS.get(op)
        if reduction is None:
            raise ValueError(f"op: expected SUM or MEAN on the replica groups' gang, got {op.name}")
        self._manager.allreduce(tensor, reduce_op=reduction).wait()

    @override
    def _barrier(self) -> None:
        self._all_reduce(torch.zeros(1, device=self._device), ReduceOperation.SUM)

    @override
    def _broadcast(self, tensor: Tensor, source_rank: int) -> None:
        manager = self._manager
        if manager.errored():
            return
        try:
            manager.wait_quorum()
        except Exception as ex:  # the step's quorum failed: torchft raises it again here
            raise GangError(f"broadcast: no quorum for this step: {torchft_reason(ex)}") from ex
        options = dist.BroadcastOptions()
        options.rootRank = source_rank
        try:
            self._group.broadcast([tensor], options).wait()
        except Exception as ex:  # torchft's rule: a failure marks the step, it does not end it
            manager.report_error(ex)

    @override
    def _refuse(self, op: str) -> NoReturn:
        raise GangError(
            f"{op}: the replica groups' gang offers all_reduce (SUM, MEAN), barrier and "
            "broadcast; its members change from step to step"
        )
