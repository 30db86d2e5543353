"""Two joined jobs that use only a bridge (no push): the trainer's rank 0 sends a number to
every generator rank each step; the generator, killed once, comes back under torchrun.

    joined_bridges.py OUT trainer|generator ADDRESS

Both jobs (2 processes each) call ``meet`` every step and make their bridge again where the
epoch changed. In the generator's first attempt its rank 1 kills itself once it received
:data:`BEFORE` numbers. The trainer goes on until it sent :data:`AFTER` numbers after the
failure (the last one marked final), then ends; the generator ends on the final number. Each
trainer rank writes what ``meet`` said after the failure, the errors it got and the epochs it
sent in; each generator rank writes, per attempt, what it received and in which epoch.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
from common import write_results

import gangmesh as gm

BEFORE, AFTER = 2, 3
STEP_TIME = 0.05
"""Seconds of a step beside its bridge: the time a real step takes."""
WALL = 120.0
"""Seconds after which a job ends, whatever happened."""


def trainer(joined: gm.JoinedJobs, root: gm.Gang) -> dict[str, object]:
    said: dict[str, object] = {"errors": [], "sent": [], "met_after_error": []}
    errors, sent, met = said["errors"], said["sent"], said["met_after_error"]
    assert isinstance(errors, list) and isinstance(sent, list) and isinstance(met, list)
    bridge, made_in, number, after = None, -1, 0, 0
    deadline = time.monotonic() + WALL
    while True:
        time.sleep(STEP_TIME)  # the step
        go_on = torch.tensor([int(after < AFTER and time.monotonic() < deadline)])
        root.broadcast(go_on, 0)  # rank 0 decides for the job
        if not go_on.item():
            return said
        ready = joined.meet()
        errors_seen = torch.tensor([len(errors)])
        root.broadcast(errors_seen, 0)
        if errors_seen.item():
            met.append([joined.epoch, ready])
        if not ready:
            continue
        if made_in != joined.epoch:
            bridge, made_in = joined.bridge(trainer=[0], generator=[0, 1]), joined.epoch
        if bridge is None:
            continue
        number += 1
        final = int(bool(errors) and after == AFTER - 1)
        try:
            bridge.broadcast(torch.tensor([number, final]), bridge.members.index(("trainer", 0)))
        except gm.GangError as error:
            errors.append({"error": str(error), "job": error.job, "culprits": list(error.culprits)})
            continue
        sent.append([number, joined.epoch])
        after += bool(errors)


def generator(joined: gm.JoinedJobs, root: gm.Gang) -> dict[str, object]:
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    got: list[list[int]] = []
    bridge, made_in = None, -1
    deadline = time.monotonic() + WALL
    while True:
        time.sleep(STEP_TIME)  # the step
        go_on = torch.tensor([int(time.monotonic() < deadline)])
        root.broadcast(go_on, 0)  # rank 0 decides for the job
        if not go_on.item():
            return {"attempt": attempt, "got": got, "ended": "wall"}
        if not joined.meet():
            continue
        if made_in != joined.epoch:
            bridge, made_in = joined.bridge(trainer=[0], generator=[0, 1]), joined.epoch
        assert bridge is not None
        number = torch.zeros(2, dtype=torch.int64)
        bridge.broadcast(number, bridge.members.index(("trainer", 0)))
        got.append([int(number[0]), joined.epoch])
        if attempt == 0 and len(got) == BEFORE and root.rank == 1:
            write_results(2, {"pid": os.getpid()})  # the victim, as rank2.json
            os.kill(os.getpid(), signal.SIGKILL)
        if number[1]:
            return {"attempt": attempt, "got": got}


def main() -> None:
    role, address = sys.argv[2], sys.argv[3]
    sys.argv[1] = str(Path(sys.argv[1]) / role)  # where write_results writes
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    training = role == "trainer"
    joined = gm.join_jobs(
        root, job=role, other="generator" if training else "trainer", address=address,
        plan={}, timeout=timedelta(seconds=3), wait=timedelta(seconds=60),
    )  # fmt: skip
    said = (trainer if training else generator)(joined, root)
    said["epoch"] = joined.epoch
    joined.close()
    write_results(root.rank, said)
    root.close()


if __name__ == "__main__":
    main()
