"""Under torchrun on two hosts: the first process of host1's first rank 0 dies while host0's
ranks keep working among themselves; torchrun restarts the job on both hosts (host0's agent
because host1's rejoined) and the new attempt must set up its gangs again.

host_restart.py OUT
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from pathlib import Path

import torch
from common import write_results

import gangmesh as gm

out, host = Path(os.sys.argv[1]), socket.gethostname()
first = not (out / f"started-{os.environ['RANK']}-{host}").exists()
(out / f"started-{os.environ['RANK']}-{host}").write_text("")
root = gm.setup_root_gang(timeout=timedelta(seconds=5))
gangs = gm.create_gangs(root, dp_replicate=2, tp=int(os.environ["LOCAL_WORLD_SIZE"]))
total = torch.ones(1)
root.all_reduce(total, gm.ReduceOperation.SUM)
if first and host == "host1" and os.environ["LOCAL_RANK"] == "0":
    os._exit(1)  # a crash on host1: no cleanup, no goodbye
if first and host == "host0":
    # Host0's ranks go on working among themselves, healthy, until their agent restarts
    # them (the loop is only a bound).
    for _ in range(10**7):
        gangs.tp.all_reduce(torch.ones(1), gm.ReduceOperation.SUM)
gangs.tp.all_reduce(total, gm.ReduceOperation.SUM)
tp_hosts = gm.all_gather_objects(gangs.tp, host)
root.barrier()

write_results(
    root.rank,
    {
        "first": first,
        "sum": total.item(),
        "tp_hosts": tp_hosts,
        "restart_count": int(os.environ["TORCHELASTIC_RESTART_COUNT"]),
    },
)
gangs.close()
root.close()
