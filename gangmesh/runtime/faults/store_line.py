"""A store connection of its own, used by one daemon thread, every call bounded.

The failure reports (:mod:`gangmesh.runtime.faults.failure_reports`) go through it: where the
store's host cannot be reached, a call gives up in its bound and the caller goes on, and
the connection torch's groups use is never held.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from datetime import timedelta
from typing import Any, TypeVar

import torch.distributed as dist

T = TypeVar("T")


class Line:
    """A store client of its own, used by one daemon thread; every call bounded.

    A call that does not end in time is left to its thread (which the process does not
    wait for at exit); later calls queue behind it and give up in their turn.
    """

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[Any], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._connect = connect
        self._thread = threading.Thread(
            target=self._serve, name="gangmesh-failure-reports", daemon=True
        )
        self._thread.start()

    def _serve(self) -> None:
        store = None
        while True:
            item = self._calls.get()
            if item is None:
                return
            call, done = item
            try:
                if store is None:
                    store = self._connect()
                done.set_result(call(store))
            except Exception as ex:  # handed to the caller
                done.set_exception(ex)

    def call(self, work: Callable[[Any], T], bound: float) -> T:
        """``work(store)`` on the thread; TimeoutError after ``bound`` seconds."""
        done: Future[T] = Future()
        self._calls.put((work, done))
        return done.result(timeout=bound)

    def send(self, work: Callable[[Any], Any]) -> None:
        """``work(store)`` on the thread, without waiting for it."""
        self._calls.put((work, Future()))

    def end(self, bound: float) -> None:
        """End the thread once its calls are done, waiting up to ``bound`` seconds for it."""
        self._calls.put(None)
        self._thread.join(bound)


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
