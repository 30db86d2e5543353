"""Mixture of experts: tokens dispatched over gangs.ep with all_to_all, experts sharded over
the expert mesh, dense layers over the dense mesh; checked against one process.

    torchrun --nproc-per-node 4 docs/examples/moe_ep.py --ep 1            # every expert local
    torchrun --nproc-per-node 4 docs/examples/moe_ep.py --tp 2 --ep 1
    torchrun --nproc-per-node 4 docs/examples/moe_ep.py --ep 2
    torchrun --nproc-per-node 4 docs/examples/moe_ep.py --ep 4
    torchrun --nproc-per-node 8 docs/examples/moe_ep.py --dp-replicate 2 --ep 2
    torchrun --nproc-per-node 8 docs/examples/moe_ep.py --tp 2 --ep 4            # etp = 1
    torchrun --nproc-per-node 8 docs/examples/moe_ep.py --tp 2 --etp 2 --ep 2

Each process trains on its own slice of every global batch: there are ``dp = dp_replicate x
dp_shard`` slices, and the processes of one tp gang share a slice. The loss of one process is
the mean over its slice, so the single-process gradient is the mean over the ``dp`` slices of
their gradients.

Dense weights are sharded by FSDP over ``meshes["dp_shard_cp"]["dp_replicate",
"dp_shard_cp"]``, the ``dp`` processes that hold distinct slices; FSDP's mean over them is
the single-process gradient.

Expert weights are not. Expert ``e`` lives on one rank of each ep gang, and the backward
all_to_all brings it the gradient of every token routed to it by *any* rank of that gang.
The tokens of each slice go through exactly one copy of the expert (with ``etp = 1`` and
``tp > 1`` the tp ranks of a slice hold the same tokens, and each of them dispatches a
distinct part, so no token is counted twice; at ``ep = 1`` too). The copies of an expert, ``edp =
dp_replicate x efsdp`` of them, are the processes FSDP reduces over (``expert_mesh
["dp_replicate", "efsdp"]``), and the sum of their gradients is the sum over all ``dp`` slices.
FSDP divides that sum by ``edp``, which gives ``dp / edp`` times the mean (``ep`` times
with ``etp = tp``), so the recipe scales expert gradients by ``edp / dp`` after each
backward. (``set_gradient_divide_factor(dp)`` says the same to FSDP, but becomes a
pre-multiplied sum that gloo lacks, and whether FSDP runs it on a shard group of one
process depends on the torch release.)

AdamW hardly sees a gradient that is off by a constant factor (it divides by the gradient's
own scale), so the recipe compares the gradients of the first step with one process as
well as the losses and the final weights.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
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

EXPERTS, TOP_K, EXPERT_HIDDEN = 8, 2, 2 * DIM
STEPS = 5
DENSE_PLAN = {"up": ColwiseParallel(), "down": RowwiseParallel()}


# Autograd across gangs. Each forward collective has the backward collective that carries
# the gradients the other way, so autograd flows through the dispatch.


class _AllToAll(torch.autograd.Function):
    """Rows to the peers of a gang: forward with the given split sizes, backward swapped."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, gang: gm.Gang, output_splits: list[int], input_splits: list[int]
    ) -> Tensor:
        ctx.gang, ctx.output_splits, ctx.input_splits = gang, output_splits, input_splits
        out = x.new_empty(sum(output_splits), *x.shape[1:])
        gang.all_to_all(out, x.contiguous(), output_splits, input_splits)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        grad_in = grad.new_empty(sum(ctx.input_splits), *grad.shape[1:])
        ctx.gang.all_to_all(grad_in, grad.contiguous(), ctx.input_splits, ctx.output_splits)
        return grad_in, None, None, None


def all_to_all(
    x: Tensor, gang: gm.Gang, output_splits: list[int], input_splits: list[int]
) -> Tensor:
    """Send ``input_splits[d]`` rows of ``x`` to gang rank ``d``; what the peers sent, in rank
    order (``output_splits[s]`` rows from rank ``s``)."""
    out: Tensor = _AllToAll.apply(x, gang, output_splits, input_splits)
    return out


class _SumOverGang(torch.autograd.Function):
    """Sum of partial results over a gang; the gradient of the sum is the same everywhere."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, gang: gm.Gang) -> Tensor:
        out = x.clone()
        if out.numel():  # the peers of a gang hold the same number of rows
            gang.all_reduce(out, gm.ReduceOperation.SUM)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        return grad, None


class _SameOverGang(torch.autograd.Function):
    """The same input on every peer of a gang, each using part of it: sum the gradients."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, gang: gm.Gang) -> Tensor:
        ctx.gang = gang
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        grad = grad.clone()
        if grad.numel():
            ctx.gang.all_reduce(grad, gm.ReduceOperation.SUM)
        return grad, None


