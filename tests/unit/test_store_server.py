"""The job's store as rank 0 serves it without torchrun's agent (a plain launch, SLURM): at
MASTER_ADDR where that is an address of this host, not on every interface, on IPv4 alone at
an IPv4 address, where a local client is 127.0.0.1, which the hosts file names (on torch's own
dual-stack socket it is ::ffff:127.0.0.1, which the server asks the name server about on
every connection)."""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path

import pytest

from gangmesh.assembly import rendezvous
from gangmesh.runtime.environment import LaunchEnvironment
from tests.dist.workers.common import listening_at

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc/net")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def served_at(address: str) -> list[str]:
    """Where rank 0 listens, serving the job's store with MASTER_ADDR ``address``."""
    port = free_port()
    env = LaunchEnvironment("torchrun", 0, 2, 0, 2, address, port)
    store = rendezvous._connect(env, timedelta(seconds=10))
    try:
        store.set("a", "b")
        assert store.get("a") == b"b"
        return listening_at(port)
    finally:
        del store


@pytest.mark.parametrize("address", ["127.0.0.1", "localhost"])
def test_rank_0_serves_the_store_at_master_addr_alone(address):
    assert served_at(address) == ["127.0.0.1"]


def test_a_host_name_mapped_to_a_loopback_address_is_served_on_every_interface():
    name = socket.gethostname()
    found = socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0]
    if not str(found).startswith("127."):
        pytest.skip(f"{name} resolves to {found} here, not to a loopback address")
    # the other hosts resolve the name to this host's own address: torch's socket, everywhere
    assert served_at(name) in (["::"], ["0.0.0.0"], ["0.0.0.0", "::"])
