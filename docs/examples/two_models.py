"""Two models in one job: a trainer (FSDP 2 x TP 2 on ranks 0-3) and a generator (2 replicas
x TP 2 on ranks 4-7), each on its own part of the world, joined by bridges. Checked against one
process running the same algorithm.

torchrun --nproc-per-node 8 docs/examples/two_models.py

Every step the generator answers this step's prompts with its current weights (forward only,
greedy); the samples cross to the trainer, which takes an optimizer step towards them; the
trainer's new weights cross back, from its FSDP x TP shards to the generator's TP shards.
"""

from __future__ import annotations

import sys

import torch
from torch import Tensor, nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from toy_model import LR, global_batch, local_slice, log, loss_of, make_model, setup_logging

import gangmesh as gm

STEPS, RTOL = 3, 1e-5
TRAINER = {"dp_shard": 2, "tp": 2}
GENERATOR = {"dp_replicate": 2, "dp_shard": 1, "tp": 2}
BLOCK_PLAN = {"up": ColwiseParallel(), "down": RowwiseParallel()}


def sharded_model(gangs: gm.Gangs, *, fsdp: bool) -> nn.Module:
    """The model with its blocks split over tp, and sharded over dp_shard for training."""
    model = make_model(gangs.device)
    mesh = gangs.meshes["dp_shard_cp"]
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], BLOCK_PLAN)
        if fsdp:
            fully_shard(block, mesh=mesh["dp_shard_cp"])
    if fsdp:
        fully_shard(model, mesh=mesh["dp_shard_cp"])
    return model


@torch.no_grad()
def generate(model: nn.Module, prompts: Tensor) -> Tensor:
    """One greedy answer token per prompt token: the samples of this step."""
    return model(prompts).argmax(-1).reshape(prompts.shape)


def train(
    model: nn.Module, optimizer: torch.optim.Optimizer, prompts: Tensor, samples: Tensor
) -> Tensor:
    """One optimizer step towards the samples; the loss before it."""
    loss = loss_of(model(prompts), samples)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.detach()


def tp_shards(model: nn.Module) -> list[Tensor]:
    """Each weight as the generator holds it: gathered over the trainer's dp_shard dimension,
    still split over tp (DTensor's public redistribute)."""
    shards = []
    for param in model.parameters():
        assert isinstance(param, DTensor)
        names = param.device_mesh.mesh_dim_names or ()
        placements = [
            Replicate() if name == "dp_shard_cp" else p
            for name, p in zip(names, param.placements, strict=True)
        ]
        shards.append(param.redistribute(param.device_mesh, placements).to_local())
    return shards


def local_weights(model: nn.Module) -> list[Tensor]:
    """The generator's own part of each weight, which the trainer's shards overwrite."""
    return [p.to_local() if isinstance(p, DTensor) else p for p in model.parameters()]


def reference(device: torch.device) -> tuple[list[float], list[Tensor]]:
    """The same algorithm in one process: the loss and the samples of each step."""
    model = make_model(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    losses, samples = [], []
    for step in range(STEPS):
        prompts = global_batch(step, device)[0]
        samples.append(generate(model, prompts))
        losses.append(train(model, optimizer, prompts, samples[-1]).item())
    return losses, samples


def main() -> None:
    setup_logging()
    root = gm.setup_root_gang()
    if root.size != 8:
        sys.exit("two_models.py runs on 8 processes: torchrun --nproc-per-node 8 ...")
    parts = gm.create_parts(root, trainer=4, generator=4)
    layout = TRAINER if parts.name == "trainer" else GENERATOR
    gangs = gm.create_gangs(parts.root, **layout)
    if root.rank == 0:
        log.info("%s", parts)
    layouts = {"trainer": TRAINER, "generator": GENERATOR}
    # Samples: generator replica d (its tp rank 0) to the trainer processes of dp rank d.
    sample_routes = parts.pair_by_coordinate("dp", layouts, where={"generator": {"tp": 0}})
    sample_bridges = [parts.bridge(**route) for route in sample_routes]
    # Weights: the trainer's dp_shard rank 0 of tp rank t to every generator process of tp rank t.
    weight_routes = parts.pair_by_coordinate("tp", layouts, where={"trainer": {"dp_shard": 0}})
    weight_bridges = [parts.bridge(**route) for route in weight_routes]

    training = parts.name == "trainer"
    model = sharded_model(gangs, fsdp=training)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR) if training else None
    losses, answers = [], []
    for step in range(STEPS):
        prompts = local_slice(global_batch(step, root.device)[0], gangs.dp.rank, gangs.dp.size)
        samples = generate(model, prompts) if not training else torch.empty_like(prompts)
        answers.append(samples)
        for route, bridge in zip(sample_routes, sample_bridges, strict=True):
            if bridge is not None:
                bridge.broadcast(samples, bridge.global_ranks.index(route["generator"][0]))
        if training:
            loss = train(model, optimizer, prompts, samples)
            gangs.dp.all_reduce(loss, gm.ReduceOperation.MEAN)
            losses.append(loss.item())
        # The trainer's new weights: every trainer process gathers its shards over dp_shard.
        with torch.no_grad():
            weights = tp_shards(model) if training else local_weights(model)
            for route, bridge in zip(weight_routes, weight_bridges, strict=True):
                if bridge is not None:
                    for weight in weights:
                        bridge.broadcast(weight, bridge.global_ranks.index(route["trainer"][0]))

    # The trainer's losses, and the generator's samples (made with the weights it was sent).
    want_losses, want_samples = reference(root.device)
    if training:
        errors = [
            abs(got - want) / abs(want) for got, want in zip(losses, want_losses, strict=True)
        ]
    else:
        errors = [
            float(not torch.equal(got, local_slice(want, gangs.dp.rank, gangs.dp.size)))
            for got, want in zip(answers, want_samples, strict=True)
        ]
    worst = torch.tensor([max(errors)])
    root.all_reduce(worst, gm.ReduceOperation.MAX)
    if root.rank == 0:
        for step, (got, want) in enumerate(zip(losses, want_losses, strict=True)):
            log.info("step %d: trainer loss %.6f (single process %.6f)", step, got, want)
    if worst.item() > RTOL:
        log.error(
            "rank %d: differs from the single-process run by %.1e > %.0e",
            root.rank,
            worst.item(),
            RTOL,
        )
        sys.exit(1)
    if root.rank == 0:
        log.info("matches the single-process run within %.0e (worst %.1e)", RTOL, worst.item())
    gangs.close()
    parts.close()


if __name__ == "__main__":
    main()
