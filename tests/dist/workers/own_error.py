"""A rank's own error, not a collective's: nobody else is blamed or ended for it.

    own_error.py OUT store|backend-caught

"store": inside ``with gangs:`` rank 1 asks a TCPStore of its own for a key nobody sets (1 s
timeout) while ranks 0, 2 and 3 spend 3 s in their own code (loading data, say), then enter
the next collective. Rank 1 dies of torch's DistStoreError, which is its own error: every
other rank names rank 1 and how it broke, and nobody ends a healthy rank.

"backend-caught": rank 3 exits at step 2; the others train through torch's own collectives
(dist.all_reduce on the tp group) inside ``with gangs:`` and catch the error the block lets
out with ``except`` for the error type torch raised there, as a program written for torch
does; they write whether it was caught and what it says.
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

TIMEOUT = timedelta(seconds=4)
OWN_WORK = 3.0


def own_store_error(gangs: gm.Gangs, me: int) -> None:
    with gangs:
        gangs.root.barrier()
        if me == 1:
            write_results(me, {"pid": os.getpid(), "broke_at": time.time()})
            mine = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=1))
            mine.get("never-set")
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
        signal.sigtimedwait([signal.SIGUSR1], OWN_WORK)  # the rank's own slow work
        try:
            gangs.root.barrier()
        except gm.GangError as ex:
            write_results(me, {"pid": os.getpid(), "error": str(ex), "culprits": list(ex.culprits)})
            raise


def torch_error_caught(gangs: gm.Gangs, me: int) -> None:
    kinds: tuple[type[BaseException], ...] = (dist.DistBackendError, RuntimeError)
    try:
        with gangs:
            for step in range(100):
                if me == 3 and step == 2:
                    write_results(me, {"pid": os.getpid(), "broke_at": time.time()})
                    os._exit(3)
                dist.all_reduce(torch.ones(4), group=gangs.tp.as_process_group())
                gangs.root.barrier()
    except kinds as ex:  # what a torch program catches
        caught = [kind.__name__ for kind in kinds if isinstance(ex, kind)]
        culprits = list(getattr(ex, "culprits", ()))
        cause = type(ex.__cause__).__name__ if ex.__cause__ is not None else ""
        write_results(me, {"pid": os.getpid(), "error": str(ex), "type": type(ex).__name__,
                           "caught_as": caught, "culprits": culprits, "cause": cause})  # fmt: skip
        sys.exit(1)


def main() -> None:
    join_job(timedelta(seconds=30))
    root = gm.setup_root_gang(timeout=TIMEOUT)
    gangs = gm.create_gangs(root, tp=2)
    {"store": own_store_error, "backend-caught": torch_error_caught}[sys.argv[2]](gangs, root.rank)


if __name__ == "__main__":
    main()
