"""An RL loop of two jobs launched apart: a trainer (FSDP2 over 2 processes) and a generator
(tensor parallel over 2), each its own torchrun, joined at a join server.

    gangmesh join-server --port 29600 &
    torchrun --nproc-per-node 2 --master-port 29500 docs/examples/rl_jobs.py trainer 127.0.0.1:29600
    torchrun --nproc-per-node 2 --master-port 29501 --max-restarts 1 \\
        docs/examples/rl_jobs.py generator 127.0.0.1:29600 [--kill-at STEP]

Every step the generator takes the trainer's newest weights (a push from the trainer's FSDP2
shards to the generator's tp shards, versioned by the trainer's step), answers the step's
prompts with them (greedy) and sends its rollouts to the trainer over a bridge; the trainer
takes an optimizer step on them and pushes its new weights. With ``--kill-at STEP`` the
generator's rank 1 is killed as it takes the weights of that step, in torchrun's first attempt:
the trainer names it, trains on (on the last rollouts it got), and the generator, restarted by
torchrun, meets it again in the next epoch with the trainer's current weights.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta

import torch
from torch import Tensor, nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from toy_model import BLOCKS, LR, global_batch, log, loss_of, make_model, setup_logging

import gangmesh as gm

STEPS = 6
TIMEOUT = timedelta(seconds=10)


def weight_shards(
    model: nn.Module, split: dict[str, dict[int, tuple[str, ...]]]
) -> dict[str, gm.TensorShards]:
    """Each weight's shape and dtype, and how this job splits it (``split`` by name; the
    others are held whole)."""
    return {
        name: gm.TensorShards(tuple(p.shape), "float32", split.get(name, {}))
        for name, p in model.named_parameters()
    }


def trainer_split(model: nn.Module) -> dict[str, dict[int, tuple[str, ...]]]:
    """FSDP2 shards every weight along its first dimension over dp_shard."""
    return {name: {0: ("dp_shard",)} for name, _ in model.named_parameters()}


def generator_split() -> dict[str, dict[int, tuple[str, ...]]]:
    """Tensor parallelism splits each block's up layer by rows and its down layer by columns."""
    split: dict[str, dict[int, tuple[str, ...]]] = {}
    for block in range(BLOCKS):
        split[f"blocks.{block}.up.weight"] = split[f"blocks.{block}.up.bias"] = {0: ("tp",)}
        split[f"blocks.{block}.down.weight"] = {1: ("tp",)}
    return split


def local(model: nn.Module) -> dict[str, Tensor]:
    """This process's shard of each weight, sharing the weight's storage."""
    return {
        name: (p.to_local() if isinstance(p, DTensor) else p).detach()
        for name, p in model.named_parameters()
    }


def trainer(root: gm.Gang, address: str) -> None:
    gangs = gm.create_gangs(root, dp_shard=root.size)
    model = make_model(root.device)
    fully_shard(model, mesh=gangs.meshes["dp_shard_cp"]["dp_shard_cp"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    shards = weight_shards(model, trainer_split(model))
    joined = gm.join_jobs(root, job="trainer", other="generator", address=address,
                          plan=gangs.plan, shards=shards, timeout=TIMEOUT)  # fmt: skip
    say = log.info if root.rank == 0 else log.debug
    say("trainer: joined the generator at %s in epoch %d", address, joined.epoch)
    joined.push(0, local(model))
    version, delivered, rollouts, bridge = 0, True, torch.zeros(0, dtype=torch.int64), Bridge()
    while version < STEPS:
        if delivered:  # the generator took the last weights: its rollouts follow
            try:
                rollouts = bridge.rollouts(joined)
            except gm.GangError as error:  # named; the next push fails too and ends the epoch
                say(
                    "trainer: rollouts of version %d failed: %s",
                    version,
                    str(error).splitlines()[0],
                )
        prompts = global_batch(version + 1, root.device)[0]
        loss = loss_of(model(prompts), rollouts.reshape(prompts.shape))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        away = not delivered
        try:
            delivered = joined.push(version + 1, local(model))
        except gm.GangError as error:  # named, on every rank; this job trains on
            say("trainer: push of version %d failed: %s", version + 1, str(error).splitlines()[0])
            delivered = False
        if delivered:
            version += 1
            back = " (the generator is back)" if away else ""
            say("trainer: loss %.4f; pushed version %d in epoch %d%s", loss.item(), version,
                joined.epoch, back)  # fmt: skip
    joined.close()
    gangs.close()


class Bridge:
    """The rollouts' bridge, generator rank 0 to every trainer rank, made anew in each epoch."""

    def __init__(self) -> None:
        self.gang: gm.Gang | None = None
        self.epoch = 0

    def rollouts(self, joined: gm.JoinedJobs, sent: Tensor | None = None) -> Tensor:
        """The generator's rollouts (``sent`` from generator rank 0; received elsewhere)."""
        if self.epoch != joined.epoch:
            trainers = list(range(joined.plan.plans["trainer"].world_size))
            self.gang, self.epoch = joined.bridge(generator=[0], trainer=trainers), joined.epoch
        rollouts = torch.zeros(8, 8, dtype=torch.int64) if sent is None else sent.reshape(8, 8)
        if self.gang is not None:
            self.gang.broadcast(rollouts, self.gang.members.index(("generator", 0)))
        return rollouts


def generator(root: gm.Gang, address: str, kill_at: int | None) -> None:
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    gangs = gm.create_gangs(root, tp=root.size)
    model = make_model(root.device)
    plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
    for block in model.blocks:
        parallelize_module(block, gangs.meshes["dp_shard_cp"]["tp"], plan)
    shards = weight_shards(model, generator_split())
    joined = gm.join_jobs(root, job="generator", other="trainer", address=address,
                          plan=gangs.plan, shards=shards, timeout=TIMEOUT)  # fmt: skip
    say = log.info if root.rank == 0 else log.debug
    say("generator attempt %d: joined the trainer in epoch %d", attempt, joined.epoch)
    version, bridge = -1, Bridge()
    while version < STEPS:
        if kill_at is not None and attempt == 0 and version == kill_at - 1 and root.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # as it takes the weights of version kill_at
        taken = joined.receive(local(model))
        if taken is None:  # the trainer is not in the epoch (yet): look again shortly
            time.sleep(0.05)
            continue
        version = taken
        say("generator: took version %d in epoch %d", version, joined.epoch)
        if version < STEPS:
            with torch.no_grad():
                rollouts = model(global_batch(version + 1, root.device)[0]).argmax(-1)
            bridge.rollouts(joined, rollouts)
    joined.close()
    gangs.close()


def main() -> None:
    setup_logging()
    role, address = sys.argv[1], sys.argv[2]
    kill_at = int(sys.argv[4]) if sys.argv[3:4] == ["--kill-at"] else None
    root = gm.setup_root_gang(timeout=timedelta(seconds=30))
    if role == "trainer":
        trainer(root, address)
    else:
        generator(root, address, kill_at)
    root.close()


if __name__ == "__main__":
    main()
