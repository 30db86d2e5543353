"""Deliberate faults on 4 gloo processes; each rank writes what it saw and when.

    faults.py OUT absent     rank 3 never enters an all_reduce on the sub-gang [1, 2, 3]
    faults.py OUT sigkill    rank 2 is SIGKILLed in the middle of a loop of all_reduces
    faults.py OUT monitored  ranks 2 and 3 skip a monitored barrier
    faults.py OUT monitored_mesh  rank 3 skips a monitored barrier of its tp gang [2, 3]

Each rank joins the job first with a long timeout (see common.join_job), so that only the
setup and the fault run under the short one. Ranks that stay out of a collective meet the
others afterwards at a barrier of a group with a long timeout, so that the fault is a hang,
not a crash.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from common import join_job, write_results

import gangmesh as gm

SHORT = timedelta(seconds=5)
LONG = timedelta(seconds=90)


def main() -> None:
    mode = sys.argv[2]
    join_job(LONG)
    root = gm.setup_root_gang(timeout=SHORT, monitored=mode.startswith("monitored"))
    me = root.rank
    meeting = dist.new_group(timeout=LONG)  # where everyone meets after the fault
    result: dict[str, object] = {"mode": mode}
    started = time.time()
    try:
        if mode == "absent":
            sub = root.create_gang([1, 2, 3])
            if sub is not None and me != 3:
                started = time.time()
                sub.all_reduce(torch.ones(1), gm.ReduceOperation.SUM)
        elif mode == "sigkill":
            gangs = gm.create_gangs(root, tp=2)
            for step in range(1000):
                if me == 2 and step == 20:
                    write_results(me, {"mode": mode, "killed_at": time.time()})
                    os.kill(os.getpid(), signal.SIGKILL)
                root.all_reduce(torch.ones(1024), gm.ReduceOperation.SUM)
        elif mode == "monitored" and me not in (2, 3):
            started = time.time()
            root.barrier()
        elif mode == "monitored_mesh":
            gangs = gm.create_gangs(root, tp=2)
            if me != 3:
                started = time.time()
                gangs.tp.barrier()
    except gm.GangError as ex:
        result.update(
            error=str(ex),
            cause=type(ex.__cause__).__name__,
            seconds=time.time() - started,
            culprits=list(ex.culprits),
        )
        result["errored_at"] = time.time()
        if mode == "sigkill":
            gangs.close()  # mesh groups, then the root, with a peer gone
            gangs.close()
        root.close()
        root.close()
        result["closed_twice"] = True
    if mode != "sigkill":
        dist.barrier(group=meeting)
    write_results(me, result)


main()
