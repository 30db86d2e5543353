"""The store two jobs launched apart meet in: a TCPStore served at a join address, the keys of
one join under ``gangmesh/join/<name>/``.

Each process holds two connections to it: one its bridges' backends meet through (their
meetings wait in the store for their peers), and one for everything else, every call bounded
(:class:`~gangmesh.assembly.store_calls.BoundedStore`), so that a report or a look at the
other job is never held behind a bridge's meeting.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from gangmesh.assembly.store_calls import BoundedStore, margin, release
from gangmesh.runtime.gang import GangError

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store


def parse_address(address: object) -> tuple[str, int]:
    """``"host:port"`` as its host and port.

    :raises ValueError: ``address`` is not so written, naming it.
    """
    if not isinstance(address, str):
        raise ValueError(f"address: expected 'host:port', got {address!r}")
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"address: expected 'host:port' with a port in [1, 65535], got {address!r}"
        )
    return host.strip("[]"), int(port)


class JoinStore:
    """The join's store at ``address``, its keys under the join's ``name``.

    :param address: the join server's ``host:port``.
    :param name: the join's name.
    :param timeout: how long to try to connect, and the bound of each call.
    :raises GangError: no server answers at ``address`` within ``timeout``.
    """

    def __init__(self, address: str, name: str, timeout: timedelta) -> None:
        self.address = address
        host, port = parse_address(address)
        prefix = f"gangmesh/join/{name}"
        self._clients: tuple[Store, ...] = (
            _client(host, port, timeout),
            _client(host, port, timeout),
        )
        """The two connections (their calls find their threads by the client objects)."""
        self.rendezvous: Any = dist.PrefixStore(prefix, self._clients[0])  # type: ignore[attr-defined]
        """Where bridges' backends meet (one connection, used by the main thread)."""
        own = dist.PrefixStore(prefix, self._clients[1])  # type: ignore[attr-defined]
        self.calls: Any = BoundedStore(own, margin(timeout))
        """Every other call, each bounded."""

    def delete(self, keys: Iterable[str]) -> None:
        """Delete ``keys`` (those absent are passed over).

        :param keys: keys under the join's prefix.
        """
        for key in keys:
            self.calls.delete_key(key)

    def close(self) -> None:
        """Close both connections and end the thread of the bounded calls."""
        release(self._clients[1])
        self.rendezvous = self.calls = None
        self._clients = ()


def _client(host: str, port: int, timeout: timedelta) -> Store:
    """A connection to the join's server, tried until ``timeout`` (short attempts: a host
    that drops packets holds a plain connect for minutes).

    :raises GangError: nothing answers at ``host:port`` in time.
    """
    deadline = time.monotonic() + timeout.total_seconds()
    pause = 0.05
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), max(0.05, min(1.0, left))):
                break
        except OSError as ex:
            if left <= 0:
                raise GangError(
                    f"no join server answers at {host}:{port} within "
                    f"{timeout.total_seconds():g} s ({ex.strerror or ex}); start one there with "
                    f"'gangmesh join-server --port {port}' (or gangmesh.serve_join)"
                ) from None
        time.sleep(min(pause, max(0.0, left)))  # retry back-off
        pause = min(pause * 2, 0.5)
    try:
        return dist.TCPStore(  # type: ignore[attr-defined]
            host, port, is_master=False, timeout=timeout, wait_for_workers=False
        )
    except (RuntimeError, ValueError) as ex:
        raise GangError(f"the join server at {host}:{port} did not answer: {ex}") from ex
