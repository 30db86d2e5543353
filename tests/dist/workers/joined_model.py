"""The tiny model two joined jobs share in the tests: a trainer that trains it (FSDP2, and TP
where its layout has tp) and a generator that runs it (TP, replicas), and how each side
holds its weights (their TensorShards)."""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor, nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import gangmesh as gm

IN, HIDDEN = 8, 16
LAYOUTS = {
    "fsdp_tp": {"dp_shard": 2, "tp": 2},
    "tp_dp": {"dp_replicate": 2, "dp_shard": 1, "tp": 2},
    "fsdp": {"dp_shard": 2},
    "tp": {"dp_shard": 1, "tp": 2},
    "replicas": {"dp_replicate": 2, "dp_shard": 1},
}
"""Each layout a side of a test takes, by name."""


def make_model(gangs: gm.Gangs, *, train: bool) -> nn.Module:
    """The model, the same initial weights on every process: tensor parallel over tp, and
    sharded by FSDP2 over dp_shard where it trains."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, HIDDEN), nn.Linear(HIDDEN, IN))
    mesh = gangs.meshes["dp_shard_cp"]
    if gangs.tp.size > 1:
        parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "1": RowwiseParallel()})
    if train:
        fully_shard(model, mesh=mesh["dp_shard_cp"])
    return model


def shards(gangs: gm.Gangs, *, train: bool) -> dict[str, gm.TensorShards]:
    """How this side holds each weight: split by tp (columns of the first layer's weight,
    rows of the second's), and where it trains, by dp_shard inside that (FSDP2's dim 0)."""
    tp = ("tp",) if gangs.tp.size > 1 else ()
    fsdp = ("dp_shard",) if train else ()
    return {
        "0.weight": gm.TensorShards((HIDDEN, IN), "float32", {0: (*tp, *fsdp)}),
        "0.bias": gm.TensorShards((HIDDEN,), "float32", {0: (*tp, *fsdp)}),
        "1.weight": gm.TensorShards((IN, HIDDEN), "float32", {0: fsdp, 1: tp}),
        "1.bias": gm.TensorShards((IN,), "float32", {0: fsdp}),
    }


def local_shards(model: nn.Module) -> dict[str, Tensor]:
    """This process's part of each weight, sharing its storage."""
    return {
        name: (p.to_local() if isinstance(p, DTensor) else p).detach()
        for name, p in model.named_parameters()
    }


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    """One optimizer step on data of ``step`` (the same on every process)."""
    data = torch.Generator().manual_seed(step)
    x = torch.randn(4, IN, generator=data)
    model(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


@torch.no_grad()
def generate(model: nn.Module, step: int) -> float:
    """A forward pass of the generator (its own collectives: tp's all-reduce)."""
    data = torch.Generator().manual_seed(10_000 + step)
    out = model(torch.randn(4, IN, generator=data))
    return float(out.full_tensor().sum() if isinstance(out, DTensor) else out.sum())


def full_weights(model: nn.Module) -> dict[str, Tensor]:
    """Each whole weight (a collective over the trainer's meshes)."""
    return {
        name: p.full_tensor() if isinstance(p, DTensor) else p.detach()
        for name, p in model.named_parameters()
    }


def digest(tensor: Tensor) -> str:
    """The bytes of a tensor, hashed: equal digests are bit-identical tensors."""
    return hashlib.sha1(
        tensor.detach().contiguous().numpy().tobytes(), usedforsecurity=False
    ).hexdigest()
