"""Two joined jobs, one of which breaks during a push, attempt after attempt, restarted by its
launcher each time, while the other goes on training and names each fault.

    joined_faults.py OUT trainer|generator ADDRESS VICTIM_JOB KIND[,KIND...]

The trainer (FSDP2 over 2 processes) pushes its weights every step; the generator (tp 2;
where it breaks, 2 whole replicas in its odd attempts: a layout the trainer meets anew)
receives them. The job VICTIM_JOB runs under torchrun with a restart per KIND: in attempt
``k`` its rank ``k % 2`` breaks as it enters its second transfer, by KIND ``k`` ("raise" a
ValueError, "kill" itself, "stop" itself, "hang" in a wait of its own); its last attempt does
:data:`FINAL` transfers and ends. The other job, the survivor, writes each GangError it gets,
and how many steps of its own it trained after it, and goes on until the victim's last
attempt is done. The last survivor to write an error kills a victim still stopped or hung, as
a scheduler ending it would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
from common import write_results
from joined_model import (
    LAYOUTS,
    digest,
    full_weights,
    generate,
    local_shards,
    make_model,
    train_step,
)
from joined_model import shards as shards_of

import gangmesh as gm
from gangmesh.plan.shards import Box

TIMEOUT = timedelta(seconds=3)
FINAL = 3
"""Transfers of the victim's last attempt."""
STEP_TIME = 0.05
"""Seconds of a survivor's step beside its transfer: the time a real step takes."""
WALL = 150.0
"""Seconds after which a survivor ends, whatever happened."""


def break_down(kind: str) -> None:
    """What the victim does as it enters its second transfer."""
    if kind == "raise":
        raise ValueError("the rollout buffer is corrupt\nsecond line")
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    if kind == "hang":
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
        signal.sigtimedwait([signal.SIGUSR1], 120)


def end_victims(out: Path, index: int, survivors: int) -> None:
    """The last survivor to write error ``index`` kills that attempt's victim (if alive)."""
    said = [json.loads(p.read_text()) for p in (out / "survivor").glob("rank*.json")]
    if len(said) < survivors or any(len(s["errors"]) <= index for s in said):
        return
    victim = json.loads((out / "victim" / f"rank{index}.json").read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(victim["pid"], signal.SIGKILL)


class Side:
    """One job's model and its transfer across the join."""

    def __init__(self, role: str, root: gm.Gang, layout: str) -> None:
        self.role, self.training = role, role == "trainer"
        self.gangs = gm.create_gangs(root, **LAYOUTS[layout])
        self.model = make_model(self.gangs, train=self.training)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1) if self.training else None
        self.step = 0

    def join(self, address: str) -> gm.JoinedJobs:
        return gm.join_jobs(
            self.gangs.root, job=self.role, address=address, plan=self.gangs.plan,
            other="generator" if self.training else "trainer", timeout=TIMEOUT,
            shards=shards_of(self.gangs, train=self.training), wait=timedelta(seconds=60),
        )  # fmt: skip

    def own_step(self) -> None:
        """A step of its own: the trainer trains, the generator generates."""
        if self.optimizer is not None:
            train_step(self.model, self.optimizer, self.step)
        else:
            generate(self.model, self.step)
        self.step += 1

    def transfer(self, joined: gm.JoinedJobs) -> dict[str, object] | None:
        """Push (the trainer: version = its step, and the digests each generator rank should
        hold) or receive; None where the other job is not in the epoch."""
        if self.training:
            if not joined.push(self.step, local_shards(self.model)):
                return None
            full = full_weights(self.model)
            plan = joined.push_plan()
            wanted = {
                name: [
                    digest(
                        whole[
                            plan.receiver_box(name, g).within(
                                Box((0,) * whole.dim(), tuple(whole.shape))
                            )
                        ]
                    )
                    for g in range(joined.other_plan.world_size)
                ]
                for name, whole in full.items()
            }
            return {"version": self.step, "wanted": wanted, "epoch": joined.epoch}
        version = joined.receive(local_shards(self.model))
        if version is None:
            return None
        held = {name: digest(t) for name, t in local_shards(self.model).items()}
        return {"version": version, "held": held, "epoch": joined.epoch}


def victim(side: Side, out: Path, address: str, kinds: list[str]) -> None:
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    me = side.gangs.root.rank
    started = time.monotonic()
    joined = side.join(address)
    record: dict[str, object] = {"join_seconds": time.monotonic() - started, "epoch": joined.epoch}
    transfers: list[dict[str, object]] = []
    folder = out / "attempts"
    folder.mkdir(parents=True, exist_ok=True)
    while len(transfers) < (FINAL if attempt == len(kinds) else 2):
        side.own_step()
        if attempt < len(kinds) and len(transfers) == 1 and me == attempt % 2:
            broke = {
                "pid": os.getpid(),
                "rank": me,
                "kind": kinds[attempt],
                "broke_at": time.time(),
            }
            write_results(attempt, broke)  # victim/rank<attempt>.json
            break_down(kinds[attempt])
        done = side.transfer(joined)
        if done is not None:
            transfers.append(done)
            partial = folder / f"{attempt}-{me}.partial"
            partial.write_text(json.dumps({**record, "transfers": transfers}))
            partial.replace(folder / f"{attempt}-{me}.json")
    joined.close()


def survivor(side: Side, out: Path, address: str, kinds: list[str]) -> None:
    joined = side.join(address)
    me = side.gangs.root.rank
    errors: list[dict[str, object]] = []
    transfers: list[dict[str, object]] = []
    ends = time.monotonic() + WALL
    while time.monotonic() < ends and sum(1 for t in transfers if t["after"] == len(kinds)) < FINAL:
        side.own_step()
        if errors:
            errors[-1]["own_steps_after"] = int(errors[-1]["own_steps_after"]) + 1  # type: ignore[call-overload]
        try:
            done = side.transfer(joined)
        except gm.GangError as error:
            errors.append({"error": str(error), "culprits": list(error.culprits), "job": error.job,
                           "at": time.time(), "own_steps_after": 0})  # fmt: skip
            write_results(me, {"errors": errors, "transfers": transfers})
            end_victims(out, len(errors) - 1, side.gangs.root.size)
            continue
        if done is not None:
            transfers.append({**done, "after": len(errors)})
        else:
            time.sleep(STEP_TIME)
    write_results(me, {"errors": errors, "transfers": transfers, "host": os.uname().nodename})
    joined.close()


def main() -> None:
    out, role, address, victim_job = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    kinds = sys.argv[5].split(",")
    root = gm.setup_root_gang(timeout=timedelta(seconds=20))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    layout = "fsdp" if role == "trainer" else "tp"
    if role == victim_job == "generator" and attempt % 2:
        layout = "replicas"
    side = Side(role, root, layout)
    if role == victim_job:
        sys.argv[1] = str(out / "victim")  # where write_results writes
        victim(side, out, address, kinds)
    else:
        sys.argv[1] = str(out / "survivor")
        survivor(side, out, address, kinds)
    side.gangs.close()
    root.close()


if __name__ == "__main__":
    main()
