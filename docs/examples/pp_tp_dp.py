"""3-D parallel: pipeline stages over gangs.pp, tensor parallel inside each stage, data
parallel across gangs.dp; checked against one process.

    torchrun --nproc-per-node 8 docs/examples/pp_tp_dp.py     # PP 2 x TP 2 x DP 2
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from toy_model import (
    GLOBAL_BATCH,
    STEPS,
    ToyModel,
    check_sharded,
    compare,
    global_batch,
    local_slice,
    log,
    loss_of,
    make_model,
    reference_losses,
    setup_logging,
)

import gangmesh as gm

BLOCK_PLAN = {"up": ColwiseParallel(), "down": RowwiseParallel()}
MICROBATCHES = 2


class Stage(PipelineStage):
    """A pipeline stage whose first exchange with its neighbours sends what they expect.

    Before torch 2.10 a stage greets its neighbours by sending an int64 into their float32
    buffer (pytorch/pytorch#165143): gloo refuses the size mismatch. The greeting's tensors
    are made float32 here; on later torch they already are.
    """

    def _get_init_p2p_neighbors_ops(self) -> list[dist.P2POp]:
        operations = super()._get_init_p2p_neighbors_ops()
        for operation in operations:
            operation.tensor = operation.tensor.float()
        return operations


class FirstStage(nn.Module):
    """Embedding and the first block."""

    def __init__(self, model: ToyModel) -> None:
        super().__init__()
        self.embed, self.block = model.embed, model.blocks[0]

    def forward(self, tokens: Tensor) -> Tensor:
        return self.block(self.embed(tokens))


class LastStage(nn.Module):
    """The second block, the final norm and the head."""

    def __init__(self, model: ToyModel) -> None:
        super().__init__()
        self.block, self.norm, self.head = model.blocks[1], model.norm, model.head

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.norm(self.block(x)).flatten(0, 1))


def main() -> None:
    setup_logging()
    root = gm.setup_root_gang()
    gangs = gm.create_gangs(root, pp=2, dp_replicate=-1, dp_shard=1, tp=2)
    assert gangs.pp.size == 2, "this recipe needs 8 processes (pp 2 x tp 2 x dp 2)"
    if root.rank == 0:
        log.info("PP 2 x TP 2 x DP %d on %d processes: %s", gangs.dp.size, root.size, gangs)

    model = make_model(root.device)
    first = gangs.pp.rank == 0
    stage_module = FirstStage(model) if first else LastStage(model)
    parallelize_module(stage_module.block, gangs.meshes["dp_shard_cp"]["tp"], BLOCK_PLAN)
    check_sharded(stage_module.block.up.weight, gangs.tp.size, root.rank)
    stage = Stage(
        stage_module, gangs.pp.rank, gangs.pp.size, root.device, group=gangs.pp.as_process_group()
    )
    schedule = ScheduleGPipe(stage, MICROBATCHES, loss_fn=loss_of)
    optimizer = torch.optim.AdamW(stage_module.parameters(), lr=1e-2)

    losses = []
    for step in range(STEPS):
        inputs, targets = global_batch(step, root.device)
        inputs = local_slice(inputs, gangs.dp.rank, gangs.dp.size)
        targets = local_slice(targets, gangs.dp.rank, gangs.dp.size)
        microbatch_losses: list[Tensor] = []
        if first:
            schedule.step(inputs)
        else:
            schedule.step(target=targets, losses=microbatch_losses)
        average_gradients(stage_module, gangs.dp)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(global_loss(microbatch_losses, gangs))

    compare(losses, reference_losses(root.device), root.rank)


def average_gradients(module: nn.Module, dp: gm.Gang) -> None:
    """Data parallelism by hand: the mean of each gradient over the dp gang."""
    for parameter in module.parameters():
        grad = parameter.grad
        if grad is not None:
            dp.all_reduce(
                grad.to_local() if isinstance(grad, DTensor) else grad, gm.ReduceOperation.MEAN
            )


def global_loss(microbatch_losses: list[Tensor], gangs: gm.Gangs) -> float:
    """The loss of the whole global batch, on every process."""
    loss = torch.zeros((), device=gangs.root.device)
    if microbatch_losses:  # the last stage
        loss = torch.stack([x.detach() for x in microbatch_losses]).mean()
    gangs.dp.all_reduce(loss, gm.ReduceOperation.MEAN)
    gangs.pp.broadcast(loss, source_rank=gangs.pp.size - 1)
    return loss.item()


assert GLOBAL_BATCH % (2 * MICROBATCHES) == 0

if __name__ == "__main__":
    main()
