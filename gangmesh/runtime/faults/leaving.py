"""What a process lets go of first when it ends: what processes outside its job wait on.

A replica group's heartbeat keeps the other groups' quorums waiting for it. A process that
ends (an uncaught error, its exit handlers, its root gang closed, or its launcher's SIGTERM)
may spend seconds more naming a failure, letting the culprits end first and keeping the
store for the survivors; it stops that heartbeat before, so the other groups go on without
it at once.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger("gangmesh")

_lock = threading.Lock()
_held: list[tuple[weakref.ref[Any], Callable[[Any], None]]] = []


def on_leaving(owner: object, let_go: Callable[[Any], None]) -> None:
    """Call ``let_go(owner)`` once when this process ends, before it names a failure.

    :param owner: what is let go of, held weakly: collected before, it was let go already.
    :param let_go: how; it must not wait on the main thread.
    """
    with _lock:
        _held.append((weakref.ref(owner), let_go))


def forget(owner: object) -> None:
    """Do not let go of ``owner`` when the process ends (it is let go of already)."""
    with _lock:
        _held[:] = [(ref, let_go) for ref, let_go in _held if ref() not in (None, owner)]


def leave() -> None:
    """Let go of every owner still held, the latest first, and forget them; a failure is
    logged."""
    with _lock:
        held = [(ref(), let_go) for ref, let_go in reversed(_held)]
        _held.clear()
    for owner, let_go in held:
        if owner is None:
            continue
        try:
            let_go(owner)
        except Exception as ex:  # the process ends anyway: what is left goes with it
            log.warning("letting go of %r as the process ends failed: %s", owner, ex)


def leave_within(seconds: float) -> None:
    """:func:`leave` from a thread of its own, waited for ``seconds`` at most (the caller
    may be a signal's thread while the main thread holds what leaving takes)."""
    leaving = threading.Thread(target=leave, name="gangmesh-leaving", daemon=True)
    leaving.start()
    leaving.join(seconds)
