"""A store connection of its own, used by one daemon thread, every call bounded.

The failure reports (:mod:`gangmesh.runtime.faults.failure_reports`) go through it: where the
store's host cannot be reached, a call gives up in its bound and the caller goes on, and
the connection torch's groups use is never held.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import torch.distributed as dist

from gangmesh.runtime.call_thread import CallThread

T = TypeVar("T")


class Line:
    """A store client of its own, used by one daemon thread; every call bounded.

    A call that does not end in time is left to its thread (which the process does not wait
    for at exit); the next call gets a new connection and thread, so that a store that
    answers again is reached again.
    """

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self._store: Any = None
        self._thread = CallThread("gangmesh-failure-reports")

    def _with_store(self, work: Callable[[Any], T]) -> Callable[[], T]:
        def run() -> T:
            if self._store is None:
                self._store = self._connect()
            return work(self._store)

        return run

    def _current(self) -> CallThread:
        """The thread of the calls: a new one, with a new connection, where a call was given
        up on."""
        if self._thread.held:
            self._thread.end(0)
            self._thread, self._store = CallThread("gangmesh-failure-reports"), None
        return self._thread

    def call(self, work: Callable[[Any], T], bound: float) -> T:
        """``work(store)`` on the thread; TimeoutError after ``bound`` seconds."""
        return self._current().call(self._with_store(work), bound)

    def send(self, work: Callable[[Any], Any]) -> None:
        """``work(store)`` on the thread, without waiting for it."""
        self._current().send(self._with_store(work))

    def end(self, bound: float) -> None:
        """End the thread once its calls are done, waiting up to ``bound`` seconds for it."""
        self._thread.end(bound)


_lines: dict[tuple[str, int], Line] = {}
"""One line per store address, kept across setups (a new connection costs the store a
lookup of this process's address)."""


def line_to(address: str, port: int, timeout: timedelta, prefix: str) -> Line:
    """The line to the store at ``address``:``port``, its keys under ``prefix`` (made on
    first use)."""
    line = _lines.get((address, port))
    if line is None:

        def connect() -> Any:
            client = dist.TCPStore(  # type: ignore[attr-defined]
                address, port, is_master=False, timeout=timeout, wait_for_workers=False
            )
            return dist.PrefixStore(prefix, client)  # type: ignore[attr-defined]

        line = _lines[(address, port)] = Line(connect)
    return line


def end_all(bound: float) -> None:
    """End every line's thread, waiting up to ``bound`` seconds for each; a thread that a
    store which does not answer holds ends with the process."""
    for line in _lines.values():
        line.end(bound)
    _lines.clear()
