"""fairseq2 0.8.1's library on gangmesh's gangs and on its own, 4 processes; results to JSON.

Each layout trains twice: on gangs from gangmesh's ``create_gangs``, then on fairseq2's own
(``create_parallel_gangs``, ``create_fsdp_gangs``) over the same default group; both are
entered into fairseq2 with its ``set_gangs``, where its layers and model hub find them.
Every rank writes each run's losses and those of the same training in one process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta

import fairseq2.gang as fs2
from common import write_results
from fairseq2.nn.ddp import to_ddp
from fairseq2.nn.fsdp import to_fsdp2
from fairseq2_training import CPU, llama, one_process, sharded_model, train, whole_model
from torch import Tensor
from torch.distributed.tensor import DTensor
from torch.nn import Module

import gangmesh as gm


def mean_over(gang: gm.Gang | fs2.Gang) -> Callable[[Tensor], Tensor]:
    """A loss averaged over ``gang``: the gang's all_reduce with fairseq2's enum."""

    def mean(loss: Tensor) -> Tensor:
        loss = loss.clone()
        gang.all_reduce(loss, fs2.ReduceOperation.SUM)
        return loss / gang.size

    return mean


def fsdp2(model: Module, gangs: object) -> Module:
    """fairseq2's to_fsdp2, the whole model one unit."""
    return to_fsdp2(model, gangs, lambda module, wrap: module)


def ddp(model: Module, gangs: object) -> Module:
    """fairseq2's to_ddp."""
    return to_ddp(model, gangs)


def tiny(gangs: object) -> Module:
    """The model of fairseq2's layers, sharded over the current gangs' tp gang."""
    return sharded_model()


LAYOUTS = {
    # name: (create_gangs sizes, fairseq2's tp_size and data parallelism, model, wrapper)
    "sharded layers, FSDP2, tp 2 x dp_shard 2": (
        {"tp": 2, "dp_shard": 2}, (2, "fsdp"), tiny, fsdp2),
    "FSDP2 (HSDP), dp_replicate 2 x dp_shard 2": (
        {"dp_replicate": 2, "dp_shard": 2}, (1, 2), tiny, fsdp2),
    "sharded layers, DDP, tp 2 x dp_replicate 2": (
        {"tp": 2, "dp_replicate": 2, "dp_shard": 1}, (2, None), tiny, ddp),
    "DDP, dp_replicate 4": ({"dp_replicate": 4, "dp_shard": 1}, (1, None), tiny, ddp),
    "hub's LLaMA, FSDP2, tp 2 x dp_shard 2": (
        {"tp": 2, "dp_shard": 2}, (2, "fsdp"), llama, fsdp2),
}  # fmt: skip
"""Where tp is 1 the sharded layers hold the whole model."""


def fairseq2_gangs(root: gm.Gang, tp_size: int, data: int | str | None) -> fs2.Gangs:
    """fairseq2's own gangs over the default group: fully sharded ("fsdp"), HSDP with that
    many processes per node (an int), or replicated (None)."""
    gangs = fs2.create_parallel_gangs(fs2.ProcessGroupGang(root.as_process_group(), CPU),
                                      tp_size=tp_size)  # fmt: skip
    if data == "fsdp":
        return fs2.create_fsdp_gangs(gangs)
    return gangs if data is None else fs2.create_fsdp_gangs(gangs, intra_node_size=data)


def trained(gangs: gm.Gangs | fs2.Gangs, make: Callable[[object], Module], wrap) -> dict:
    """The losses of a model ``make`` builds and ``wrap`` parallelises, ``gangs`` fairseq2's
    current gangs."""
    with fs2.set_gangs(gangs):
        model = wrap(make(gangs), gangs)
        before = held(model)
        losses = train(model, gangs.dp.rank, gangs.dp.size, mean_over(gangs.dp))
    return {**losses.as_dict(), "held": before}


def held(model: Module) -> int:
    """How many parameter values this process holds: fewer than the model's where it is
    sharded."""
    local = (p.to_local() if isinstance(p, DTensor) else p for p in model.parameters())
    return sum(tensor.numel() for tensor in local)


def main() -> None:
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    results: dict[str, object] = {}
    for name, (sizes, (tp_size, data), make, wrap) in LAYOUTS.items():
        whole = llama(None) if make is llama else whole_model()
        ours = gm.create_gangs(root, **sizes)
        try:
            on_gangmesh = trained(ours, make, wrap)
        finally:
            ours.close()
        on_fairseq2 = trained(fairseq2_gangs(root, tp_size, data), make, wrap)
        results[name] = {"one process": {**one_process(whole).as_dict(), "held": held(whole)},
                         "gangmesh": on_gangmesh, "fairseq2": on_fairseq2}  # fmt: skip
    write_results(int(os.environ["RANK"]), results)
    root.close()


if __name__ == "__main__":
    main()
