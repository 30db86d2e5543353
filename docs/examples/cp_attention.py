"""Context parallel: each process holds a contiguous chunk of every sequence and attends over
the whole sequence by all-gathering keys and values over gangs.cp; FSDP2 over dp_shard x cp,
tensor parallel beside it; checked against one process.

    torchrun --nproc-per-node 2 docs/examples/cp_attention.py                # CP 2
    torchrun --nproc-per-node 4 docs/examples/cp_attention.py                # CP 2 x DP 2
    torchrun --nproc-per-node 4 docs/examples/cp_attention.py --tp 2         # CP 2 x TP 2
    torchrun --nproc-per-node 8 docs/examples/cp_attention.py --tp 2         # CP 2 x TP 2 x DP 2
    torchrun --nproc-per-node 8 docs/examples/cp_attention.py --dp-replicate 2 --tp 2   # HSDP
    python docs/examples/cp_attention.py --cp 1                              # one process

Each process trains on one ``SEQ / cp`` chunk (cp rank ``r`` holds positions ``r * SEQ / cp``
onwards) of the sequences of its data slice (``dp = dp_replicate x dp_shard`` slices; the
cp and tp peers of a process share its slice). Its queries are its own tokens; its keys and
values are those of the whole sequence, gathered over ``gangs.cp`` in rank order, so a causal
mask over global positions makes attention exactly that of one process.

Gradients: the loss of a process is the mean over its tokens, and every process holds as many
tokens, so the single-process loss is the mean of the losses of the ``dp x cp`` processes
that hold distinct tokens. The backward of the gather is a reduce-scatter with SUM: the keys
and values of a chunk get the gradients of every peer's loss. Summed over the processes, the
parameter gradients are then the gradient of the sum of their losses, and FSDP2, which
averages over the ``dp_replicate x dp_shard x cp`` processes it shards over, leaves the
gradient of their mean: that of one process. No divide factor to set.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from toy_model import (
    DIM,
    GLOBAL_BATCH,
    LR,
    RTOL,
    SEQ,
    STEPS,
    VOCAB,
    Block,
    global_batch,
    local_slice,
    log,
    loss_of,
    nan_as_inf,
    setup_logging,
)

import gangmesh as gm

HEADS, BLOCKS = 4, 2
HEAD_DIM = DIM // HEADS
# Heads split over tp: queries, keys and values by output features, the output projection
# by input features; the MLP as in tp_fsdp.py.
BLOCK_PLAN = {
    "attention.q": ColwiseParallel(),
    "attention.k": ColwiseParallel(),
    "attention.v": ColwiseParallel(),
    "attention.out": RowwiseParallel(),
    "mlp.up": ColwiseParallel(),
    "mlp.down": RowwiseParallel(),
}


def fsdp_and_tp_meshes(gangs: gm.Gangs) -> tuple[DeviceMesh, DeviceMesh]:
    """The mesh FSDP2 replicates over (dp_replicate) and shards over (dp_shard x cp), and the
    tensor-parallel mesh: slices of one root mesh, as FSDP2 requires of the two."""
    mesh = gangs.meshes["dp_shard_cp"]  # pp, dp_replicate, dp_shard_cp, tp
    return mesh["dp_replicate", "dp_shard_cp"], mesh["tp"]


class _GatherSequence(torch.autograd.Function):
    """The chunks of every peer of a gang, joined along the sequence (dim -2) in rank order;
    backward sums the gradients of each chunk over the peers and hands each its own."""

    @staticmethod
    def forward(ctx: Any, chunk: Tensor, gang: gm.Gang) -> Tensor:
        ctx.gang = gang
        moved = chunk.movedim(-2, 0).contiguous()
        whole = moved.new_empty(gang.size * moved.shape[0], *moved.shape[1:])
        gang.all_gather(whole, moved)
        return whole.movedim(0, -2)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        gang: gm.Gang = ctx.gang
        moved = grad.movedim(-2, 0).contiguous()
        chunk = moved.new_empty(moved.shape[0] // gang.size, *moved.shape[1:])
        gang.reduce_scatter(chunk, moved, gm.ReduceOperation.SUM)
        return chunk.movedim(0, -2), None


def gather_sequence(chunk: Tensor, cp: gm.Gang) -> Tensor:
    """The ``[..., length, dim]`` chunks of the cp peers as one ``[..., cp * length, dim]``."""
    whole: Tensor = _GatherSequence.apply(chunk, cp)
    return whole


class Attention(nn.Module):
    """Causal multi-head self-attention of a chunk of the sequence over the whole of it."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.v, self.out = nn.Linear(DIM, DIM), nn.Linear(DIM, DIM), nn.Linear(DIM, DIM)
        # No key bias: it adds the same score to every key of a query, which softmax ignores
        # (its gradient is zero).
        self.k = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x: Tensor, positions: Tensor, cp: gm.Gang | None) -> Tensor:
        batch, length, _ = x.shape

        def heads(t: Tensor) -> Tensor:  # the heads this process holds: all, or 1/tp of them
            return t.view(batch, length, -1, HEAD_DIM).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        if cp is not None:  # one collective for both
            k, v = gather_sequence(torch.stack([k, v]), cp).unbind(0)
        # Chunks are contiguous and gathered in rank order: key j sits at position j.
        keys = torch.arange(k.shape[-2], device=x.device)
        visible = positions[:, None] >= keys[None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)
        return self.out(y.transpose(1, 2).reshape(batch, length, -1))


