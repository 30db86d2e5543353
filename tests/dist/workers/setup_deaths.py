"""A rank that dies or stops during setup, 4 gloo processes (timeout 4 s); each survivor
writes the GangError it got.

    setup_deaths.py OUT connecting   rank 2 is SIGKILLed as its default group starts
    setup_deaths.py OUT stopped      rank 2 stops (SIGSTOP) between setup_root_gang and
                                     create_gangs, until the last survivor to fail kills it
    setup_deaths.py OUT never        rank 2 ends before it reaches the job's store; ranks
                                     1 and 3 would wait 60 s: they hear rank 0's finding
    setup_deaths.py OUT rank0        rank 0, which serves the job's store, ends as the
                                     others set up

Except in "never", every rank first joins the job with a long timeout (see common.join_job),
so that only the setup that fails runs under the short one.
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

import torch.distributed as dist
from common import join_job, write_results

import gangmesh as gm

SHORT = timedelta(seconds=4)
LONG = timedelta(seconds=60)
VICTIM = 2


def killed_as_it_connects() -> None:
    """Rank 2's default group: the process is SIGKILLed as the group starts."""

    def start(*args: object, **kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    dist.init_process_group = start


def kill_the_stopped_rank(out: Path, victim: int) -> None:
    """The last survivor to write its error (each looks after writing) kills the victim."""
    found = [json.loads(path.read_text()) for path in sorted(out.glob("rank*.json"))]
    if sum("error" in got for got in found) == 3:
        pid = next(got["pid"] for got in found if got.get("rank") == victim)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    rank = int(os.environ["RANK"])
    victim = 0 if mode == "rank0" else VICTIM
    write_results(rank, {"rank": rank, "pid": os.getpid()})
    if mode == "never" and rank == victim:
        os._exit(1)
    if mode != "never":
        join_job(LONG)
    if rank == victim:
        if mode == "rank0":
            os._exit(1)
        if mode == "connecting":
            killed_as_it_connects()
    started = time.time()
    try:
        late = mode == "never" and rank != 0  # rank 0 tells them what it found
        root = gm.setup_root_gang(timeout=LONG if late else SHORT)
        if rank == victim:  # stopped
            os.kill(os.getpid(), signal.SIGSTOP)
        gm.create_gangs(root, tp=2)
    except gm.GangError as ex:
        write_results(rank, {"rank": rank, "pid": os.getpid(), "error": str(ex),
                             "culprits": list(ex.culprits), "seconds": time.time() - started})  # fmt: skip
        if mode == "stopped":
            kill_the_stopped_rank(out, victim)


if __name__ == "__main__":
    main()
