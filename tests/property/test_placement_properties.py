"""Placement: over any numbering a launcher uses, the placed plan keeps groups as local as
consecutive numbering would, and is still a valid plan of the same splits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gangmesh import create_fsdp_gangs
from gangmesh.plan.cluster import Cluster, Site
from gangmesh.plan.dims import FACTS
from gangmesh.plan.locality import checked_dims
from gangmesh.plan.placement import host_order, place, placement_order, this_site
from gangmesh.plan.topology import MeshTopology
from gangmesh.testing import simulate_gangs
from gangmesh.testing.strategies import layouts

ALL_DIMS = tuple(str(name) for name in FACTS)


def _factors(n: int) -> list[int]:
    return [f for f in range(1, n + 1) if n % f == 0]


@st.composite
def numbered_clusters(
    draw: st.DrawFn, max_world_size: int = 256
) -> tuple[list[Site], Cluster, int]:
    """The site of each rank as a launcher numbers them, and the same cluster numbered
    consecutively (hosts, then domains of consecutive hosts).

    Numberings: blocks of ranks per host, or chunks dealt to the hosts in turn (SLURM's
    cyclic and plane distributions), with hosts of any names; a domain holds hosts that
    follow one another in the numbering. (Where domains interleave irregularly, torch's
    ascending group ranks can rule every layout out; see the test of that below.) Also
    returns how many consecutive ranks the launcher keeps together (the host for
    blocks, else the chunk).
    """
    per_host = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    hosts = draw(st.integers(1, max(1, max_world_size // per_host)))
    per_domain = draw(st.sampled_from(_factors(hosts)))
    world = hosts * per_host
    kind = draw(st.sampled_from(["block", "cyclic", "block-cyclic"]))
    chunk = draw(st.sampled_from(_factors(per_host))) if kind == "block-cyclic" else 1
    if kind == "block":
        host_of = [rank // per_host for rank in range(world)]
    else:
        host_of = [(rank // chunk) % hosts for rank in range(world)]
    names = draw(st.permutations(range(hosts)))
    sites = [
        Site(f"host{names[h]}", f"nvl{h // per_domain}" if per_domain > 1 else "") for h in host_of
    ]
    uniform = Cluster.uniform(world, per_host, per_domain if per_domain > 1 else None)
    return sites, uniform, per_host if kind == "block" else chunk


def _aligned(plan: MeshTopology, capacity: int) -> bool:
    """Whether units of ``capacity`` consecutive places hold whole blocks of every
    dimension of both views, or whole units fill each block."""
    views = (plan.view(), plan.view(expert=True))
    if views[1].axes:
        return False
    for view in views:
        for index in range(len(view.sizes)):
            block = int(np.prod(view.sizes[index:]))
            if block % capacity and capacity % block:
                return False
    return True


def _crossings(plan: MeshTopology, cluster: Cluster) -> list[int]:
    return [
        _crossing(plan, name, cluster.units[level])
        for level in cluster.levels()
        for name in checked_dims(plan)
    ]


def _crossing(plan: MeshTopology, name: str, units: np.ndarray) -> int:
    touched = units[plan.groups(name)]
    return int((touched.min(axis=1) != touched.max(axis=1)).sum())


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_placement_keeps_tp_in_a_host_and_ep_in_a_domain_where_the_sizes_allow(data):
    sites, uniform, run = data.draw(numbered_clusters())
    world = len(sites)
    plan = data.draw(layouts(world_sizes=[world], orders=True))
    placed = place(plan, sites)
    actual = Cluster.of_sites(sites)
    # Never worse than the launcher's numbering on the gangs meant to stay local, compared
    # level by level, the most important gang first.
    got = _crossings(placed, actual)
    assert got <= _crossings(plan, actual)
    # The sizes allow it where hosts and domains hold whole blocks of the mesh (as
    # consecutive numbering needs too) and the launcher deals whole blocks: then placement
    # is as good as consecutive numbering, or better.
    assume(all(_aligned(plan, size) for size in (run, *uniform.capacity.values())))
    assert got <= _crossings(plan, uniform)
    hosts = actual.units["node"]
    if _crossing(plan, "tp", uniform.units["node"]) == 0:
        assert all(len(set(hosts[g])) == 1 for g in placed.groups("tp")), "tp stays in a host"
    if not any(_crossings(plan, uniform)):  # the sizes keep every gang inside
        assert not any(got)
        if "domain" in actual.units:
            domains = actual.units["domain"]
            assert all(len(set(domains[g])) == 1 for g in placed.groups("ep")), "ep in a domain"


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_placed_plan_is_a_valid_plan_of_the_same_splits(data):
    sites, _, _ = data.draw(numbered_clusters(max_world_size=128))
    world = len(sites)
    plan = data.draw(layouts(world_sizes=[world], orders=True))
    placed = place(plan, sites)
    dense, _ = placement_order(plan, sites)
    # The permutation placement used: host order, or none where it kept the numbering.
    grouped = host_order(sites) if placed.placement else np.arange(world)
    assert dense[0] == 0 and set(placed.coordinate(0).values()) == {0}, "rank 0 at the origin"
    for name in ALL_DIMS:
        groups = placed.groups(name)
        assert np.array_equal(np.sort(groups.reshape(-1)), np.arange(world)), name
        assert (np.diff(groups, axis=1) > 0).all(), f"{name}: members ascend, as torch's"
        # The same splits, up to one permutation of the ranks.
        expected = {frozenset(grouped[row].tolist()) for row in plan.groups(name)}
        assert {frozenset(row.tolist()) for row in groups} == expected, name
    for rank in {0, world - 1, world // 2}:
        coordinate = placed.coordinate(rank)
        dense_at = {n: coordinate[n] for n in placed.dims}
        assert placed.rank_of(**dense_at) == rank
        for name in ALL_DIMS:
            members = placed.group_of(rank, name)
            assert (
                members == placed.groups(name)[placed.group_ids(name, np.array([rank]))[0]].tolist()
            )
            assert members[placed.rank_in(rank, name)] == rank
        for name in placed.dims:
            assert placed.rank_in(rank, name) == coordinate[name]


def test_interleaved_hosts_put_each_tp_group_on_one_host():
    sites = [Site("a" if rank % 2 == 0 else "b") for rank in range(8)]
    plan = MeshTopology(8, tp=2)
    assert plan.check_locality(Cluster.of_sites(sites))[0].dim == "tp"
    placed = place(plan, sites)
    assert placed.groups("tp").tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert placed.groups("dp").tolist() == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert placed.check_locality(Cluster.of_sites(sites)) == []
    hsdp = place(MeshTopology(8, dp_replicate=2, dp_shard=2, tp=2), sites)
    assert hsdp.groups("tp").tolist() == [[0, 2], [4, 6], [1, 3], [5, 7]]
    assert hsdp.groups("dp_replicate").tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_domains_in_no_common_order_keep_the_launchers_numbering(caplog):
    # Hosts of 2 ranks; domain x holds ranks 0, 1, 6, 7 and domain y ranks 2-5. The
    # replicas (dp_replicate, across domains) would pair 0 with 2 and 7 with 5: torch
    # numbers group members ascending, so no layout keeps ep in a domain.
    domains = ["x", "x", "y", "y", "y", "y", "x", "x"]
    sites = [Site(f"h{rank // 2}", domains[rank]) for rank in range(8)]
    plan = MeshTopology(8, dp_replicate=2, dp_shard=4, ep=4)
    assert place(plan, sites) == plan
    assert "keeping the launcher's numbering" in caplog.text


def test_consecutive_hosts_and_impossible_orders_keep_the_launchers_numbering(caplog):
    plan = MeshTopology(6, tp=2)
    block = [Site(f"h{rank // 2}") for rank in range(6)]
    assert place(plan, block) == plan
    # Hosts {0, 5}, {1, 2}, {3, 4}: no order keeps tp on a host with ranks ascending.
    odd = [Site(h) for h in ("a", "b", "b", "c", "c", "a")]
    assert place(plan, odd) == plan
    assert "keeping the launcher's numbering" in caplog.text


@pytest.mark.parametrize("rank", [0, 3, 5])
def test_simulated_gangs_and_meshes_follow_the_placement(rank):
    sites = [Site("a" if r % 2 == 0 else "b") for r in range(8)]
    with simulate_gangs(8, rank, dp_replicate=2, dp_shard=2, tp=2, placement=sites) as gangs:
        plan = gangs.plan
        assert plan.placement == (0, 2, 4, 6, 1, 3, 5, 7)
        for name in ("tp", "dp_shard", "dp_replicate", "dp", "efsdp", "edp"):
            assert gangs[name].rank == plan.rank_in(rank, name), name
        mesh = gangs.meshes["dense"]
        assert mesh.mesh.tolist() == np.array(plan.placement).reshape(1, 2, 2, 1, 2).tolist()
        for name in ("dp_replicate", "dp_shard", "tp"):
            assert mesh.get_local_rank(name) == gangs[name].rank, name
        fsdp = gangs.meshes["dp_shard_cp"]
        assert fsdp.get_local_rank("dp_shard_cp") == gangs["dp_shard_cp"].rank


def test_this_site_reads_the_overrides():
    env = {"GANGMESH_HOST": "h1", "GANGMESH_DOMAIN": "nvl0", "GANGMESH_RACK": "r2"}
    assert this_site(env) == Site("h1", "nvl0", "r2")
    assert this_site({"SLURM_TOPOLOGY_ADDR": "top.rack3.node9"}).rack == "top.rack3"
    assert this_site({}).host  # the hostname


def test_placement_must_name_every_rank():
    with pytest.raises(ValueError, match="sites: expected the site of each of the 4 ranks"):
        place(MeshTopology(4), [Site("a")])
    with pytest.raises(ValueError, match="ranks: expected rank 0 first"):
        MeshTopology(4).placed([1, 0, 2, 3])


def test_fsdp_gangs_of_placed_gangs_are_placed_over_the_same_sites():
    sites = [Site("a" if r % 2 == 0 else "b") for r in range(8)]
    with simulate_gangs(8, 2, dp_shard=8, placement=sites) as gangs:
        assert gangs.plan.sites == tuple(sites) and gangs.plan.placement == ()
        with create_fsdp_gangs(gangs, intra_node_size=4) as hsdp:
            assert hsdp.plan.sites == tuple(sites)
            assert hsdp.plan.group_of(2, "sdp") == [0, 2, 4, 6], "a shard group per host"
            assert hsdp.sdp.rank == 1
