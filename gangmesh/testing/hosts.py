"""Inside a test that runs on hosts of a bed: which host this is, and cutting it off the link.

A test marked ``gangmesh_world(n, hosts=H)`` runs each rank on a host of a
:class:`~gangmesh.testing.hostbed.HostBed`; these functions tell the rank where it is
and let it cut its own host off the bed's link, to test how code handles a host that
disappears from the network::

    from gangmesh.testing.hosts import cut_host, restore_host, this_host

    @pytest.mark.gangmesh_world(4, hosts=2)
    def test_a_lost_host(root_gang):
        ...
        if this_host().index == 1 and root_gang.rank == 2:
            cut_host()  # host1 is off the link: every rank's cross-host collective stalls
        ...
        restore_host()

The cut takes the host's port on the link down: the host notices nothing, its packets
are lost, and peers on other hosts wait until their collectives time out. After each
test the world's link is whole again, cut or not. Imports neither torch nor the rest
of gangmesh.
"""

from __future__ import annotations

import json
import os

from gangmesh.testing.hostbed import HOSTS_VARIABLE, Host, _set_port

__all__ = ["cut_host", "restore_host", "this_host"]


def this_host() -> Host:
    """The host of a bed this process runs on.

    :raises RuntimeError: this process runs on no host of a bed (its test is not marked
        ``gangmesh_world(n, hosts=H)`` with H > 1).
    """
    text = os.environ.get(HOSTS_VARIABLE)
    if not text:
        raise RuntimeError(
            f"this_host: this process runs on no host of a bed ({HOSTS_VARIABLE} is not set); "
            "mark the test gangmesh_world(n, hosts=H) with H > 1"
        )
    return Host(**json.loads(text))


def cut_host() -> None:
    """Cut this process's host off the bed's link (its port goes down).

    :raises RuntimeError: this process runs on no host of a bed.
    :raises gangmesh.testing.netns.NamespaceError: ``ip`` failed.
    """
    _set_port(this_host(), "down")


def restore_host() -> None:
    """Join this process's host to the bed's link again (its port comes up).

    :raises RuntimeError: this process runs on no host of a bed.
    :raises gangmesh.testing.netns.NamespaceError: ``ip`` failed.
    """
    _set_port(this_host(), "up")
