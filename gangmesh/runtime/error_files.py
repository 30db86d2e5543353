"""torchelastic's error files, written so that torchrun's summary names the rank that broke.

torchrun (every supported torch) reads the error file (``TORCHELASTIC_ERROR_FILE``) of each
worker that ended with an error before it stopped the others, takes the failure's time from
the file (whole seconds) or, where there is none, the moment it noticed the end, and names
the earliest as the "Root Cause", ties going to the lowest local rank. A killed or exited
rank writes no file, and torchrun may notice its end long after a survivor's (as late as its
``--monitor-interval``), so without help a survivor is named.

So a survivor that names a culprit on its own host writes the culprit's file where the
culprit has none (dated a second before the survivor's collective failed: it broke no later
than that), and its own file, dated a second after; a survivor that ends then first lets
those culprits end, killing a stopped one, so that torchrun counts them. The culprit's path
comes from the failure reports, where each process leaves it when its root gang is made.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Iterable

from gangmesh.runtime import peer_state

log = logging.getLogger("gangmesh")

_POLL = 0.02
"""Seconds between two looks at a culprit that is ending."""


def own_path() -> str:
    """This process's error file; empty where no torchelastic agent watches it."""
    return os.environ.get("TORCHELASTIC_ERROR_FILE", "")


def write(path: str, message: str, callstack: str, seconds: float) -> None:
    """Write an error file at ``path`` as torchelastic's ErrorHandler does, dated ``seconds``;
    in one step (a file torchrun reads is whole or absent)."""
    data = {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": callstack, "timestamp": str(int(seconds))},
        }
    }
    partial = f"{path}.{os.getpid()}.partial"
    try:
        with open(partial, "w") as fp:
            json.dump(data, fp)
        os.replace(partial, path)
    except OSError as ex:
        log.debug("writing the error file %s failed: %s", path, ex)


def write_for_culprit(path: str, description: str, failed_at: float) -> None:
    """Write a culprit's file in its name, unless it wrote one itself (it raised)."""
    if not path or os.path.exists(path):
        return
    what = f"{description} (seen by a survivor)"
    write(path, what, what, failed_at - 1)


_pending: set[int] = set()
"""The pids of the culprits on this host that this process named and has not seen end."""


def remember(pids: Iterable[int]) -> None:
    """Culprits on this host whose end this process waits for before it ends itself."""
    _pending.update(pids)


def let_culprits_end(bound: float) -> None:
    """Wait up to ``bound`` seconds for the culprits this process named on its host to end;
    under torchrun, a stopped one is killed first (torchrun would kill it later anyway), so
    that torchrun sees it end before this process."""
    deadline = time.monotonic() + bound
    watched = own_path() != ""
    while _pending and time.monotonic() < deadline:
        for pid in list(_pending):
            fate = peer_state.fate(pid, None)
            if fate is None:
                continue
            if watched and peer_state.is_stopped(pid):
                _kill(pid)
                continue
            _pending.discard(pid)
        if _pending:
            time.sleep(_POLL)  # the culprit's exit is not signalled to this process
    _pending.clear()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as ex:
        log.debug("killing stopped culprit %d failed: %s", pid, ex)
