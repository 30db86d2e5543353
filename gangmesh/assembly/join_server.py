"""The join server: the store that jobs launched apart meet in, served by a process of its own.

Neither job serves it: the job that served it would take the meeting point down with it when
it breaks, just when the other job needs it to learn who broke and to meet the restarted job;
and the restarted job would have to bind the same port again. The server holds nothing but
the store (a torch TCPStore), outlives both jobs' restarts, and is started once, next to
them: ``gangmesh join-server --port 29600``, or :func:`serve_join` in a process of one's own.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, final

import torch.distributed as dist

from gangmesh.assembly.listeners import listener, own_address
from gangmesh.plan._checks import check_index
from gangmesh.runtime.gang import GangError

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

log = logging.getLogger("gangmesh")


@final
class JoinServer:
    """A join server running in this process; a context manager that stops it.

    :param store: the store it serves.
    :param host: the address it listens at.
    """

    def __init__(self, store: Store, host: str) -> None:
        self.store: Store | None = store
        self.port: int = store.port  # type: ignore[attr-defined]
        """The port it listens at."""
        self.address = f"{host}:{self.port}"
        """Where jobs reach it: ``host:port``, for :func:`~gangmesh.join_jobs`."""

    def keys(self) -> int:
        """How many keys the store holds (the joins' and the store's own).

        :raises RuntimeError: the server is stopped.
        """
        if self.store is None:
            raise RuntimeError(f"the join server at {self.address} is stopped")
        return int(self.store.num_keys())

    def close(self) -> None:
        """Stop serving; later calls do nothing."""
        self.store = None

    def __enter__(self) -> JoinServer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def serve_join(host: str = "127.0.0.1", port: int = 0) -> JoinServer:
    """Serve a join store at ``host`` (an address of this host) and ``port`` (0: a free one,
    read back from :attr:`JoinServer.port`), in a thread of this process.

    >>> with serve_join() as server:
    ...     server.address.startswith("127.0.0.1:")
    True

    :param host: the address to listen at.
    :param port: the port, or 0.
    :raises ValueError: a port outside [0, 65535], or a host that is no address of this host.
    :raises GangError: the port is taken.
    """
    check_index("port", port, 65536, "a port")
    address = own_address(host)
    if address is None:
        raise ValueError(f"host: expected an address of this host to listen at, got {host!r}")
    socket = listener(address, port)
    if socket is None:
        raise GangError(f"the join server cannot listen at {host}:{port}: the port is taken")
    port = socket.getsockname()[1]
    fd = socket.detach()
    try:
        store = dist.TCPStore(  # type: ignore[attr-defined]
            address, port, is_master=True, wait_for_workers=False,
            timeout=timedelta(seconds=30), master_listen_fd=fd,
        )  # fmt: skip
    except BaseException:
        os.close(fd)  # the store did not take it
        raise
    log.info("serving a join store at %s:%d", host, store.port)
    return JoinServer(store, host)
