"""Four ranks on two hosts loop on root all_reduces; at step 3 one rank of host1 kills every
process of its host (itself last), as a host that dies would. Each survivor writes how its
loop ended.

host_faults.py OUT
"""

from __future__ import annotations

import os
import signal
import socket
import time
from datetime import timedelta
from pathlib import Path

import torch
from common import write_results

import gangmesh as gm
from gangmesh.testing.hosts import this_host

TIMEOUT = timedelta(seconds=5)


def kill_this_host() -> None:
    """SIGKILL every process on this host but the bed's holder, this one last."""
    mine = os.stat("/proc/self/ns/net").st_ino
    spared = {os.getpid(), this_host().holder}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if os.stat(proc / "ns" / "net").st_ino == mine and int(proc.name) not in spared:
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            continue
    os.kill(os.getpid(), signal.SIGKILL)


root = gm.setup_root_gang(timeout=TIMEOUT)
host = socket.gethostname()
total = torch.ones(1)
result: dict[str, object] = {"host": host}
try:
    for step in range(100_000):  # ends at the first collective the dead host misses
        if step == 3 and host == "host1" and os.environ["LOCAL_RANK"] == "0":
            kill_this_host()
        started = time.monotonic()
        root.all_reduce(total, gm.ReduceOperation.SUM)
except gm.GangError as ex:
    result.update(error=str(ex), waited=time.monotonic() - started, step=step)
write_results(root.rank, result)
root.close()
