"""Fixtures of the multi-process tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gangmesh.testing.hostbed import Host, HostBed
from gangmesh.testing.netns import namespaces_unavailable


@pytest.fixture(scope="module")
def quiet_host() -> Iterator[Host | None]:
    """A host of its own (a bed of one) for jobs whose tests bound how long a fault takes;
    None where namespaces cannot be made, and the jobs run on this machine's loopback.

    torch looks up the name of a store connection's address (reverse DNS) when it makes
    the connection, on both ends, and when a store wait times out, before it raises. A
    name server that drops a query holds that lookup for its resolver's retry time (glibc:
    5 s): the store's server, and so every rank, on a new connection; the rank that timed
    out, on its error. On a bed's host the only name server is on its loopback, where
    nothing answers, so each lookup fails at once and the faults take the time gangmesh
    gives them.
    """
    if namespaces_unavailable():
        yield None
        return
    with HostBed(1) as bed:
        yield bed.hosts[0]


@pytest.fixture
def bed() -> Iterator[HostBed]:
    """Two hosts, removed after the test; nothing of them may be left."""
    made = HostBed(2)
    try:
        yield made
    finally:
        made.close()
        assert made.left_behind() == [], "a process or namespace of the bed was left behind"
