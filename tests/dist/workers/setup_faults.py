"""Processes that disagree or stay away at setup, 4 gloo processes; each writes what it saw.

    setup_faults.py OUT mismatch     rank 1 asks create_gangs for tp=2, the others for tp=1
    setup_faults.py OUT invalid      rank 1 asks for tp=3, which 4 processes cannot have
    setup_faults.py OUT absent       rank 3 never calls create_gangs
    setup_faults.py OUT absent0      rank 0 never calls create_gangs
    setup_faults.py OUT again        every rank sets up, closes, and sets up again
    setup_faults.py OUT away3        rank 3 never calls setup_root_gang
    setup_faults.py OUT away0        rank 0 never calls setup_root_gang (it keeps serving)
    setup_faults.py OUT lonely       run alone as rank 1: rank 0 and its store never come

Each rank but the lonely one joins the job first with a long timeout (see common.join_job),
so that only the setup and the fault run under the short one. Ranks that stay out meet the
others afterwards at a barrier of a group with a timeout long enough that the fault is a
hang, not a crash.
"""

from __future__ import annotations

import os
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


def stays_away(away: int) -> None:
    """Every rank but ``away`` sets up again (rank 0 last: it must come to the others'
    meeting in time although it spends its timeout announcing the setup to ``away``); they
    meet afterwards through a plain store client (rank 0's process serves the store, so it
    must outlive the others' setup). The
    clients connect during the first setup, as join_job does, so that the server's lookups
    of their addresses fall in the long timeout."""
    root = gm.setup_root_gang(timeout=LONG)
    address, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    meeting = dist.TCPStore(address, port, 4, False, timeout=LONG)  # type: ignore[attr-defined]
    root.barrier()
    root.close()
    rank = int(os.environ["RANK"])
    result: dict[str, object] = {"mode": f"away{away}"}
    if rank != away:
        if away != 0:  # rank 0 starts last, so the others' timeouts end before its own does
            if rank == 0:
                meeting.wait(["test/started"])
            elif meeting.add("test/starting", 1) == 2:
                meeting.set("test/started", "1")
        started = time.time()
        try:
            gm.setup_root_gang(timeout=SHORT)
        except gm.GangError as ex:
            result.update(kind=type(ex).__name__, error=str(ex), seconds=time.time() - started,
                          culprits=list(getattr(ex, "culprits", ())))  # fmt: skip
        if meeting.add("test/finished", 1) == 3:
            meeting.set("test/all", "1")
    meeting.wait(["test/all"])
    write_results(rank, result)


def main() -> None:
    mode = sys.argv[2]
    if mode == "lonely":
        lonely()
        return
    if mode.startswith("away"):
        stays_away(int(mode[4:]))
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
        result.update(kind=type(ex).__name__, error=str(ex), seconds=time.time() - started,
                          culprits=list(getattr(ex, "culprits", ())))  # fmt: skip
    if mode != "again":
        dist.barrier(group=meeting)
    write_results(me, result)


main()