class AttentionBlock(nn.Module):
    """Pre-norm attention with a residual connection, then the toy model's MLP block."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.attention = Attention()
        self.mlp = Block()

    def forward(self, x: Tensor, positions: Tensor, cp: gm.Gang | None) -> Tensor:
        return self.mlp(x + self.attention(self.norm(x), positions, cp))


class CausalLM(nn.Module):
    """Token and learned position embeddings, attention blocks, a head. With ``cp`` set,
    ``tokens`` are this process's chunk of each sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.position = nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(AttentionBlock() for _ in range(BLOCKS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)
        self.cp: gm.Gang | None = None

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits, one row per token: ``[batch * length, VOCAB]``."""
        length = tokens.shape[1]
        first = self.cp.rank * length if self.cp is not None else 0
        positions = torch.arange(first, first + length, device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x, positions, self.cp)
        return self.head(self.norm(x).flatten(0, 1))


def make_model(device: torch.device) -> CausalLM:
    """The same initial weights on every process."""
    torch.manual_seed(0)
    return CausalLM().to(device)


def parallelize(model: CausalLM, gangs: gm.Gangs) -> None:
    """Sequence chunks over cp, heads and MLP features over tp, FSDP2 over the data dims and cp."""
    fsdp_mesh, tp_mesh = fsdp_and_tp_meshes(gangs)
    model.cp = gangs.cp
    for block in model.blocks:
        if gangs.tp.size > 1:
            parallelize_module(block, tp_mesh, BLOCK_PLAN)
        fully_shard(block, mesh=fsdp_mesh)
    fully_shard(model, mesh=fsdp_mesh)


@dataclass
class Run:
    """What a training run leaves to compare: the loss per step, the gradients of the first
    step, the final weights, and the time of the steps after the first (which warms up)."""

    losses: list[float] = field(default_factory=list)
    first_grads: dict[str, Tensor] = field(default_factory=dict)
    weights: dict[str, Tensor] = field(default_factory=dict)
    seconds: float = 0.0


def full_tensors(model: nn.Module, grads: bool = False) -> dict[str, Tensor]:
    """Every parameter (or its gradient) whole, on every process."""
    out = {}
    for name, parameter in model.named_parameters():
        tensor = parameter.grad if grads else parameter
        assert tensor is not None, name
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        out[name] = tensor.detach().clone()
    return out


def train(model: CausalLM, gangs: gm.Gangs | None, device: torch.device) -> Run:
    """Train on this process's chunk of its slice of each global batch (the whole batch
    without gangs); the mean loss over the processes holding distinct tokens per step."""
    run, optimizer = Run(), torch.optim.AdamW(model.parameters(), lr=LR)
    for step in range(STEPS):
        start = time.perf_counter()
        inputs, targets = global_batch(step, device)
        if gangs is not None:
            dp, cp = gangs.dp, gangs.cp
            inputs = local_slice(inputs, dp.rank, dp.size).chunk(cp.size, dim=1)[cp.rank]
            targets = local_slice(targets, dp.rank, dp.size).chunk(cp.size, dim=1)[cp.rank]
        loss = loss_of(model(inputs), targets)
        loss.backward()
        seconds = time.perf_counter() - start
        if step == 0:  # untimed
            run.first_grads = full_tensors(model, grads=True)
        start = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        if gangs is not None:
            gangs.dp.all_reduce(mean, gm.ReduceOperation.MEAN)
            gangs.cp.all_reduce(mean, gm.ReduceOperation.MEAN)
        run.losses.append(mean.item())
        if step > 0:
            run.seconds += seconds + time.perf_counter() - start
    run.weights = full_tensors(model)
    return run


def relative_error(got: Tensor, want: Tensor) -> float:
    return float((got - want).norm() / want.norm())


def compare(run: Run, reference: Run, rank: int) -> None:
    """Log from rank 0; exit with status 1 on any process that differs by more than RTOL."""
    worst = 0.0
    for step, (got, want) in enumerate(zip(run.losses, reference.losses, strict=True)):
        error = abs(got - want) / abs(want)
        worst = max(worst, nan_as_inf(error))
        if rank == 0:
            log.info(
                "step %d: loss %.6f (single process %.6f, rel. error %.1e)", step, got, want, error
            )
    for what, got_all, want_all in (
        ("gradients of step 0", run.first_grads, reference.first_grads),
        ("parameters after the last step", run.weights, reference.weights),
    ):
        errors = {name: relative_error(got_all[name], want_all[name]) for name in want_all}
        name = max(errors, key=errors.__getitem__)
        worst = max(worst, nan_as_inf(errors[name]))
        if rank == 0:
            log.info("%s: worst rel. error %.1e (%s)", what, errors[name], name)
    per_step, reference_per_step = run.seconds / (STEPS - 1), reference.seconds / (STEPS - 1)
    if rank == 0:
        log.info(
            "time per step: %.1f ms (single process %.1f ms, ratio %.2f)",
            1e3 * per_step,
            1e3 * reference_per_step,
            per_step / reference_per_step,
        )
    if worst > RTOL:
        log.error("rank %d: differs from the single-process run by %.1e > %.0e", rank, worst, RTOL)
        sys.exit(1)
    if rank == 0:
        log.info("matches the single-process run within %.0e (worst %.1e)", RTOL, worst)


def check_sharded(model: CausalLM, gangs: gm.Gangs) -> None:
    """``attention.q`` rows are split by tp, then by dp_shard x cp; exit with status 1 otherwise."""
    weight = model.blocks[0].attention.q.weight
    assert isinstance(weight, DTensor)
    local, full = tuple(weight.to_local().shape), tuple(weight.shape)
    expected = (full[0] // (gangs.tp.size * gangs.sdp.size * gangs.cp.size), full[1])
    if gangs.root.rank == 0:
        log.info("blocks[0].attention.q.weight: local shard %s of global %s", local, full)
    if local != expected:
        log.error("rank %d: expected a local shard of %s, got %s", gangs.root.rank, expected, local)
        sys.exit(1)


def check_sizes(gangs: gm.Gangs) -> None:
    """Exit with status 2 if the model or the data does not split evenly over the gangs."""
    for size, whole, what in (
        (gangs.dp.size, GLOBAL_BATCH, "sequences of a batch (dp)"),
        (gangs.cp.size, SEQ, "positions of a sequence (cp)"),
        (gangs.tp.size, HEADS, "attention heads (tp)"),
    ):
        if whole % size:
            log.error("%d %s do not split in %d equal parts", whole, what, size)
            sys.exit(2)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dp-replicate", type=int, default=1, metavar="N", help="HSDP replicas")
    parser.add_argument("--cp", type=int, default=2, metavar="N", help="context parallel size")
    parser.add_argument("--tp", type=int, default=1, metavar="N", help="tensor parallel size")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    setup_logging()
    # Said of DTensors sharded over FSDP and tp: gathering them whole takes two all_gathers.
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    root = gm.setup_root_gang()
    gangs = gm.create_gangs(
        root, dp_replicate=args.dp_replicate, dp_shard=-1, cp=args.cp, tp=args.tp
    )
    check_sizes(gangs)
    if root.rank == 0:
        log.info(
            "CP %d x TP %d x DP_SHARD %d x DP_REPLICATE %d on %d %s, %d positions per process: %s",
            gangs.cp.size,
            gangs.tp.size,
            gangs.sdp.size,
            gangs.rdp.size,
            root.size,
            "process" if root.size == 1 else "processes",
            SEQ // gangs.cp.size,
            gangs,
        )
    model = make_model(root.device)
    parallelize(model, gangs)
    check_sharded(model, gangs)
    run = train(model, gangs, root.device)
    # Rank 0 trains the single-process reference alone, while the others wait, so that its
    # time per step is that of a job of one process; then the others train theirs.
    if root.rank != 0:
        root.barrier()
    reference = train(make_model(root.device), None, root.device)
    if root.rank == 0:
        root.barrier()
    compare(run, reference, root.rank)


if __name__ == "__main__":
    main()