class _PartOfGang(torch.autograd.Function):
    """This peer's slice of rows that the whole gang holds; backward gathers the slices."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, gang: gm.Gang) -> Tensor:
        ctx.gang = gang
        return local_slice(x, gang.rank, gang.size).clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        return gather(ctx.gang, grad.contiguous(), 0), None


class _WholeOfGang(torch.autograd.Function):
    """The rows of every peer, in rank order; backward keeps this peer's slice."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, gang: gm.Gang) -> Tensor:
        ctx.gang = gang
        return gather(gang, x.contiguous(), 0)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        # Whatever follows runs alike on every peer, so each holds the whole gradient.
        return local_slice(grad, ctx.gang.rank, ctx.gang.size).clone(), None


def gather(gang: gm.Gang, tensor: Tensor, dim: int) -> Tensor:
    """The tensors of every peer of ``gang``, concatenated along ``dim`` in rank order."""
    if gang.size == 1:
        return tensor
    moved = tensor.movedim(dim, 0).contiguous()
    out = moved.new_empty(gang.size * moved.shape[0], *moved.shape[1:])
    gang.all_gather(out, moved)
    return out.movedim(0, dim)


# The model.


class ExpertBank(nn.Module):
    """Feed-forward experts, stacked: ``up`` is ``[experts, DIM, hidden]``, ``down`` is
    ``[experts, hidden, DIM]``. A bank may keep a slice: some experts, part of the hidden
    features; then ``etp`` is the gang that holds the other parts of the hidden features."""

    def __init__(self, experts: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Parameter(torch.randn(experts, DIM, hidden) * DIM**-0.5)
        self.down = nn.Parameter(torch.randn(experts, hidden, DIM) * hidden**-0.5)
        self.etp: gm.Gang | None = None

    def keep(self, ep: gm.Gang, etp: gm.Gang) -> None:
        """Keep the experts of ep rank ``ep.rank`` and the hidden features of ``etp.rank``."""
        count, hidden = self.up.shape[0] // ep.size, self.up.shape[2] // etp.size
        experts = slice(ep.rank * count, (ep.rank + 1) * count)
        features = slice(etp.rank * hidden, (etp.rank + 1) * hidden)
        self.up = nn.Parameter(self.up.detach()[experts, :, features].clone())
        self.down = nn.Parameter(self.down.detach()[experts, features, :].clone())
        self.etp = etp if etp.size > 1 else None

    def forward(self, x: Tensor, counts: Sequence[int]) -> Tensor:
        """Rows of ``x`` grouped by expert, ``counts[j]`` rows for local expert ``j``."""
        if self.etp is not None:
            x = _SameOverGang.apply(x, self.etp)
        # Every expert runs, even on no rows, so that each weight gets a gradient.
        rows = x.split(list(counts))
        y = torch.cat([F.gelu(r @ self.up[j]) @ self.down[j] for j, r in enumerate(rows)])
        if self.etp is not None:  # each peer has summed over its part of the hidden features
            y = _SumOverGang.apply(y, self.etp)
        return y


Dispatch = Callable[[Tensor, Tensor, Tensor, ExpertBank], Tensor]


def dispatch_in_process(h: Tensor, weights: Tensor, chosen: Tensor, experts: ExpertBank) -> Tensor:
    """One process, every expert: for each expert, the tokens that chose it."""
    y = torch.zeros_like(h)
    for e in range(experts.up.shape[0]):
        rows, slot = (chosen == e).nonzero(as_tuple=True)
        out = F.gelu(h[rows] @ experts.up[e]) @ experts.down[e]
        y = y.index_add(0, rows, out * weights[rows, slot, None])
    return y


class MoEBlock(nn.Module):
    """Pre-norm mixture of experts: a router picks each token's top-2 experts, their outputs
    are mixed with the softmax of the two router scores; a residual connection."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.router = nn.Linear(DIM, EXPERTS, bias=False)
        self.experts = ExpertBank(EXPERTS, EXPERT_HIDDEN)
        self.dispatch: Dispatch = dispatch_in_process

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm(x).flatten(0, 1)
        scores, chosen = self.router(h).topk(TOP_K, dim=-1)
        y = self.dispatch(h, scores.softmax(dim=-1), chosen, self.experts)
        return x + y.view_as(x)


class MoEModel(nn.Module):
    """Embedding, a dense block, a mixture-of-experts block, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.dense = Block()
        self.moe = MoEBlock()
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits, one row per token: ``[batch * SEQ, VOCAB]``."""
        x = self.moe(self.dense(self.embed(tokens)))
        return self.head(self.norm(x).flatten(0, 1))


def make_model() -> MoEModel:
    """The same initial weights on every process."""
    torch.manual_seed(0)
    return MoEModel()


# Expert parallelism.


class ExpertParallel:
    """The dispatch of MoEBlock over ``gangs.ep``: each token goes to the ep ranks that hold
    its two experts, and their outputs come back to it, mixed by the router's weights."""

    def __init__(self, gangs: gm.Gangs) -> None:
        self.ep = gangs.ep
        # With etp = 1 the ep gang borrows the tp ranks, which hold the same tokens: each of
        # them dispatches its own slice, so every token reaches its experts once.
        split = gangs.etp.size == 1 and gangs.tp.size > 1
        self.tokens: gm.Gang | None = gangs.tp if split else None

    def __call__(self, h: Tensor, weights: Tensor, chosen: Tensor, experts: ExpertBank) -> Tensor:
        if self.tokens is not None:
            h = _PartOfGang.apply(h, self.tokens)
            weights = _PartOfGang.apply(weights, self.tokens)
            chosen = local_slice(chosen, self.tokens.rank, self.tokens.size)
        y = self.exchange(h, weights, chosen, experts)
        if self.tokens is not None:
            y = _WholeOfGang.apply(y, self.tokens)
        return y

    def exchange(self, h: Tensor, weights: Tensor, chosen: Tensor, experts: ExpertBank) -> Tensor:
        """Two all_to_alls over the ep gang, the local experts between them."""
        ep, local = self.ep, experts.up.shape[0]
        # Sort the (token, expert) pairs by expert: expert e lives on ep rank e // local.
        expert_of = chosen.reshape(-1)
        order = torch.argsort(expert_of, stable=True)
        token_of = order // TOP_K
        sent_per_expert = torch.bincount(expert_of, minlength=local * ep.size)
        # Even all_to_all of the counts: from each peer, how many rows for each local expert.
        received_per_expert = torch.empty_like(sent_per_expert)
        ep.all_to_all(received_per_expert, sent_per_expert)
        received = received_per_expert.view(ep.size, local)  # [peer, local expert]
        send_splits = sent_per_expert.view(ep.size, local).sum(dim=1).tolist()
        receive_splits = received.sum(dim=1).tolist()

        rows = all_to_all(h[token_of], ep, receive_splits, send_splits)
        # Rows arrive by peer, then by expert; the experts want them by expert.
        expert_of_row = (
            torch.arange(local, device=h.device)
            .repeat(ep.size)
            .repeat_interleave(received.flatten())
        )
        by_expert = torch.argsort(expert_of_row, stable=True)
        out = torch.empty_like(rows).index_copy(
            0, by_expert, experts(rows[by_expert], received.sum(dim=0).tolist())
        )
        back = all_to_all(out, ep, send_splits, receive_splits)

        mixed = back * weights.reshape(-1)[order, None]
        return torch.zeros_like(h).index_add(0, token_of, mixed)


# Training and checking.


def shard(model: MoEModel, gangs: gm.Gangs) -> None:
    """Experts over the expert mesh (efsdp, replicated over dp_replicate), the rest over dp,
    the dense block tensor parallel when tp > 1."""
    mesh = gangs.meshes["dp_shard_cp"]  # FSDP2 and tensor parallelism slice one root mesh
    dense_mesh = mesh["dp_replicate", "dp_shard_cp"]
    if gangs.tp.size > 1:
        parallelize_module(model.dense, mesh["tp"], DENSE_PLAN)
    model.moe.experts.keep(gangs.ep, gangs.etp)
    model.moe.dispatch = ExpertParallel(gangs)
    expert_mesh = gangs.meshes["expert"]["dp_replicate", "efsdp"]
    fully_shard(model.moe.experts, mesh=expert_mesh)
    fully_shard(model.dense, mesh=dense_mesh)
    fully_shard(model, mesh=dense_mesh)


def expert_gradients_to_mean(model: MoEModel, gangs: gm.Gangs) -> None:
    """FSDP averaged each expert gradient over its edp copies; make it the mean over the dp
    slices (see above)."""
    factor = gangs.edp.size / gangs.dp.size
    if factor != 1:
        for parameter in model.moe.experts.parameters():
            if parameter.grad is not None:
                parameter.grad.mul_(factor)


def full_tensors(model: MoEModel, gangs: gm.Gangs, grads: bool = False) -> dict[str, Tensor]:
    """Every parameter (or its gradient) whole, on every process: FSDP and dense tensor
    parallel shards gathered, experts gathered over etp (hidden features) and ep."""
    # Said of DTensors sharded over dp and tp: gathering them takes two all_gathers. Once, here.
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    out = {}
    for name, parameter in model.named_parameters():
        tensor = parameter.grad if grads else parameter
        assert tensor is not None, name
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        tensor = tensor.detach()
        if name.startswith("moe.experts."):
            tensor = gather(gangs.etp, tensor, 2 if name.endswith("up") else 1)
            tensor = gather(gangs.ep, tensor, 0)
        out[name] = tensor
    return out


@dataclass
class Run:
    """What a training run leaves to compare: the loss per step, the gradients of the
    first step, the final weights, and the time of the steps after the first (which warms
    up)."""

    losses: list[float] = field(default_factory=list)
    first_grads: dict[str, Tensor] = field(default_factory=dict)
    weights: dict[str, Tensor] = field(default_factory=dict)
    seconds: float = 0.0


def train_parallel(model: MoEModel, gangs: gm.Gangs) -> Run:
    """Train on this process's slice of each global batch."""
    run, optimizer, dp = Run(), torch.optim.AdamW(model.parameters(), lr=LR), gangs.dp
    for step in range(STEPS):
        start = time.perf_counter()
        inputs, targets = global_batch(step, dp.device)
        inputs = local_slice(inputs, dp.rank, dp.size)
        targets = local_slice(targets, dp.rank, dp.size)
        loss = loss_of(model(inputs), targets)
        loss.backward()
        expert_gradients_to_mean(model, gangs)
        seconds = time.perf_counter() - start
        if step == 0:  # untimed
            run.first_grads = full_tensors(model, gangs, grads=True)
        start = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        dp.all_reduce(mean, gm.ReduceOperation.MEAN)
        run.losses.append(mean.item())
        if step > 0:
            run.seconds += seconds + time.perf_counter() - start
    run.weights = full_tensors(model, gangs)
    return run


def train_one_process(device: torch.device) -> Run:
    """One process, the whole model, each whole global batch."""
    model = make_model().to(device)
    run, optimizer = Run(), torch.optim.AdamW(model.parameters(), lr=LR)
    for step in range(STEPS):
        start = time.perf_counter()
        inputs, targets = global_batch(step, device)
        loss = loss_of(model(inputs), targets)
        loss.backward()
        if step == 0:
            run.first_grads = {
                n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
            }
        optimizer.step()
        optimizer.zero_grad()
        run.losses.append(loss.item())
        if step > 0:
            run.seconds += time.perf_counter() - start
    run.weights = {name: p.detach().clone() for name, p in model.named_parameters()}
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
        if got_all.keys() != want_all.keys():
            log.error("rank %d: %s: names differ from the single process", rank, what)
            sys.exit(1)
        errors = {name: relative_error(got_all[name], want_all[name]) for name in want_all}
        name = max(errors, key=errors.__getitem__)
        worst = max(worst, nan_as_inf(errors[name]))
        if rank == 0:
            log.info("%s: worst rel. error %.1e (%s)", what, errors[name], name)
        if errors[name] > RTOL:
            log.error("rank %d: %s: %s off by %.1e > %.0e", rank, what, name, errors[name], RTOL)
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


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for flag in ("--ep", "--etp", "--tp", "--dp-replicate"):
        parser.add_argument(flag, type=int, default=1, metavar="N")
    return parser.parse_args()


def check_sizes(gangs: gm.Gangs) -> None:
    """Exit with status 2 if the model or the data does not split evenly over the gangs."""
    tokens = SEQ * GLOBAL_BATCH // gangs.dp.size
    for size, whole, what in (
        (gangs.ep.size, EXPERTS, "experts (ep)"),
        (gangs.etp.size, EXPERT_HIDDEN, "hidden features of an expert (etp)"),
        (gangs.dp.size, GLOBAL_BATCH, "sequences of a batch (dp)"),
        (gangs.tp.size, tokens, "tokens of a data slice (tp)"),
    ):
        if whole % size:
            log.error("%d %s do not split in %d equal parts", whole, what, size)
            sys.exit(2)


def main() -> None:
    args = parse_args()
    setup_logging()
    root = gm.setup_root_gang()
    # expert=True: the expert gangs and meshes at ep = 1 too, where no dense gang holds efsdp.
    gangs = gm.create_gangs(
        root, dp_replicate=args.dp_replicate, dp_shard=-1, tp=args.tp, ep=args.ep, etp=args.etp,
        expert=True,
    )  # fmt: skip
    check_sizes(gangs)
    if root.rank == 0:
        log.info(
            "MoE: %d experts, EP %d x EFSDP %d x ETP %d, dense TP %d x DP %d on %d processes: %s",
            EXPERTS,
            gangs.ep.size,
            gangs.efsdp.size,
            gangs.etp.size,
            gangs.tp.size,
            gangs.dp.size,
            root.size,
            gangs,
        )
    model = make_model().to(root.device)
    shard(model, gangs)
    run = train_parallel(model, gangs)
    # Rank 0 trains the single-process reference alone, while the others wait, so that its
    # time per step is that of a job of one process; then the others train theirs.
    if root.rank != 0:
        root.barrier()
    reference = train_one_process(root.device)
    if root.rank == 0:
        root.barrier()
    compare(run, reference, root.rank)


if __name__ == "__main__":
    main()
