"""The job's store as rank 0 serves it without torchrun's agent (a plain launch, SLURM): on
an IPv4 address it listens on IPv4 alone, where a local client is 127.0.0.1, which the hosts
file names (on torch's own dual-stack socket it is ::ffff:127.0.0.1, which the server asks
the name server about on every connection)."""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path

import pytest

from gangmesh.assembly import rendezvous
from gangmesh.runtime.environment import LaunchEnvironment


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(table: str, port: int) -> bool:
    """Whether /proc/net/<table> holds a listening socket on ``port``."""
    lines = Path("/proc/net", table).read_text().splitlines()[1:]
    return any(
        int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A"
        for fields in (line.split() for line in lines)
    )


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net")
@pytest.mark.parametrize(("address", "ipv4_only"), [("127.0.0.1", True), ("localhost", False)])
def test_rank_0_serves_the_store_on_ipv4_alone_at_an_ipv4_address(address, ipv4_only):
    port = free_port()
    env = LaunchEnvironment("torchrun", 0, 2, 0, 2, address, port)
    store = rendezvous._connect(env, timedelta(seconds=10))
    try:
        store.set("a", "b")
        assert store.get("a") == b"b"
        assert listening("tcp", port) or listening("tcp6", port)
        assert listening("tcp6", port) is not ipv4_only
    finally:
        del store
