"""Jobs over two hosts of a bed, each test in every rank (gangmesh_world(n, hosts=2)): setup
from torchrun's and SLURM's variables, layouts and placement from the real hostnames, the
HSDP recipe, and a host cut off the link mid-loop."""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta

import pytest
import torch

import gangmesh as gm
from gangmesh.assembly.record import layout_record
from gangmesh.testing.hosts import cut_host, restore_host, this_host
from tests.dist.workers.common import listening_at
from tests.shown import assert_line_shown
from tests.unit.test_docs_examples_testing import EXAMPLES

pytestmark = pytest.mark.dist

HOSTS = ["host0", "host0", "host1", "host1"]
"""The host of each rank of 4 on 2 hosts, numbered as torchrun numbers them."""
TIMEOUT_S = 5.0


def hosts_of(gang: gm.Gang) -> list[str]:
    """The hostname of each member of ``gang``, in gang order."""
    return gm.all_gather_objects(gang, socket.gethostname())


@pytest.mark.gangmesh_world(4, hosts=2, timeout=120)
def test_each_rank_runs_on_its_host_and_tp_stays_on_one(root_gang):
    me = root_gang.rank
    host, address = socket.gethostname(), socket.gethostbyname(socket.gethostname())
    assert gm.all_gather_objects(root_gang, (host, address)) == [
        ("host0", "10.213.0.1"), ("host0", "10.213.0.1"),
        ("host1", "10.213.0.2"), ("host1", "10.213.0.2"),
    ]  # fmt: skip
    assert this_host().name == host
    assert os.environ["MASTER_ADDR"] == "10.213.0.1"
    assert (os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"]) == (str(me % 2), "2")
    assert "GANGMESH_HOST" not in os.environ and "GLOO_SOCKET_IFNAME" not in os.environ
    with gm.create_gangs(root_gang, dp_replicate=2, tp=2) as gangs:
        assert hosts_of(gangs.tp) == [host, host], "tp stays on one host"
        assert hosts_of(gangs.rdp) == ["host0", "host1"], "replicas span the hosts"
        total = torch.tensor(float(me))
        gangs.rdp.all_reduce(total, gm.ReduceOperation.SUM)
        assert total.item() == float(me % 2 + me % 2 + 2)


@pytest.mark.gangmesh_world(4, hosts=2, timeout=120)
def test_setup_from_torchrun_variables_meets_at_host0():
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    try:
        assert root.rank == int(os.environ["RANK"]) and root.size == 4
        if root.rank == 0:  # the job's store listens at MASTER_ADDR, not on every interface
            assert listening_at(int(os.environ["MASTER_PORT"])) == ["10.213.0.1"]
        total = torch.tensor(1.0)
        root.all_reduce(total, gm.ReduceOperation.SUM)
        assert total.item() == 4.0
        with gm.create_gangs(root, tp=2) as gangs:
            record = layout_record(gangs)
            assert [r["host"] for r in record["ranks"]] == HOSTS
            assert hosts_of(gangs.tp) == [socket.gethostname()] * 2
    finally:
        root.close()


@pytest.mark.gangmesh_world(4, hosts=2, timeout=120)
def test_setup_from_slurm_variables_finds_host0_by_name(monkeypatch):
    rank, port = int(os.environ["RANK"]), os.environ["MASTER_PORT"]
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    slurm = {
        "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": str(rank % 2),
        "SLURM_NTASKS_PER_NODE": "2(x2)",
        "SLURM_JOB_NODELIST": "host[0-1]",
        "SLURM_JOB_ID": "4242",
        "MASTER_PORT": port,
    }
    for name, value in slurm.items():
        monkeypatch.setenv(name, value)
    from gangmesh.runtime.environment import read_launch_environment

    env = read_launch_environment()
    assert env is not None and (env.launcher, env.master_addr) == ("slurm", "host0")
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    try:
        assert (root.rank, root.size) == (rank, 4)
        if rank == 0:  # host0's own address, which its name resolves to
            assert listening_at(int(port)) == ["10.213.0.1"]
        total = torch.tensor(float(rank))
        root.all_reduce(total, gm.ReduceOperation.SUM)
        assert total.item() == 6.0
        assert hosts_of(root) == HOSTS
    finally:
        root.close()


@pytest.mark.gangmesh_world(4, hosts=2, timeout=120)
def test_hosts_that_ask_for_different_layouts_are_refused_naming_the_ranks(root_gang):
    tp = 2 if this_host().index == 1 else 1
    started = time.monotonic()
    with pytest.raises(ValueError) as refused:
        gm.create_gangs(root_gang, tp=tp, timeout=timedelta(seconds=60))
    message = str(refused.value)
    assert message.startswith("create_gangs: the processes asked for different things: ")
    assert "ranks [0, 1] asked for pp=1, dp_replicate=1, dp_shard=-1, cp=1, tp=1" in message
    assert "ranks [2, 3] asked for pp=1, dp_replicate=1, dp_shard=-1, cp=1, tp=2" in message
    assert time.monotonic() - started < 60, "refused at once, not when the timeout expires"


@pytest.mark.gangmesh_world(4, hosts=2, timeout=240)
def test_the_hsdp_recipe_over_two_hosts_trains_like_one_process(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setattr("sys.argv", ["hsdp.py"])
    import hsdp

    hsdp.main()  # HSDP 2 x 2: shards on one host, replicas across; exits 1 on a mismatch
    out = capsys.readouterr().out
    if int(os.environ["RANK"]) == 0:
        assert "HSDP on 4 processes" in out
        assert "matches the single-process run within 1e-05" in out
    assert "blocks[0].up.weight: local shard (64, 32) of global (128, 32)" in out or (
        int(os.environ["RANK"]) != 0
    )


@pytest.mark.gangmesh_world(8, hosts=2, numbering="round_robin", timeout=180)
def test_placement_from_real_hostnames_keeps_tp_and_dp_shard_on_one_host(root_gang):
    host = socket.gethostname()
    assert host == f"host{root_gang.rank % 2}", "ranks dealt out host by host"
    cluster = gm.Cluster.of_sites([gm.Site(f"host{rank % 2}") for rank in range(8)])
    with gm.create_gangs(root_gang, dp_replicate=2, dp_shard=2, tp=2) as numbered:
        assert len(set(hosts_of(numbered.tp))) == 2, "unplaced, tp pairs span both hosts"
        assert {f.dim for f in numbered.plan.check_locality(cluster)} == {"tp"}
    with gm.create_gangs(root_gang, dp_replicate=2, dp_shard=2, tp=2, placement=True) as gangs:
        assert hosts_of(gangs.tp) == [host] * 2
        assert hosts_of(gangs.sdp) == [host] * 2
        assert sorted(hosts_of(gangs.rdp)) == ["host0", "host1"]
        sites = [gm.Site(name) for name in hosts_of(root_gang)]
        assert list(gangs.plan.sites) == sites, "placement read the real hostnames"
        assert gangs.plan.check_locality(gm.Cluster.of_sites(sites)) == []
        total = torch.tensor(1.0)
        gangs.tp.all_reduce(total, gm.ReduceOperation.SUM)
        gangs.sdp.all_reduce(total, gm.ReduceOperation.SUM)
        assert total.item() == 4.0


@pytest.mark.gangmesh_world(4, hosts=2, timeout=120)
def test_a_host_cut_mid_loop_ends_every_collective_within_the_timeout():
    root = gm.setup_root_gang(timeout=timedelta(seconds=TIMEOUT_S))
    cutter = root.rank == 2  # on host1
    total = torch.ones(1)
    try:
        with pytest.raises(gm.GangError) as failed:
            for step in range(100_000):  # ends at the first collective the cut stops
                if cutter and step == 3:
                    cut_host()
                started = time.monotonic()
                root.all_reduce(total, gm.ReduceOperation.SUM)
        waited = time.monotonic() - started
        assert str(failed.value).startswith("all_reduce(SUM) failed on gang 'root' (size 4")
        assert waited < TIMEOUT_S + 5, f"raised {waited:.1f} s after the collective began"
        if this_host().index == 0:
            assert step <= 4, "host0 stops at the step host1 no longer joins"
            assert waited >= TIMEOUT_S - 0.5, "host0 hears nothing: it waits out its timeout"
            assert "gang ranks [2, 3] (global ranks [2, 3]) on host1 did not take part" in str(
                failed.value
            ), "host0 names host1's ranks"
            assert "host host1 is unreachable or down" in str(failed.value)
            # a peer on host0 that raised first and ended closes the connection before the timeout
            alike = {"(a peer's connection closed)": f"(timed out after {TIMEOUT_S:g} s)"}
            assert_line_shown("howto.rst", "# rank 3 raised", "unreachable", [str(failed.value)],
                              alike=alike)  # fmt: skip
    finally:
        if cutter:
            restore_host()
        root.close()
