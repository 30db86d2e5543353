"""A small transformer-like model, deterministic data and the single-process reference
that the parallel recipes compare themselves with."""

from __future__ import annotations

import logging
import math
import sys

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from gangmesh import Gang, ReduceOperation

VOCAB, DIM, SEQ, BLOCKS = 64, 32, 8, 2
STEPS, GLOBAL_BATCH, LR = 4, 8, 1e-2
RTOL = 1e-5  # float32 on CPU

log = logging.getLogger("recipe")


class Block(nn.Module):
    """Pre-norm MLP block with a residual connection."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, 4 * DIM)
        self.down = nn.Linear(4 * DIM, DIM)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class ToyModel(nn.Module):
    """Embedding, a few blocks, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits, one row per token: ``[batch * SEQ, VOCAB]``."""
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).flatten(0, 1))


def make_model(device: torch.device) -> ToyModel:
    """The same initial weights on every process."""
    torch.manual_seed(0)
    return ToyModel().to(device)


def global_batch(step: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """(inputs, targets) of the whole job at ``step``: next-token prediction."""
    generator = torch.Generator().manual_seed(1000 + step)
    tokens = torch.randint(0, VOCAB, (GLOBAL_BATCH, SEQ + 1), generator=generator)
    # Contiguous: pipeline stages check the strides of their inputs (torch 2.11 strictly).
    return tokens[:, :-1].contiguous().to(device), tokens[:, 1:].contiguous().to(device)


def local_slice(tensor: Tensor, index: int, count: int) -> Tensor:
    """The ``index``-th of ``count`` equal slices of a batch."""
    size = tensor.shape[0] // count
    return tensor[index * size : (index + 1) * size]


def loss_of(logits: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(logits, targets.reshape(-1))


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, step: int, dp: Gang) -> Tensor:
    """One optimizer step on this process's slice of the global batch of ``step``; the loss.

    The processes of one tp gang share a dp rank, hence the same slice of the batch.
    """
    inputs, targets = global_batch(step, dp.device)
    inputs = local_slice(inputs, dp.rank, dp.size)
    targets = local_slice(targets, dp.rank, dp.size)
    loss = loss_of(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach()


def train_data_parallel(model: nn.Module, dp: Gang, steps: int = STEPS) -> list[float]:
    """Train on this process's slice of each global batch; the mean loss over ``dp`` per step.

    The gradients are averaged over ``dp`` by FSDP, inside ``backward``.
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    losses = []
    for step in range(steps):
        mean = train_step(model, optimizer, step, dp).clone()
        dp.all_reduce(mean, ReduceOperation.MEAN)
        losses.append(mean.item())
    return losses


def reference_losses(device: torch.device, steps: int = STEPS) -> list[float]:
    """Losses of one process training the unsharded model on each whole global batch."""
    model = make_model(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    losses = []
    for step in range(steps):
        inputs, targets = global_batch(step, device)
        loss = loss_of(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def nan_as_inf(error: float) -> float:
    """An error as ``max`` can rank it: NaN (a broken run) counts as infinitely wrong."""
    return math.inf if math.isnan(error) else error


def compare(losses: list[float], reference: list[float], rank: int) -> None:
    """Log each step from rank 0; exit with status 1 if a loss is off by more than RTOL."""
    worst = 0.0
    for step, (got, want) in enumerate(zip(losses, reference, strict=True)):
        error = abs(got - want) / abs(want)
        worst = max(worst, nan_as_inf(error))
        if rank == 0:
            log.info(
                "step %d: loss %.6f (single process %.6f, rel. error %.1e)", step, got, want, error
            )
    if worst > RTOL:
        log.error(
            "rank %d: loss differs from the single-process run by %.1e > %.0e", rank, worst, RTOL
        )
        sys.exit(1)
    if rank == 0:
        log.info("matches the single-process run within %.0e (worst %.1e)", RTOL, worst)


def check_sharded(weight: Tensor, parts: int, rank: int) -> None:
    """Each process holds 1/parts of the weight's rows; exit with status 1 otherwise."""
    assert isinstance(weight, DTensor)
    local, full = tuple(weight.to_local().shape), tuple(weight.shape)
    expected = (full[0] // parts, *full[1:])
    if rank == 0:
        log.info("blocks[0].up.weight: local shard %s of global %s", local, full)
    if local != expected:
        log.error("rank %d: expected a local shard of shape %s, got %s", rank, expected, local)
        sys.exit(1)


def setup_logging() -> None:
    """Log the recipe's lines to stdout."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
