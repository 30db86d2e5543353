"""Locality on nodes, NVLink domains and racks: findings are the crossing groups, and every
change the advice proposes keeps the dimension's groups inside."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangmesh.plan.cluster import Cluster, Site
from gangmesh.plan.topology import MeshTopology
from gangmesh.testing.strategies import layouts


def _factors(n: int) -> list[int]:
    return [f for f in range(1, n + 1) if n % f == 0]


@st.composite
def plans_on_clusters(draw: st.DrawFn) -> tuple[MeshTopology, Cluster]:
    plan = draw(layouts(max_world_size=1024, orders=True))
    world = plan.world_size
    per_host = draw(st.sampled_from(_factors(world)))
    hosts = draw(st.sampled_from([None, *_factors(world // per_host)]))
    racks = None
    if hosts is not None:
        racks = draw(st.sampled_from([None, *_factors(world // (per_host * hosts))]))
    return plan, Cluster.uniform(world, per_host, hosts, racks)


@settings(max_examples=60, deadline=None)
@given(plans_on_clusters())
def test_findings_are_the_groups_that_cross_each_level(case):
    plan, cluster = case
    findings = {(f.dim, f.level): f for f in plan.check_locality(cluster)}
    for level in cluster.levels():
        span = cluster.capacity[level]
        for dim in ("tp", "cp", "ep"):
            units = plan.groups(dim) // span
            crossing = int((units.min(axis=1) != units.max(axis=1)).sum())
            found = findings.get((dim, level))
            assert (found is not None) == (crossing > 0 and plan.size_of(dim) > 1)
            if found is not None:
                assert found.count == crossing
                assert sorted({r // span for r in found.group}) == found.nodes


@settings(max_examples=80, deadline=None)
@given(plans_on_clusters())
def test_applying_the_advice_removes_the_finding(case):
    plan, cluster = case
    for finding in plan.check_locality(cluster):
        if not finding.avoidable:
            assert finding.fix is None
            continue
        assert finding.fix is not None, finding.message
        layout = dataclasses.replace(plan.layout, **finding.fix)
        fixed = MeshTopology.from_layout(plan.world_size, layout)
        again = {(f.dim, f.level) for f in fixed.check_locality(cluster) if f.avoidable}
        assert (finding.dim, finding.level) not in again, finding.message
        units = fixed.groups(finding.dim) // cluster.capacity[finding.level]
        assert (units.min(axis=1) == units.max(axis=1)).all(), finding.message


def test_the_advice_for_unaligned_blocks_is_one_change_that_fixes_it():
    (finding,) = MeshTopology(12, tp=4).check_locality(6)
    assert finding.message.endswith("not aligned to nodes; use tp=3 (dp_shard becomes 4)")
    assert MeshTopology(12, tp=3).check_locality(6) == []


def test_domains_and_racks_are_checked_with_their_own_sizes():
    findings = MeshTopology(64, ep=16).check_locality(4, hosts_per_domain=4, domains_per_rack=2)
    assert [(f.dim, f.level, f.count, f.avoidable) for f in findings] == [
        ("ep", "node", 4, False)
    ], "16 ranks of ep fit in a domain of 4 * 4 ranks"
    node, domain = MeshTopology(64, ep=32).check_locality(4, hosts_per_domain=4)
    assert (node.level, domain.level) == ("node", "domain")
    assert domain.nodes == [0, 1] and domain.count == 2
    assert "groups span domains" in domain.message


def test_a_cluster_of_sites_finds_interleaved_hosts():
    cluster = Cluster.of_sites([Site("a" if r % 2 == 0 else "b") for r in range(8)])
    assert cluster.capacity == {"node": 4} and not cluster.consecutive
    assert np.array_equal(cluster.units["node"], [0, 1] * 4)
    (finding,) = MeshTopology(8, tp=2).check_locality(cluster)
    assert finding.dim == "tp" and finding.count == 4 and finding.avoidable
    assert "placement=" in finding.message


def test_racks_need_domains():
    with pytest.raises(ValueError, match="domains_per_rack: needs hosts_per_domain"):
        MeshTopology(16).check_locality(4, domains_per_rack=2)
    with pytest.raises(ValueError, match="hosts_per_domain: expected domains of 12 ranks"):
        MeshTopology(16).check_locality(4, hosts_per_domain=3)
