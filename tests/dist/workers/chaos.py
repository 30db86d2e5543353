"""A training loop on 4 processes (dp_shard 2 x tp 2) in which one rank breaks at a drawn moment.

    chaos.py OUT VICTIM KIND DELAY ENDING TIMEOUT MOMENT

VICTIM breaks DELAY seconds after MOMENT: "setup", the start of setup (before
``setup_root_gang``: the fault can strike inside it, gloo's connect included, inside
``create_gangs``, or in the first steps), or "loop", once its gangs are made. KIND "raise"
raises at its next step (an exception of the user's code), "exit" ends the process at once
(``os._exit(3)``), "sigkill" and "sigstop" are signals sent to itself, the three by a thread
of its own at that very moment, wherever the main thread is. Every other rank writes the
GangError it gets, then lets it go uncaught (ENDING "raise") or catches it and ends with
``sys.exit(1)`` at once (ENDING "catch"). KIND "hang" stops entering collectives at its next
step, alive (a rank stuck elsewhere); "desync" makes, at its next step, an all-reduce of its
own on the root gang that no peer makes. TIMEOUT is the root gang's timeout in seconds.
"""

from __future__ import annotations

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

import gangmesh as gm


def strike(kind: str, rank: int, broke: threading.Event) -> None:
    """Break this process as ``kind`` says, now (a raise waits for the next step)."""
    write_results(rank, {"pid": os.getpid(), "broke_at": time.time(), "kind": kind})
    if kind == "exit":
        os._exit(3)
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "sigstop":
        os.kill(os.getpid(), signal.SIGSTOP)
    broke.set()


def main() -> None:
    victim, kind, delay = int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    ending, timeout = sys.argv[5], timedelta(seconds=float(sys.argv[6]))
    moment = sys.argv[7]
    me = int(os.environ["RANK"])
    broke = threading.Event()
    strikes = threading.Timer(delay, strike, (kind, me, broke))
    if me != victim:
        write_results(me, {"pid": os.getpid(), "started": time.time()})
    elif moment == "setup":
        strikes.start()
    try:
        root = gm.setup_root_gang(timeout=timeout)
        gangs = gm.create_gangs(root, tp=2)
        if me == victim and moment == "loop":
            strikes.start()
        for step in range(1_000_000):
            if broke.is_set() and kind == "hang":
                signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
                signal.sigtimedwait([signal.SIGUSR1], 120)  # ended by a signal of another
            if broke.is_set() and kind == "desync":
                gangs.root.all_reduce(torch.ones(3), gm.ReduceOperation.SUM)
            if broke.is_set():
                raise ValueError(f"step {step}: the loss is NaN")
            activations = torch.ones(8)
            gangs.tp.all_reduce(activations, gm.ReduceOperation.SUM)
            loss = activations.sum().reshape(1)
            gangs.dp.all_reduce(loss, gm.ReduceOperation.SUM)
    except gm.GangError as ex:
        found = json.loads((Path(sys.argv[1]) / f"rank{me}.json").read_text())
        found.update(error=str(ex), culprits=list(ex.culprits), cause=str(ex.__cause__))
        write_results(me, {**found, "at": time.time()})
        if kind in ("sigstop", "hang"):
            end_victim(victim)
        if ending == "catch":
            sys.exit(1)
        raise


if __name__ == "__main__":
    main()
