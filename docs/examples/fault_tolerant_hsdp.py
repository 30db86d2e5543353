"""HSDP whose replicate dimension survives a lost replica group (torchft), checked against one
process.

One replica group is one torchrun launch: FSDP2 over its own processes, its gradients
averaged with the other groups' through torchft. Started with a lighthouse running
(``torchft_lighthouse --min_replicas 1``)::

    GANGMESH_REPLICA_GROUP=0 torchrun --nproc-per-node 2 --master-port 29600 \\
        docs/examples/fault_tolerant_hsdp.py --lighthouse localhost:29510 --out /tmp/ft
    GANGMESH_REPLICA_GROUP=1 torchrun --nproc-per-node 2 --master-port 29601 --max-restarts 1 \\
        docs/examples/fault_tolerant_hsdp.py --lighthouse localhost:29510 --out /tmp/ft

``python docs/examples/fault_tolerant_hsdp.py --local`` does it all on this machine: a
lighthouse, two replica groups of 2 processes, group 1 SIGKILLed mid-step and restarted by
torchrun; then it checks every committed step against one process that averages the
gradients of exactly the groups that took part in it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import gangmesh as gm

LR, BATCH, WIDTH, TOLERANCE = 0.05, 4, 8, 1e-5


def shard_batch(step: int, replica: int, shard: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data of one process at ``step``: a function of the step, the replica group's rank
    among the step's groups and the process's shard."""
    generator = torch.Generator().manual_seed(1_000_000 + 1000 * step + 10 * replica + shard)
    return torch.randn(BATCH, WIDTH, generator=generator), torch.randn(
        BATCH, WIDTH, generator=generator
    )


def make_model() -> nn.Sequential:
    """A small model (small records of every committed step), the same on every process."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.Tanh(), nn.Linear(4 * WIDTH, WIDTH))


def loss_of(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.mse_loss(model(inputs), targets)


def flat_weights(model: torch.nn.Module) -> list[float]:
    """Every weight, gathered whole (every process of the group calls it)."""
    whole = [p.full_tensor() if isinstance(p, DTensor) else p for p in model.parameters()]
    return torch.cat([w.detach().reshape(-1) for w in whole]).tolist()


def train(args: argparse.Namespace) -> None:
    """One process of one replica group."""
    # torchft logs each failed collective with its traceback: here they are expected.
    logging.getLogger("torchft").setLevel(logging.CRITICAL)
    root = gm.setup_root_gang(timeout=timedelta(seconds=30))
    wait = timedelta(seconds=args.replica_timeout)  # a group cut off holds the others this long
    replicas = gm.join_replicas(root, lighthouse=args.lighthouse, timeout=wait)
    gangs = gm.create_gangs(root, dp_shard=-1, replicas=replicas)
    model = make_model()
    mesh = gangs.meshes["dp_shard_cp"]["dp_shard_cp"]
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = replicas.wrap(model, torch.optim.SGD(model.parameters(), lr=LR))

    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    records = Path(args.out) / f"group{replicas.group}.jsonl"
    note = records.open("a") if root.rank == 0 else None

    def say(**fields: object) -> None:
        if note is not None:
            note.write(json.dumps({"attempt": attempt, "time": time.time(), **fields}) + "\n")
            note.flush()

    say(event="joined")
    give_up = time.monotonic() + 120  # waiting for the other groups to come (back)
    while True:
        optimizer.zero_grad()  # joins the step's quorum (and heals, where this group is behind)
        step, groups = replicas.step, replicas.gang.size
        inputs, targets = shard_batch(step, replicas.gang.rank, gangs.sdp.rank)
        loss = loss_of(model, inputs, targets)
        # the loss: at the first step from kill_at on that this group takes with another (one
        # that joined late starts at the others' step)
        lose = args.kill_at is not None and step >= args.kill_at and groups > 1
        if lose and attempt == 0 and root.rank == root.size - 1:
            killed = {"event": "killed", "step": step, "time": time.time()}
            (Path(args.out) / f"group{replicas.group}-killed.json").write_text(json.dumps(killed))
            os.kill(os.getpid(), signal.SIGKILL)  # mid-step: before the gradients are reduced
        loss.backward()
        optimizer.step()  # updates the weights only if every group of the step succeeded
        if replicas.step > step:
            say(event="committed", step=step, groups=groups, weights=flat_weights(model))
            if step + 1 >= args.steps and groups == args.groups:
                break
            if time.monotonic() > give_up:
                raise SystemExit(f"replica group {replicas.group}: the other groups never came")
    say(event="done")
    replicas.close()


def reference(records: list[dict]) -> dict[int, torch.Tensor]:
    """The weights after each committed step, trained by one process on the data of exactly
    the groups that took part in it."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    groups_at: dict[int, set[int]] = {}
    for record in records:
        groups_at.setdefault(record["step"], set()).add(record["groups"])
    weights = {}
    for step in range(max(groups_at) + 1):
        (groups,) = groups_at[step]  # every group that committed a step saw the same groups
        optimizer.zero_grad()
        for replica in range(groups):
            for shard in range(2):
                inputs, targets = shard_batch(step, replica, shard)
                (loss_of(model, inputs, targets) / (2 * groups)).backward()
        optimizer.step()
        weights[step] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return weights


