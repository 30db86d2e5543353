"""What a process lets go of first when it ends: what processes outside its job wait on.

A replica group's heartbeat keeps the other groups' quorums waiting for it. A process that
ends (its exit handlers run, or its launcher stops it with SIGTERM) may spend seconds more
naming a failure and shutting its groups down; it stops that heartbeat before, so the other
groups go on without it at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("gangmesh")

_lock = threading.Lock()
_callbacks: list[Callable[[], None]] = []


def on_leaving(callback: Callable[[], None]) -> None:
    """Call ``callback`` (once) when this process ends, before anything else gangmesh does."""
    with _lock:
        _callbacks.append(callback)


def forget(callback: Callable[[], None]) -> None:
    """Do not call ``callback`` when the process ends (what it lets go of is let go already)."""
    with _lock:
        if callback in _callbacks:
            _callbacks.remove(callback)


def leave() -> None:
    """Call every callback, the latest first, and forget them; one that fails is logged."""
    with _lock:
        callbacks = _callbacks[::-1]
        _callbacks.clear()
    for callback in callbacks:
        try:
            callback()
        except Exception as ex:  # the process ends anyway: what is left goes with it
            log.debug("letting go of %r as the process ends failed: %s", callback, ex)
