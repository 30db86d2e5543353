"""A user's training loop on 4 processes (tp = 2, timeout 10 s) in which rank 3 breaks at step 5.

    culprit.py OUT raise|sigkill|sigstop|exit|stuck [catch|catch-exit-at-once|catch-stopped-exit-7]

"stuck": rank 3 waits for a signal instead of entering the collective, alive and answering
nothing (a rank busy elsewhere).

Rank 3 writes when and how it breaks; every other rank writes the GangError it gets, then
lets it go uncaught, as a user's script would, or with "catch" ends with ``sys.exit(1)`` at once,
as a training loop that logs the error and exits does ("catch-exit-at-once": ``os._exit(1)``,
no exit handler run; "catch-stopped-exit-7": SIGTERM arrives, as from a launcher stopping the
job, then ``sys.exit(7)``). A stopped rank 3 is woken once every survivor
has written its error, so that it ends with the job instead of lingering.
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

import torch
from common import write_results

import gangmesh as gm

TIMEOUT = timedelta(seconds=10)
CULPRIT = 3
STEP = 5


def break_down(mode: str) -> None:
    """What rank 3 does at step 5."""
    if mode == "raise":
        raise ValueError(f"step {STEP}: the loss is NaN\nsecond line of the message")
    if mode == "exit":
        sys.exit(3)
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "sigstop":
        os.kill(os.getpid(), signal.SIGSTOP)
        os._exit(1)  # woken once the others have their errors
    if mode == "stuck":
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
        signal.sigtimedwait([signal.SIGUSR1], 120)
        os._exit(1)  # released once the others have their errors


def main() -> None:
    mode = sys.argv[2]
    root = gm.setup_root_gang(timeout=TIMEOUT)
    gangs = gm.create_gangs(root, tp=2)
    me = root.rank
    try:
        for step in range(1000):
            if me == CULPRIT and step == STEP:
                write_results(me, {"pid": os.getpid(), "broke_at": time.time()})
                break_down(mode)
            activations = torch.ones(8)
            gangs.tp.all_reduce(activations, gm.ReduceOperation.SUM)
            loss = activations.sum().reshape(1)
            root.all_reduce(loss, gm.ReduceOperation.SUM)
    except gm.GangError as ex:
        write_results(
            me,
            {
                "error": str(ex),
                "culprits": list(ex.culprits),
                "at": time.time(),
                "gangmesh": gm.__file__,
            },
        )
        out = Path(sys.argv[1])
        wake = {"sigstop": signal.SIGCONT, "stuck": signal.SIGUSR1}.get(mode)
        if wake and all((out / f"rank{r}.json").exists() for r in range(CULPRIT)):
            # the last survivor to write (each checks after writing) wakes rank 3
            culprit = json.loads((out / f"rank{CULPRIT}.json").read_text())
            with contextlib.suppress(ProcessLookupError):  # torchrun may have ended it
                os.kill(culprit["pid"], wake)
        if sys.argv[3:] == ["catch"]:
            sys.exit(1)
        if sys.argv[3:] == ["catch-exit-at-once"]:
            os._exit(1)
        if sys.argv[3:] == ["catch-stopped-exit-7"]:
            os.kill(os.getpid(), signal.SIGTERM)
            sys.exit(7)
        raise


if __name__ == "__main__":
    main()
