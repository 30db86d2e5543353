"""Under torchrun on two hosts: ranks loop on root all_reduces; at step 3 the first rank of
host1 cuts its host off the link. Each rank writes how its loop ended, where it can.

host_cut.py OUT
"""

from __future__ import annotations

import os
import socket
import sys
import time
from datetime import timedelta

import torch
from common import write_results

import gangmesh as gm
from gangmesh.testing.hosts import cut_host

TIMEOUT = timedelta(seconds=5)

root = gm.setup_root_gang(timeout=TIMEOUT)
host = socket.gethostname()
total = torch.ones(1)
try:
    for step in range(100_000):  # ends at the first collective the cut stops
        if step == 3 and host == "host1" and os.environ["LOCAL_RANK"] == "0":
            cut_host()
        started = time.monotonic()
        root.all_reduce(total, gm.ReduceOperation.SUM)
except gm.GangError as ex:
    waited = time.monotonic() - started
    write_results(root.rank, {"host": host, "error": str(ex), "waited": waited, "step": step})
    sys.exit(1)
