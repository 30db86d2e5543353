"""Store calls that end: torch's store client waits without end for a server that is stopped
(SIGSTOP, a debugger) but still holds its connections, whatever timeout it was given.

Where rank 0 serves the job's store (no launcher's agent does), a rank 0 stopped during setup
would hold every other rank in its store call. The calls of a meeting through one connection
are made by one thread of that connection's (:func:`gangmesh.runtime.call_thread.of`)
and each is given up on where it has not returned within its own wait and a margin that grows
with the job's timeout (:func:`margin`): it raises RuntimeError, as torch's store does where
its server is gone. The connection given up on stays with the thread that waits in it (a
daemon); later calls through it raise at once, and the next setup of the job connects anew
(:func:`given_up`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from gangmesh.runtime import call_thread

_given_up: dict[int, Any] = {}
"""The store connections given up on, by id: held here, so that no later store takes the id
while it is listed (the thread in a call given up on ends once the call returns)."""


def margin(timeout: timedelta) -> float:
    """Seconds a store call may take beyond its own wait, for a job of ``timeout``: an answer
    takes milliseconds, more where thousands of processes call one store at once."""
    return min(30.0, max(2.0, timeout.total_seconds() / 20))


def given_up(store: Any) -> bool:
    """Whether a call through ``store``'s connection was given up on: it is held for good."""
    return id(_connection(store)) in _given_up


def _connection(store: Any) -> Any:
    """The connection ``store``'s calls go through (a PrefixStore's: the store it wraps)."""
    while (inner := getattr(store, "underlying_store", None)) is not None:
        store = inner
    return store


class BoundedStore:
    """The calls of ``store`` (a torch store), each given up on where it does not end within
    its own wait and ``extra`` seconds (see :func:`margin`)."""

    def __init__(self, store: Any, extra: float) -> None:
        self._store = store
        self._extra = extra

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            waits = sum(a.total_seconds() for a in args if isinstance(a, timedelta))
            return self._bounded(name, args, waits + self._extra)

        return call

    def send(self, name: str, *args: Any) -> None:
        """The store's ``name(*args)``, not waited for: the calls after it wait behind it (one
        that it holds is given up on in its turn); nothing where the connection was given up."""
        key = id(_connection(self._store))
        if key not in _given_up:
            method = getattr(self._store, name)
            call_thread.of(key, "gangmesh-store-calls").send(lambda: method(*args))

    def _bounded(self, name: str, args: tuple[Any, ...], seconds: float) -> Any:
        """The store's ``name(*args)``, given up on after ``seconds``.

        :raises RuntimeError: it did not return in time, or an earlier call through the same
            connection did not (and what the call raises).
        """
        connection = _connection(self._store)
        key = id(connection)
        if key in _given_up:
            raise RuntimeError("the job's store did not answer an earlier call")
        method = getattr(self._store, name)
        try:
            return call_thread.of(key, "gangmesh-store-calls").call(lambda: method(*args), seconds)
        except TimeoutError:
            _given_up[key] = connection
            call_thread.forget(key)
            raise RuntimeError(f"the job's store did not answer within {seconds:g} s") from None


_ABSENT = "\x00gangmesh: no such key\x00"
"""What :func:`peek` expects a key to hold: no value a store of gangmesh's is set to."""


def peek(store: Any, key: str) -> str | None:
    """``key``'s value in ``store``, None where it is not set: one call that neither waits for
    the key (``get`` would, up to the store's timeout, where another process deleted it since
    a ``check``) nor sets it (``compare_set`` sets an absent key only where it expects "")."""
    value = bytes(store.compare_set(key, _ABSENT, _ABSENT)).decode()
    return None if value == _ABSENT else value


def release(store: Any) -> None:
    """End the thread of ``store``'s connection, which its owner closes (its calls are done)."""
    key = id(_connection(store))
    _given_up.pop(key, None)
    call_thread.end(key)
