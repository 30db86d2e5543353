"""One daemon thread that makes the calls handed to it, one after another, each caller waiting
a bounded time: a store connection's calls, where torch's client may wait without end (a
server that is stopped, a host cut off), never hold the thread that asked."""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_Item = tuple[Callable[[], Any], "concurrent.futures.Future[Any]"]


class CallThread:
    """A daemon thread that makes the calls handed to it, in order.

    A call that does not end in time is left to the thread (which the process does not wait
    for at exit); later calls queue behind it and give up in their turn, unless the owner
    drops the thread (:attr:`held`) and starts another.
    """

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self.held = False
        """Whether a call was given up on while the thread was in it."""
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            work, done = item
            try:
                done.set_result(work())
            except BaseException as ex:  # handed to the caller
                done.set_exception(ex)

    def call(self, work: Callable[[], T], bound: float) -> T:
        """``work()`` on the thread, its result or what it raised.

        :raises TimeoutError: it did not end within ``bound`` seconds.
        """
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._calls.put((work, done))
        try:
            return done.result(timeout=bound)
        except concurrent.futures.TimeoutError:
            self.held = True
            raise TimeoutError(f"no answer within {bound:g} s") from None

    def send(self, work: Callable[[], Any]) -> None:
        """``work()`` on the thread, without waiting for it."""
        self._calls.put((work, concurrent.futures.Future()))

    def end(self, bound: float) -> None:
        """End the thread once its calls are done, waiting up to ``bound`` seconds for it."""
        self._calls.put(None)
        self._thread.join(bound)


_shared: dict[int, CallThread] = {}
"""The thread of each store connection in use, by the connection's id (see :func:`of`)."""


def of(key: int, name: str) -> CallThread:
    """The thread that makes the calls of the connection ``key`` (made on first use)."""
    thread = _shared.get(key)
    if thread is None:
        thread = _shared[key] = CallThread(name)
    return thread


def forget(key: int) -> None:
    """Drop the thread of connection ``key``, held by a call given up on (it ends with it)."""
    _shared.pop(key, None)


def end(key: int) -> None:
    """End the thread of connection ``key`` once its calls are done, not waiting for it (its
    owner closes the connection)."""
    thread = _shared.pop(key, None)
    if thread is not None:
        thread.end(0)


def end_all(bound: float) -> None:
    """End every connection's thread once its calls are done (at exit, and between two tests
    that share processes); the next call makes a new one."""
    for thread in _shared.values():
        thread.end(bound)
    _shared.clear()
