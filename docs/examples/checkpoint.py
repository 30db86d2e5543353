"""Save and resume FSDP2 training with torch.distributed.checkpoint, on any layout.

The toy model trains for ``--steps`` steps on ``gangs.meshes["dp_shard_cp"]``. Every
``--every`` steps the model and the AdamW state are written to ``--dir`` as a DCP
checkpoint; at start the job resumes from the newest complete checkpoint there. Rank 0 logs
each step's loss next to the loss of one process training without interruption, and the job
exits with status 1 if a loss or a final parameter differs from that run by more than 1e-5
(relative).

Checkpoint ``step-N`` holds the state after N steps (steps are numbered from 0, so a job
resumed from it trains step N next).

A crash, and torchrun's restart on the same layout (rank 1 dies at step 3 of the first
attempt; the second attempt resumes from ``step-2``)::

    torchrun --nproc-per-node 4 --max-restarts 1 docs/examples/checkpoint.py \\
        --layout hsdp --steps 6 --every 2 --crash-at 3 --dir /tmp/ckpt

Another layout and world size (HSDP 2x2 saves ``step-4``; FSDP on 2 processes, and TP 2 x
FSDP 2 on 4 in a copy of the folder, each take it up and train steps 4 and 5)::

    torchrun --nproc-per-node 4 docs/examples/checkpoint.py --layout hsdp --steps 4 --dir /tmp/ck
    cp -r /tmp/ck /tmp/ck2
    torchrun --nproc-per-node 2 docs/examples/checkpoint.py --layout fsdp --steps 6 --dir /tmp/ck
    torchrun --nproc-per-node 4 docs/examples/checkpoint.py --layout tp --steps 6 --dir /tmp/ck2
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from toy_model import (
    LR,
    RTOL,
    ToyModel,
    log,
    make_model,
    nan_as_inf,
    setup_logging,
    train_step,
)

import gangmesh as gm

LAYOUTS = ("hsdp", "fsdp", "tp")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", choices=LAYOUTS, default="hsdp")
    parser.add_argument("--steps", type=int, default=6, help="steps of the whole training")
    parser.add_argument("--every", type=int, default=2, help="save after every N steps")
    parser.add_argument("--dir", type=Path, required=True, help="checkpoint folder")
    parser.add_argument(
        "--crash-at",
        type=int,
        default=None,
        metavar="K",
        help="rank 1 exits at the start of step K, on torchrun's first attempt only",
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.every < 1:
        parser.error(f"--steps and --every must be positive, got {args.steps} and {args.every}")
    return args


def parallelize(model: ToyModel, layout: str, root: gm.Gang) -> tuple[gm.Gangs, str]:
    """Build the gangs of ``layout`` and shard ``model`` over their mesh; a description."""
    if layout == "tp":
        gangs = gm.create_gangs(root, tp=2)
    else:
        gangs = gm.create_gangs(root, dp_replicate=2 if layout == "hsdp" else 1, dp_shard=-1)
    mesh = gangs.meshes["dp_shard_cp"]  # FSDP2 and tensor parallelism share this root
    if layout == "hsdp":
        data_mesh = mesh["dp_replicate", "dp_shard_cp"]
        name = f"HSDP {gangs.rdp.size}x{gangs.sdp.size}"
    else:
        data_mesh = mesh["dp_shard_cp"]
        name = f"TP {gangs.tp.size} x FSDP {gangs.sdp.size}" if layout == "tp" else "FSDP"
    for block in model.blocks:
        if layout == "tp":
            # `up` split by output features, `down` by input features: one all-reduce a block.
            plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
            parallelize_module(block, mesh["tp"], plan)
        fully_shard(block, mesh=data_mesh)
    fully_shard(model, mesh=data_mesh)
    return gangs, f"{name} on {root.size} processes"


# --- save and load -------------------------------------------------------------------------


def save(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Write this process's shards of the model and optimizer state to ``folder``."""
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder)


