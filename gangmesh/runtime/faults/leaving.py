"""What a process lets go of first when it ends: what processes outside its job wait on.

A replica group's heartbeat keeps the other groups' quorums waiting for it. A process that
ends (its exit handlers run, or its launcher stops it with SIGTERM) may spend seconds more
naming a failure and shutting its groups down; it stops that heartbeat before, so the other
groups go on without it at once.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable

log = logging.getLogger("gangmesh")

_lock = threading.Lock()
_methods: list[weakref.WeakMethod[Callable[[], None]]] = []


def on_leaving(method: Callable[[], None]) -> None:
    """Call ``method`` once when this process ends, before anything else gangmesh does.

    :param method: a bound method, held weakly: an object collected before has let go already.
    """
    with _lock:
        _methods.append(weakref.WeakMethod(method))


def forget(method: Callable[[], None]) -> None:
    """Do not call ``method`` when the process ends (what it lets go of is let go already)."""
    with _lock:
        _methods[:] = [held for held in _methods if held() not in (None, method)]


def leave() -> None:
    """Call every method still held, the latest first, and forget them; one that fails is
    logged."""
    with _lock:
        methods = [held() for held in reversed(_methods)]
        _methods.clear()
    for method in methods:
        if method is None:
            continue
        try:
            method()
        except Exception as ex:  # the process ends anyway: what is left goes with it
            log.debug("letting go of %r as the process ends failed: %s", method, ex)