def summary(out: Path, victim: int) -> tuple[str, bool]:
    """The line that tells what happened, and whether every committed step was right."""
    lines = {g: [json.loads(x) for x in (out / f"group{g}.jsonl").read_text().splitlines()]
             for g in (0, victim)}  # fmt: skip
    committed = [r for g in lines for r in lines[g] if r["event"] == "committed"]
    want = reference(committed)
    worst = max(
        (torch.tensor(r["weights"]) - want[r["step"]]).abs().max().item() for r in committed
    )
    kill = json.loads((out / f"group{victim}-killed.json").read_text())
    survivor = [r for r in lines[0] if r["event"] == "committed"]
    # the stall: from the loss to group 0's first step committed without group 1
    alone = min(r["time"] for r in survivor if r["time"] > kill["time"] and r["groups"] == 1)
    stall = alone - kill["time"]
    back = [r for r in lines[victim] if r["attempt"] > 0]
    joined = next(r["time"] for r in back if r["event"] == "joined")
    first = next(r for r in back if r["event"] == "committed")
    restarts = {r["attempt"] for r in lines[0]}
    right = worst <= TOLERANCE and restarts == {0}
    return (
        f"replica group {victim} lost at step {kill['step']}: group 0 went on "
        f"{'without a restart' if restarts == {0} else 'only after a restart'} "
        f"(stalled {stall:.2f} s); group {victim} rejoined at step {first['step']} in "
        f"{first['time'] - joined:.2f} s with group 0's weights; every committed step "
        f"{'matches' if right else 'does NOT match'} the reference within {TOLERANCE:g} "
        f"(worst {worst:.1e})",
        right,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def local(args: argparse.Namespace) -> int:
    """A lighthouse and two replica groups of 2 processes here; group 1 loses a process."""
    out = Path(args.out or tempfile.mkdtemp(prefix="gangmesh-ft-"))
    out.mkdir(parents=True, exist_ok=True)
    with gm.start_lighthouse(heartbeat_timeout=timedelta(seconds=1)) as lighthouse:
        launches = [launch(group, lighthouse.address, out, args) for group in (0, 1)]
        deadline = time.monotonic() + 240
        try:
            codes = [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in launches]
        finally:
            for p in launches:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
    if codes != [0, 0]:
        print(f"the replica groups' launches ended with {codes}; records in {out}")
        return 1
    line, right = summary(out, victim=1)
    print(line)
    return 0 if right else 1


def launch(group: int, lighthouse: str, out: Path, args: argparse.Namespace) -> subprocess.Popen:
    """Replica group ``group`` as a torchrun launch of 2 processes; group 1 loses one at
    ``args.kill_at``, and torchrun restarts it once."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--max-restarts", str(group), "--monitor-interval", "0.2",
                "--master-addr", "127.0.0.1", "--master-port", str(free_port())]  # fmt: skip
    mine = ["--lighthouse", lighthouse, "--out", str(out), "--steps", str(args.steps)]
    if group == 1:
        mine += ["--kill-at", str(args.kill_at)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GANGMESH_REPLICA_GROUP": str(group)}
    env.setdefault("RUST_LOG", "warn")  # torchft's own log: its warnings only
    return subprocess.Popen([*torchrun, __file__, *mine], env=env, start_new_session=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local", action="store_true", help="run everything on this machine")
    parser.add_argument(
        "--kill",
        type=int,
        default=4,
        help="with --local: the step of the loss (or the first after it that both groups take)",
    )
    parser.add_argument("--lighthouse", help="the lighthouse's address (host:port)")
    parser.add_argument("--out", help="folder of the records of committed steps")
    parser.add_argument("--steps", type=int, default=12, help="steps to train, at least")
    parser.add_argument("--groups", type=int, default=2, help="replica groups to end with")
    parser.add_argument("--replica-timeout", type=float, default=2.0,
                        help="seconds a collective across replica groups may take")  # fmt: skip
    parser.add_argument(
        "--kill-at", type=int, help="from this step on, the first step with another group: the loss"
    )
    args = parser.parse_args()
    if args.local:
        args.kill_at = args.kill
        return local(args)
    if args.out is None:
        parser.error("--out: expected a folder for the records")
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