def load(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Fill the model and optimizer from ``folder``, whatever the layout that wrote it."""
    # The state dicts of *this* layout say which slice of each tensor this process wants;
    # DCP reads those slices from whichever files hold them.
    model_state, optim_state = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=folder)
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )


def checkpoint_folder(directory: Path, steps_done: int) -> Path:
    return directory / f"step-{steps_done}"


def latest_checkpoint(directory: Path, root: gm.Gang) -> int:
    """Steps done by the newest complete checkpoint in ``directory`` (0 if none), as rank 0
    sees it."""
    found = [0]
    if root.rank == 0 and directory.is_dir():
        # DCP writes `.metadata` last, under a temporary name that it renames when done.
        found = [
            int(entry.name.removeprefix("step-"))
            for entry in directory.glob("step-*")
            if entry.name.removeprefix("step-").isdigit() and (entry / ".metadata").is_file()
        ]
    choice = [max(found, default=0)]
    root.broadcast_objects(choice, source_rank=0)
    return int(choice[0])


# --- training ------------------------------------------------------------------------------


def reference_run(steps: int, device: torch.device) -> tuple[list[float], dict[str, Tensor]]:
    """Losses and final parameters of one process training on every whole batch, uninterrupted."""
    model = make_model(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    alone = gm.FakeGang(device)  # a gang of one: the whole batch is its slice
    losses = [train_step(model, optimizer, step, alone).item() for step in range(steps)]
    return losses, {name: p.detach().clone() for name, p in model.named_parameters()}


def relative_error(got: Tensor, want: Tensor) -> float:
    """Largest absolute difference over the largest magnitude of ``want``."""
    return ((got - want).abs().max() / want.abs().max()).item()


def compare_parameters(model: nn.Module, reference: dict[str, Tensor], rank: int) -> float:
    """The worst relative error of the gathered parameters against ``reference``."""
    worst = 0.0
    for name, param in model.named_parameters():  # the same order on every process
        full = param.full_tensor() if isinstance(param, DTensor) else param
        worst = max(worst, nan_as_inf(relative_error(full.detach(), reference[name])))
    return worst


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup_logging()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    root = gm.setup_root_gang()
    model = make_model(root.device)
    gangs, description = parallelize(model, args.layout, root)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)

    start = latest_checkpoint(args.dir, root)
    if start:
        load(checkpoint_folder(args.dir, start), model, optimizer)
    if root.rank == 0:
        source = f"resuming from {checkpoint_folder(args.dir, start)}" if start else "from scratch"
        log.info("attempt %d: %s, %s at step %d", attempt, description, source, start)

    reference_losses, reference_params = reference_run(args.steps, root.device)
    worst = 0.0
    for step in range(start, args.steps):
        if step == args.crash_at and attempt == 0 and root.rank == 1:
            log.error("rank 1: exiting at step %d, as asked", step)
            os._exit(1)  # a crash: no cleanup, peers find out through their collectives
        loss = train_step(model, optimizer, step, gangs.dp)
        gangs.dp.all_reduce(loss, gm.ReduceOperation.MEAN)
        want = reference_losses[step]
        error = abs(loss.item() - want) / abs(want)
        worst = max(worst, nan_as_inf(error))
        if root.rank == 0:
            log.info(
                "step %d: loss %.6f (single process %.6f, rel. error %.1e)",
                step,
                loss.item(),
                want,
                error,
            )
        if (step + 1) % args.every == 0:
            save(checkpoint_folder(args.dir, step + 1), model, optimizer)
            if root.rank == 0:
                log.info("saved %s", checkpoint_folder(args.dir, step + 1))

    params_error = compare_parameters(model, reference_params, root.rank)
    if worst > RTOL or params_error > RTOL:
        log.error(
            "rank %d: differs from the single-process run: losses by %.1e, parameters by %.1e"
            " (tolerance %.0e)",
            root.rank,
            worst,
            params_error,
            RTOL,
        )
        sys.exit(1)
    if root.rank == 0:
        log.info(
            "final parameters match the single-process run of %d steps within %.0e"
            " (worst %.1e; losses %.1e)",
            args.steps,
            RTOL,
            params_error,
            worst,
        )


if __name__ == "__main__":
    main()
