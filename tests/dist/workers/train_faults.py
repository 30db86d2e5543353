"""Real training steps on 4 processes in which one rank breaks at a drawn moment.

    train_faults.py OUT VICTIM KIND DELAY ENDING TIMEOUT MOMENT JOB STEP

JOB is the training: "hsdp" (FSDP2 over dp_replicate 2 x dp_shard 2), "tp_fsdp" (tensor
parallel 2 x FSDP2 2 over one mesh), "pp" (a 2-stage pipeline schedule over pp 2, data
parallel 2 beside it) or "pp_fsdp" (the same, each stage under FSDP2 over dp_shard 2; the
forward fault strikes before FSDP2's all-gather). VICTIM breaks as KIND says:

- at MOMENT "setup", DELAY seconds after its start (a thread of its own strikes wherever the
  main thread is: inside ``setup_root_gang``, ``create_gangs``, FSDP2's wrapping, the first
  steps);
- at MOMENT "forward", "backward" or "optimizer", in that phase of step STEP (a forward
  pre-hook of a block, a hook on the gradient of the loss's input, the optimizer's step
  pre-hook), or DELAY seconds later, struck by the thread, wherever that leaves the main
  thread (inside FSDP2's all-gathers and reduce-scatters, DTensor's all-reduces, a send).

KIND: "raise" (an exception of the user's code), "exit" (``os._exit(3)``), "sigkill",
"sigstop", "hang" (alive, it stops entering collectives) or "desync" (an all-reduce of its own
on the root gang that no peer makes). Every other rank writes what it gets: a
GangError (``with gangs:`` turns torch's error into one), then lets it go uncaught (ENDING
"raise") or catches it and ends with ``sys.exit(1)`` (ENDING "catch"); with ENDING "torch" it
trains outside ``with gangs:`` and torch's own error goes uncaught. TIMEOUT is the root gang's
timeout in seconds.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import torch
from common import end_victim, write_results
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import gangmesh as gm

WIDTH = 16
BATCH = 8


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(WIDTH, 2 * WIDTH)
        self.down = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


class Stage(PipelineStage):
    """Before torch 2.10 a stage greets its neighbours with int64 tensors gloo refuses."""

    def _get_init_p2p_neighbors_ops(self):  # type: ignore[no-untyped-def]
        operations = super()._get_init_p2p_neighbors_ops()
        for operation in operations:
            operation.tensor = operation.tensor.float()
        return operations


class Fault:
    """What the victim does, once, when its moment comes."""

    def __init__(self, rank: int, kind: str, gangs_of: list[gm.Gangs]) -> None:
        self.rank, self.kind, self._gangs_of = rank, kind, gangs_of
        self.struck = threading.Event()

    def strike(self) -> None:
        if self.struck.is_set():
            return
        write_results(self.rank, {"pid": os.getpid(), "broke_at": time.time(), "kind": self.kind})
        self.struck.set()
        if self.kind == "exit":
            os._exit(3)
        if self.kind == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kind == "sigstop":
            os.kill(os.getpid(), signal.SIGSTOP)

    def in_main_thread(self, step: int) -> None:
        """Where the main thread passes a hook: a raise, a hang or a desync happens here."""
        if not self.struck.is_set() or threading.current_thread() is not threading.main_thread():
            return
        if self.kind == "raise":
            raise ValueError(f"step {step}: the loss is NaN")
        if self.kind == "hang":
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
            signal.sigtimedwait([signal.SIGUSR1], 120)  # ended by a signal of another
        if self.kind == "desync":
            self.kind = "desynced"
            extra = torch.ones(3)
            self._gangs_of[0].root.all_reduce(extra, gm.ReduceOperation.SUM)


def build(job: str, gangs: gm.Gangs) -> tuple[nn.Module, nn.Module, object | None]:
    """The model this rank trains, the block its forward hook goes on, and a pipeline
    schedule (None where the job has none)."""
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block())
    mesh = gangs.meshes["dp_shard_cp"]
    if job == "hsdp":
        data = mesh["dp_replicate", "dp_shard_cp"]
        for block in model:
            fully_shard(block, mesh=data)
        fully_shard(model, mesh=data)
        return model, model[1], None
    if job == "tp_fsdp":
        plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
        for block in model:
            parallelize_module(block, mesh["tp"], plan)
            fully_shard(block, mesh=mesh["dp_shard_cp"])
        fully_shard(model, mesh=mesh["dp_shard_cp"])
        return model, model[1], None
    stage_module = model[gangs.pp.rank]
    if job == "pp_fsdp":  # FSDP2 inside each stage: its all-gathers run in the stage's forward
        fully_shard(stage_module, mesh=mesh["dp_shard_cp"])
    stage = Stage(stage_module, gangs.pp.rank, gangs.pp.size, gangs.root.device,
                  group=gangs.pp.as_process_group())  # fmt: skip
    schedule = ScheduleGPipe(stage, n_microbatches=2, loss_fn=lambda out, _: out.pow(2).mean())
    return stage_module, stage_module, schedule


def train(job: str, gangs: gm.Gangs, fault: Fault | None, moment: str, step_of_fault: int,
          strike_later: threading.Timer | None) -> None:  # fmt: skip
    model, hooked, schedule = build(job, gangs)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def at(phase: str, step: int) -> None:
        if fault is None or step != step_of_fault or phase != moment:
            if fault is not None:
                fault.in_main_thread(step)
            return
        if strike_later is None:
            fault.strike()
        elif not strike_later.is_alive() and not fault.struck.is_set():
            strike_later.start()
        fault.in_main_thread(step)

    step = 0
    # in pp_fsdp before FSDP2's all-gather, so that the stage's peer waits inside the stage
    hooked.register_forward_pre_hook(lambda *_: at("forward", step), prepend=job == "pp_fsdp")
    optimizer.register_step_pre_hook(lambda *_: at("optimizer", step))
    for step in range(1_000_000):
        batch = torch.full((BATCH, WIDTH), 0.1 * (gangs.dp.rank + 1))
        if schedule is not None:
            if gangs.pp.rank == 0:
                schedule.step(batch)
            else:
                schedule.step(target=batch)
            at("backward", step)
            for parameter in model.parameters() if job == "pp" else ():
                if parameter.grad is not None:
                    gangs.dp.all_reduce(parameter.grad, gm.ReduceOperation.MEAN)
        else:
            hidden = model(batch)
            hidden.register_hook(lambda grad: at("backward", step) or grad)
            hidden.pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()


def main() -> None:
    victim, kind, delay = int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    ending, timeout = sys.argv[5], timedelta(seconds=float(sys.argv[6]))
    moment, job, step_of_fault = sys.argv[7], sys.argv[8], int(sys.argv[9])
    me = int(os.environ["RANK"])
    made: list[gm.Gangs] = []
    fault = Fault(me, kind, made) if me == victim else None
    strike_later = None  # a fault in setup strikes from a timer, even after 0 s
    if fault is not None and (delay > 0 or moment == "setup"):
        strike_later = threading.Timer(delay, fault.strike)
    if fault is None:
        write_results(me, {"pid": os.getpid(), "started": time.time()})
    elif strike_later is not None and moment == "setup":
        strike_later.start()
    try:
        root = gm.setup_root_gang(torch.device("cpu"), timeout=timeout)
        sizes = (
            {"pp": 2}
            if job.startswith("pp")
            else {"tp": 2}
            if job == "tp_fsdp"
            else {"dp_replicate": 2}
        )
        gangs = gm.create_gangs(root, **sizes)
        made.append(gangs)
        with gangs if ending != "torch" else contextlib.nullcontext(gangs):
            train(job, gangs, fault, moment, step_of_fault, strike_later)
    except gm.GangError as ex:
        found = json.loads((Path(sys.argv[1]) / f"rank{me}.json").read_text())
        found.update(error=str(ex), culprits=list(ex.culprits), cause=str(ex.__cause__))
        write_results(me, {**found, "at": time.time()})
        if kind in ("sigstop", "hang"):
            end_victim(victim)
        if ending == "catch":
            sys.exit(1)
        raise
    except RuntimeError:  # torch's own error, left uncaught: its last words say the rest
        if fault is None and kind in ("sigstop", "hang"):
            atexit.register(ended, me, victim)  # after the last words, as the process ends
        raise


def ended(me: int, victim: int) -> None:
    """Say that this survivor ended of torch's error; the last to say so ends the victim."""
    found = json.loads((Path(sys.argv[1]) / f"rank{me}.json").read_text())
    write_results(me, {**found, "ended": time.time()})
    end_victim(victim)


if __name__ == "__main__":
    main()
