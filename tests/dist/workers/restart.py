"""A job whose rank 1 dies on the first attempt; torchrun restarts it and it must come back.

restart.py OUT [plain]           plain: the same job on raw torch.distributed, for comparison
restart.py OUT --die-by HOW      HOW: exit (os._exit, the default), raise or kill (SIGKILL)
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from common import write_results

import gangmesh as gm

TIMEOUT = timedelta(seconds=20)
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])

if "plain" in sys.argv[2:]:
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    tp = dist.new_group([rank - rank % 2, rank - rank % 2 + 1])
    total = torch.ones(1)
    dist.all_reduce(total)
    if attempt == 0 and rank == 1:
        os._exit(1)  # a crash: no cleanup, no goodbye
    dist.all_reduce(total, group=tp)
    dist.barrier()
    write_results(rank, {"attempt": attempt, "sum": total.item()})
    sys.exit(0)

root = gm.setup_root_gang(timeout=TIMEOUT)
gangs = gm.create_gangs(root, tp=2)
total = torch.ones(1)
root.all_reduce(total, gm.ReduceOperation.SUM)
if attempt == 0 and root.rank == 1:
    how = sys.argv[sys.argv.index("--die-by") + 1] if "--die-by" in sys.argv else "exit"
    if how == "raise":
        raise RuntimeError("rank 1 fails on the first attempt")
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(1)
gangs.tp.all_reduce(total, gm.ReduceOperation.SUM)
root.barrier()
write_results(root.rank, {"attempt": attempt, "sum": total.item()})
