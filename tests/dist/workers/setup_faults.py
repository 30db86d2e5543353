"""Processes that disagree or stay away at setup, 4 gloo processes; each writes what it saw.

    setup_faults.py OUT mismatch     rank 1 asks create_gangs for tp=2, the others for tp=1
    setup_faults.py OUT invalid      rank 1 asks for tp=3, which 4 processes cannot have
    setup_faults.py OUT absent       rank 3 never calls create_gangs
    setup_faults.py OUT absent0      rank 0 never calls create_gangs
    setup_faults.py OUT again        every rank sets up, closes, and sets up again
    setup_faults.py OUT lonely       run alone as rank 1: rank 0 and its store never come

Each rank but the lonely one joins the job first with a long timeout (see common.join_job),
so that only the setup and the fault run under the short one. Ranks that stay out meet the
others afterwards at a barrier of a group with a timeout long enough that the fault is a
hang, not a crash.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from common import join_job, write_results

import gangmesh as gm

SHORT = timedelta(seconds=5)
LONG = timedelta(seconds=60)


def lonely() -> None:
    started = time.time()
    try:
        gm.setup_root_gang(timeout=SHORT)
    except gm.GangError as ex:
        write_results(
            1, {"kind": type(ex).__name__, "error": str(ex), "seconds": time.time() - started}
        )


def main() -> None:
    mode = sys.argv[2]
    if mode == "lonely":
        lonely()
        return
    join_job(LONG)
    root = gm.setup_root_gang(timeout=SHORT)
    me = root.rank
    meeting = dist.new_group(timeout=LONG)  # where everyone meets at the end
    result: dict[str, object] = {"mode": mode}
    started = time.time()
    try:
        if mode == "mismatch":
            gm.create_gangs(root, tp=2 if me == 1 else 1)
        elif mode == "invalid":
            gm.create_gangs(root, tp=3 if me == 1 else 1)
        elif mode in ("absent", "absent0") and me != (3 if mode == "absent" else 0):
            gm.create_gangs(root, tp=2)
        elif mode == "again":
            root.close()
            root = gm.setup_root_gang(timeout=SHORT)
            total = torch.ones(1)
            gm.create_gangs(root, tp=2).tp.all_reduce(total, gm.ReduceOperation.SUM)
            result["sum"] = total.item()
    except (ValueError, gm.GangError) as ex:
        result.update(kind=type(ex).__name__, error=str(ex), seconds=time.time() - started)
    if mode != "again":
        dist.barrier(group=meeting)
    write_results(me, result)


main()
