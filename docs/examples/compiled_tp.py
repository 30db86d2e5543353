"""Tensor parallel blocks whose linears call gang collectives, each block compiled with
torch.compile(fullgraph=True); checked against the same blocks run eagerly and against one
process.

    torchrun --nproc-per-node 2 docs/examples/compiled_tp.py                    # TP 2, inductor
    torchrun --nproc-per-node 2 docs/examples/compiled_tp.py --backend eager
    torchrun --nproc-per-node 4 docs/examples/compiled_tp.py --backend eager    # TP 2 x FSDP2 2

The layers are the classic ones (Megatron-LM's, fairseq2's): a column-parallel linear holds
a slice of the output features, a row-parallel one a slice of the input features, and two
autograd functions carry the sums across the tp gang, one in the forward, one in the
backward. Each block is compiled whole, its gang calls included, as torchtitan compiles its
blocks; where there are several tp gangs, each compiled block is then sharded by FSDP2 over
``gangs.meshes["dp_shard_cp"]``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.fsdp import fully_shard
from toy_model import (
    RTOL,
    Block,
    ToyModel,
    compare,
    log,
    make_model,
    nan_as_inf,
    reference_losses,
    setup_logging,
    train_data_parallel,
)

import gangmesh as gm

STEPS = 5


class _SumGradients(torch.autograd.Function):
    """The input as it is; its gradient summed over the gang (each rank's part of the input's
    gradient comes from its own slice of the weights)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, gang: gm.Gang) -> Tensor:
        ctx.gang = gang
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        grad = grad.contiguous().clone()
        ctx.gang.all_reduce(grad, gm.ReduceOperation.SUM)
        return grad, None


class _SumOutputs(torch.autograd.Function):
    """The sum over the gang of each rank's partial output; the gradient as it is."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, gang: gm.Gang) -> Tensor:
        x = x.contiguous().clone()
        gang.all_reduce(x, gm.ReduceOperation.SUM)
        return x

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


class _GatherFeatures(torch.autograd.Function):
    """Every rank's slice of the last dimension, concatenated in rank order; the gradient of
    this rank's slice."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, gang: gm.Gang) -> Tensor:
        ctx.gang = gang
        slices = x.new_empty(gang.size, *x.shape)
        gang.all_gather(slices, x.contiguous())
        return torch.cat(slices.unbind(0), dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad.chunk(ctx.gang.size, dim=-1)[ctx.gang.rank].contiguous(), None


class ColumnParallelLinear(nn.Module):
    """This rank's slice of ``full``'s output features; ``gather``: the whole output."""

    def __init__(self, full: nn.Linear, gang: gm.Gang, *, gather: bool = False) -> None:
        super().__init__()
        self.gang, self.gather = gang, gather
        self.weight = nn.Parameter(full.weight.detach().chunk(gang.size)[gang.rank].clone())
        self.bias = nn.Parameter(full.bias.detach().chunk(gang.size)[gang.rank].clone())

    def forward(self, x: Tensor) -> Tensor:
        y = F.linear(_SumGradients.apply(x, self.gang), self.weight, self.bias)
        return _GatherFeatures.apply(y, self.gang) if self.gather else y


class RowParallelLinear(nn.Module):
    """This rank's slice of ``full``'s input features; the output summed over the gang."""

    def __init__(self, full: nn.Linear, gang: gm.Gang) -> None:
        super().__init__()
        self.gang = gang
        self.weight = nn.Parameter(full.weight.detach().chunk(gang.size, 1)[gang.rank].clone())
        self.bias = nn.Parameter(full.bias.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        return _SumOutputs.apply(F.linear(x, self.weight), self.gang) + self.bias


class ParallelBlock(nn.Module):
    """``block`` over the gang: ``up`` by output features, ``down`` by input features, so the
    activation between them stays sliced and one all-reduce restores the block's output."""

    def __init__(self, block: Block, gang: gm.Gang) -> None:
        super().__init__()
        self.norm = block.norm
        self.up = ColumnParallelLinear(block.up, gang)
        self.down = RowParallelLinear(block.down, gang)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


def parallel_model(tp: gm.Gang) -> ToyModel:
    """The toy model over ``tp``: parallel blocks and a head sliced by vocabulary."""
    model = make_model(tp.device)
    for index, block in enumerate(model.blocks):
        assert isinstance(block, Block)
        model.blocks[index] = ParallelBlock(block, tp)
    model.head = ColumnParallelLinear(model.head, tp, gather=True)  # type: ignore[assignment]
    return model


def build(gangs: gm.Gangs, backend: str | None) -> ToyModel:
    """The model over ``gangs.tp``, each block compiled whole by ``backend`` (None: eager),
    gang calls included: one graph per block, no graph break; each block, then the model,
    sharded by FSDP2 over the data-parallel processes where there are several."""
    model = parallel_model(gangs.tp)
    if backend is not None:
        for index, block in enumerate(model.blocks):
            model.blocks[index] = torch.compile(block, backend=backend, fullgraph=True)
    if gangs.dp.size > 1:
        mesh = gangs.meshes["dp_shard_cp"]["dp_shard_cp"]
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend")
    args = parser.parse_args()
    setup_logging()
    root = gm.setup_root_gang()
    gangs = gm.create_gangs(root, tp=2 if root.size % 2 == 0 else 1)
    if root.rank == 0:
        log.info("TP %d x FSDP2 %d on %d processes, blocks compiled by %s",
                 gangs.tp.size, gangs.dp.size, root.size, args.backend)  # fmt: skip

    eager = train_data_parallel(build(gangs, None), gangs.dp, STEPS)
    compiled = train_data_parallel(build(gangs, args.backend), gangs.dp, STEPS)

    worst = max(nan_as_inf(abs(c - e) / abs(e)) for c, e in zip(compiled, eager, strict=True))
    if worst > RTOL:
        log.error("rank %d: compiled differs from eager by %.1e > %.0e", root.rank, worst, RTOL)
        sys.exit(1)
    if root.rank == 0:
        log.info("compiled matches eager within %.0e (worst %.1e)", RTOL, worst)
    compare(compiled, reference_losses(root.device, STEPS), root.rank)


if __name__ == "__main__":
    main()
