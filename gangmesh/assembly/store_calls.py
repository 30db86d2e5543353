"""Store calls that end: torch's store client waits without end for a server that is stopped
(SIGSTOP, a debugger) but still holds its connections, whatever timeout it was given.

Where rank 0 serves the job's store (no launcher's agent does), a rank 0 stopped during setup
would hold every other rank in its store call. Each call of a meeting runs in a thread of its
own (:class:`BoundedStore`) and is given up on where it has not returned within its own wait
and :data:`CALL_BOUND` seconds: it raises RuntimeError, as torch's store does where its server
is gone. The connection given up on stays with the thread that waits in it (a daemon); later
calls through it raise at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

CALL_BOUND = 2.0
"""Seconds a store call may take beyond its own wait (an answer takes milliseconds)."""
_given_up: set[int] = set()
"""The ids of the store connections given up on (each is kept alive by the thread in it)."""


class BoundedStore:
    """The calls of ``store`` (a torch store), each given up on where it does not end in time."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._connection = store
        while (inner := getattr(self._connection, "underlying_store", None)) is not None:
            self._connection = inner  # a PrefixStore's calls go through the store it wraps

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._store, name)

        def call(*args: Any) -> Any:
            waits = sum(a.total_seconds() for a in args if isinstance(a, timedelta))
            return self._bounded(lambda: method(*args), waits + CALL_BOUND)

        return call

    def _bounded(self, call: Callable[[], Any], seconds: float) -> Any:
        """``call()``, given up on after ``seconds``.

        :raises RuntimeError: it did not return in time, or an earlier call through the same
            connection did not (and what ``call`` raises).
        """
        if id(self._connection) in _given_up:
            raise RuntimeError("the job's store did not answer an earlier call")
        outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                outcome.append((True, call()))
            except BaseException as ex:  # handed to the caller
                outcome.append((False, ex))

        thread = threading.Thread(target=run, name="gangmesh-store-call", daemon=True)
        thread.start()
        thread.join(seconds)
        if not outcome:
            _given_up.add(id(self._connection))
            raise RuntimeError(f"the job's store did not answer within {seconds:g} s")
        returned, value = outcome[0]
        if not returned:
            raise value
        return value
