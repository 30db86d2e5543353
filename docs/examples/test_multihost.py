"""Multi-node code tested on one machine: 4 processes on 2 hosts, each host a network
namespace with its own hostname and address (the marker needs root and Linux, and skips
where it cannot make them).

Neither test imports the plugin: installing gangmesh is enough.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
import torch

import gangmesh as gm
from gangmesh.testing.hosts import cut_host, restore_host, this_host


@pytest.mark.gangmesh_world(4, hosts=2)
def test_tensor_parallel_pairs_stay_on_one_host(root_gang):
    me = socket.gethostname()  # host0 for ranks 0 and 1, host1 for ranks 2 and 3
    assert socket.gethostbyname(me) != "127.0.0.1"
    gangs = gm.create_gangs(root_gang, dp_replicate=2, tp=2)
    assert gm.all_gather_objects(gangs.tp, me) == [me, me]  # tp: one host
    assert gm.all_gather_objects(gangs.rdp, me) == ["host0", "host1"]  # replicas: both
    gangs.close()


@pytest.mark.gangmesh_world(4, hosts=2, timeout=60)
def test_a_host_that_drops_off_the_network_ends_the_step_in_time():
    root = gm.setup_root_gang(timeout=timedelta(seconds=5))  # meets at host0, as torchrun
    total = torch.ones(1)
    try:
        with pytest.raises(gm.GangError):
            for step in range(100_000):
                if step == 3 and root.rank == 2:
                    cut_host()  # host1 drops off the network
                root.all_reduce(total, gm.ReduceOperation.SUM)
        if this_host().name == "host0":
            assert step == 3  # the first step that host1 missed
    finally:
        if root.rank == 2:
            restore_host()
        root.close()
