"""HSDP across replica groups: FSDP2 inside a group, its gradients averaged over the step's
groups, an optimizer that steps only on a committed step, and the state a healing group
copies."""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn
from torch.optim import Optimizer
from typing_extensions import override

from gangmesh.runtime.gang import Gang, ReduceOperation


class Steps(Protocol):
    """What starts and commits a step across replica groups (a Replicas)."""

    def start_step(self) -> None: ...

    def commit(self) -> bool: ...


def wire(
    gang: Gang, manager: Any, steps: Steps, model: nn.Module, optimizer: Optimizer
) -> Optimizer:
    """See :meth:`gangmesh.Replicas.wrap`: ``gang`` across the replica groups, torchft's
    ``manager``, and what starts and commits a step."""
    # Imported here, not with gangmesh: imported once the default group exists, torch's FSDP
    # package keeps that group for good (ShardedGradScaler's default process_group is
    # dist.group.WORLD, read at import; its checkpoint package imports it too), which would
    # hold every job's groups past their destruction. A model to wrap has imported it.
    from torch.distributed.checkpoint import state_dict as dcp_state
    from torch.distributed.fsdp import FSDPModule

    sharded = [module for module in model.modules() if isinstance(module, FSDPModule)]
    if not sharded:
        raise ValueError(
            "model: expected a model sharded with fully_shard inside the replica group, "
            f"got {type(model).__name__} with no FSDP2 module"
        )

    def average_over_replica_groups(gradient: torch.Tensor) -> None:
        gang.all_reduce(gradient, ReduceOperation.MEAN)

    for module in sharded:
        module.set_all_reduce_hook(average_over_replica_groups)
    manager.register_state_dict_fn(
        "model",
        lambda state: dcp_state.set_model_state_dict(model, state),
        lambda: dcp_state.get_model_state_dict(model),
    )
    manager.register_state_dict_fn(
        "optimizer",
        lambda state: dcp_state.set_optimizer_state_dict(model, optimizer, state),
        lambda: dcp_state.get_optimizer_state_dict(model, optimizer),
    )
    return CommittingOptimizer(steps, optimizer)


class CommittingOptimizer(Optimizer):
    """``optimizer``, stepping only on steps that every replica group of the step committed.

    ``zero_grad`` starts a step (:meth:`gangmesh.Replicas.start_step`); ``step`` updates
    the weights only where :meth:`gangmesh.Replicas.commit` says so. Call ``zero_grad`` before the
    forward pass and ``step`` after the backward pass, once each per step.

    :param steps: what starts and commits a step (the Replicas).
    :param optimizer: the optimizer that updates the weights.
    """

    def __init__(self, steps: Steps, optimizer: Optimizer) -> None:
        # The wrapped optimizer keeps the parameters and state; this one decides, and shows
        # them under the usual names (for schedulers and checkpoints).
        self.steps, self.optimizer = steps, optimizer
        self._show_wrapped()

    def _show_wrapped(self) -> None:
        self.defaults = self.optimizer.defaults
        self.param_groups = self.optimizer.param_groups
        self.state = self.optimizer.state

    @override
    def zero_grad(self, set_to_none: bool = True) -> None:
        self.steps.start_step()
        self.optimizer.zero_grad(set_to_none)

    @override
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        if closure is not None:
            raise ValueError("closure: expected None; a step is committed once, after backward")
        if self.steps.commit():
            self.optimizer.step()

    @override
    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)
        self._show_wrapped()

    @override
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)
