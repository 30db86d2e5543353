"""Ranks that enter different collectives, 4 gloo processes (tp 2 x dp 2, timeout 4 s).

    desync.py OUT op|shape|gang

After three steps in step: "op", rank 3 broadcasts on its tp gang where rank 2 all-reduces;
"shape", rank 3 all-reduces 4 values where rank 2 all-reduces 8; "gang", a cycle: rank 0
enters tp, rank 1 dp, rank 3 tp and rank 2 dp, each waiting for a peer in the other gang.
A rank whose call succeeds goes on to a barrier of every rank. Every rank writes when it
entered its call and the GangError it got.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

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
    write_results(me, {"entered": entered})
    try:
        if mode == "op" and me == 3:
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


if __name__ == "__main__":
    main()
