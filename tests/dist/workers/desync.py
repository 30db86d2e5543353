"""Ranks that enter different collectives, 4 gloo processes (tp 2 x dp 2, timeout 4 s).

    desync.py OUT op|shape|gang|hang

After three steps in step: "op", rank 3 broadcasts on its tp gang where rank 2 all-reduces;
"shape", rank 3 all-reduces 4 values where rank 2 all-reduces 8; "gang", a cycle: rank 0
enters tp, rank 1 dp, rank 3 tp and rank 2 dp, each waiting for a peer in the other gang.
A rank whose call succeeds goes on to a barrier of every rank. "hang": rank 3 enters no
collective (alive, until the last of the others to fail wakes it) while the others take
another step, tp then dp. Every rank writes when it entered its call and the GangError it got.
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

import gangmesh as gm

SUM = gm.ReduceOperation.SUM


def main() -> None:
    mode = sys.argv[2]
    root = gm.setup_root_gang(timeout=timedelta(seconds=4))
    gangs = gm.create_gangs(root, tp=2)
    me = root.rank
    for _ in range(3):
        gangs.tp.all_reduce(torch.ones(8), SUM)
        gangs.dp.all_reduce(torch.ones(8), SUM)
    entered = time.time()
    write_results(me, {"entered": entered, "pid": os.getpid()})
    if mode == "hang" and me == 3:
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
        signal.sigtimedwait([signal.SIGUSR1], 120)
        os._exit(0)
    try:
        if mode == "hang":
            gangs.tp.all_reduce(torch.ones(8), SUM)
            gangs.dp.all_reduce(torch.ones(8), SUM)
        elif mode == "op" and me == 3:
            gangs.tp.broadcast(torch.ones(8), source_rank=0)
        elif mode == "shape" and me == 3:
            gangs.tp.all_reduce(torch.ones(4), SUM)
        elif mode == "gang" and me in (1, 2):
            gangs.dp.all_reduce(torch.ones(8), SUM)
        else:
            gangs.tp.all_reduce(torch.ones(8), SUM)
        root.barrier()
    except gm.GangError as ex:
        found = {"error": str(ex), "culprits": list(ex.culprits), "at": time.time()}
        write_results(me, {**found, "entered": entered})
        if mode == "hang":
            wake_the_hung_rank()


def wake_the_hung_rank() -> None:
    """The last of ranks 0-2 to write its error (each looks after writing) wakes rank 3."""
    out = Path(sys.argv[1])
    found = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(4)]
    if all("error" in got for got in found[:3]):
        with contextlib.suppress(ProcessLookupError):
            os.kill(found[3]["pid"], signal.SIGUSR1)


if __name__ == "__main__":
    main()
