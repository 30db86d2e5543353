"""Rank 0 keeps the job's store it serves until the slower survivors have read the reports.

    keeper.py OUT

4 gloo processes (tp 2), no launcher's agent (rank 0 serves the store), timeout 4 s. Rank 1
is SIGKILLed; rank 0's next all_reduce, on their tp gang, fails at once, and rank 0 ends as
a script that catches the error does. Ranks 2 and 3 come to an all_reduce of every rank
later: once rank 0 has ended, or after 3 s (work they were still doing), whichever is
first. Their GangErrors must still name rank 1, from the reports in rank 0's store.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from datetime import timedelta

import torch
from common import write_results

import gangmesh as gm

LATE_S = 3.0
"""How long ranks 2 and 3 stay away at most: less than rank 0 keeps the store."""


def until_ended_or_late(pid: int) -> None:
    """Return once process ``pid`` (on this host) has ended, or after :data:`LATE_S`."""
    handle = os.pidfd_open(pid)
    try:
        select.select([handle], [], [], LATE_S)
    finally:
        os.close(handle)


def main() -> None:
    root = gm.setup_root_gang(timeout=timedelta(seconds=4))
    gangs = gm.create_gangs(root, tp=2)
    me = root.rank
    write_results(me, {"pid": os.getpid()})
    pids = torch.zeros(4, dtype=torch.int64)
    root.all_gather(pids, torch.tensor([os.getpid()]))
    if me == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    if me in (2, 3):
        until_ended_or_late(int(pids[0]))
    started = time.time()
    try:
        (gangs.tp if me == 0 else root).all_reduce(torch.ones(1), gm.ReduceOperation.SUM)
    except gm.GangError as ex:
        found = {"error": str(ex), "culprits": list(ex.culprits), "seconds": time.time() - started}
        write_results(me, {"pid": os.getpid(), **found})
        sys.exit(1)


if __name__ == "__main__":
    main()
