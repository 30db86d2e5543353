"""Gangs built through the real DeviceMesh path (fake backend) match the plan for sampled ranks,
with expert views and orders, one communicator per distinct set of ranks.

CI simulates worlds of up to 4096 ranks; set GANGMESH_SIM_MAX_WORLD=65536 to run the same
properties at 65,536 ranks by hand.
"""

from __future__ import annotations

import os
from itertools import pairwise

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gangmesh as gm
from gangmesh.plan.topology import DENSE_DIMS, EXPERT_DIMS, FLATTENED, MeshTopology
from gangmesh.testing import simulate_gangs
from gangmesh.testing.strategies import layouts, layouts_and_ranks

MAX_WORLD = int(os.environ.get("GANGMESH_SIM_MAX_WORLD", "4096"))
BUILT = (*DENSE_DIMS, *EXPERT_DIMS, *FLATTENED)
EXPERT_ONLY = ("efsdp", "edp")
"""The gangs of several processes that only the expert view has at ep = etp = 1."""
SIMULATION = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def members(gang: gm.Gang, rank: int) -> list[int]:
    if not gang.supports_process_group:
        assert gang.size == 1, "only gangs of size 1 may be fake"
        return [rank]
    return dist.get_process_group_ranks(gang.as_process_group())


def built(gangs: gm.Gangs, plan: MeshTopology) -> list[str]:
    """The dimensions whose gangs are built: all but the expert ones of a job without experts
    (those stand in with the plan's rank and size, and refuse every collective)."""
    unasked = [
        n for n in BUILT if n in EXPERT_ONLY and not plan.uses_experts and plan.size_of(n) > 1
    ]
    for name in unasked:
        assert (gangs[name].rank, gangs[name].size) == (
            plan.rank_in(gangs.root.rank, name),
            plan.size_of(name),
        )
        assert name not in list(gangs)
        with pytest.raises(gm.GangError, match=f"gang '{name}' .*not built.*expert=True"):
            gangs[name].all_reduce(torch.ones(1), gm.ReduceOperation.SUM)
    return [n for n in BUILT if n not in unasked]


def assert_matches_plan(gangs: gm.Gangs, plan: MeshTopology, rank: int) -> None:
    for name in built(gangs, plan):
        gang = gangs[name]
        group = plan.group_of(rank, name)
        assert (gang.rank, gang.size) == (plan.rank_in(rank, name), len(group)), name
        assert members(gang, rank) == group, name


def assert_one_communicator_per_rank_set(gangs: gm.Gangs, plan: MeshTopology, rank: int) -> None:
    report = gangs.communicators()
    names = built(gangs, plan)
    expected = {tuple(plan.group_of(rank, name)) for name in names} | {
        tuple(range(plan.world_size))
    }
    assert sorted(info.ranks for info in report) == sorted(r for r in expected if len(r) > 1)
    groups = [gangs[name] for name in ("root", *names) if gangs[name].size > 1]
    assert len({id(gang.as_process_group()) for gang in groups}) == len(report)


def assert_meshes_use_the_gangs_groups(gangs: gm.Gangs, plan: MeshTopology) -> None:
    assert gangs.mesh is not None and tuple(gangs.mesh.shape) == plan.shape
    assert gangs.mesh.mesh_dim_names == plan.order
    for name in DENSE_DIMS:
        if gangs[name].size > 1:
            assert gangs.mesh.get_group(name) is gangs[name].as_process_group()
    if not plan.uses_experts:
        assert gangs.expert_mesh is None and "edp" not in gangs.meshes
        return
    assert gangs.expert_mesh is not None and tuple(gangs.expert_mesh.shape) == plan.expert_shape
    for name in ("pp", "dp_replicate", "ep", "efsdp", "etp"):
        if gangs[name].size > 1:
            # pp and dp_replicate are shared with the dense mesh: the same group object.
            assert gangs.expert_mesh.get_group(name) is gangs[name].as_process_group()


@SIMULATION
@given(layouts_and_ranks(max_world_size=MAX_WORLD, orders=True, experts=True))
def test_create_gangs_matches_the_plan_for_any_layout(case):
    plan, rank = case
    with simulate_gangs(plan.world_size, rank, **plan.layout.keywords()) as gangs:
        assert gangs.plan == plan
        assert_matches_plan(gangs, plan, rank)
        assert_one_communicator_per_rank_set(gangs, plan, rank)
        assert_meshes_use_the_gangs_groups(gangs, plan)
        assert gangs.root.rank != 0 or all(gang.rank == 0 for _, gang in gangs.items())


@SIMULATION
@given(layouts(max_world_size=MAX_WORLD), st.data())
def test_default_order_gives_the_documented_splits(plan, data):
    d = plan.dims
    rank = data.draw(st.sampled_from(sorted({0, plan.world_size - 1, plan.world_size // 2})))
    with simulate_gangs(plan.world_size, rank, **d) as gangs:
        world = plan.world_size
        tp_start = rank - rank % d["tp"]
        assert members(gangs.tp, rank) == list(range(tp_start, tp_start + d["tp"]))
        dp = members(gangs.dp, rank)
        assert all(b - a == d["cp"] * d["tp"] for a, b in pairwise(dp))
        pp = members(gangs.pp, rank)
        assert all(b - a == world // d["pp"] for a, b in pairwise(pp))
        sdp, rdp = members(gangs.sdp, rank), members(gangs.rdp, rank)
        start = dp.index(rank) - dp.index(rank) % d["dp_shard"]
        assert sdp == dp[start : start + d["dp_shard"]]
        assert rdp == dp[dp.index(rank) % d["dp_shard"] :: d["dp_shard"]]


@st.composite
def parallel_cases(draw: st.DrawFn) -> tuple[int, int, int | None, int]:
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    dp = min(draw(st.sampled_from([1, 2, 3, 4, 8, 16, 64, 512])), MAX_WORLD // tp)
    intra = draw(
        st.one_of(st.none(), st.sampled_from([d for d in range(1, dp + 1) if dp % d == 0]))
    )
    world = tp * dp
    return world, tp, intra, draw(st.sampled_from(sorted({0, world - 1, world // 2})))


@SIMULATION
@given(parallel_cases())
def test_parallel_then_fsdp_gangs_give_the_documented_layout_and_share_groups(case):
    world_size, tp, intra, rank = case
    dp_size = world_size // tp
    shard = dp_size if intra is None else intra
    plan = MeshTopology(world_size, dp_replicate=dp_size // shard, dp_shard=shard, tp=tp)
    with simulate_gangs(world_size, rank) as root_gangs:
        parallel = gm.create_parallel_gangs(root_gangs.root, tp_size=tp)
        assert members(parallel.tp, rank) == list(range(rank - rank % tp, rank - rank % tp + tp))
        assert members(parallel.dp, rank) == list(range(rank % tp, world_size, tp))
        assert parallel.rdp.size == dp_size and parallel.sdp.size == 1
        fsdp = gm.create_fsdp_gangs(parallel, intra_node_size=intra)
        assert_matches_plan(fsdp, plan, rank)
        if tp > 1:
            assert fsdp.tp.as_process_group() is parallel.tp.as_process_group()
        parallel.close()
        fsdp.tp.all_reduce(torch.ones(1), gm.ReduceOperation.SUM)
        fsdp.close()


@given(layouts_and_ranks(max_world_size=2**16, orders=True, experts=True))
def test_a_fake_root_gives_the_planned_ranks_and_sizes(case):
    plan, rank = case
    root = gm.FakeGang(torch.device("cpu"), rank=rank, size=plan.world_size)
    gangs = gm.create_gangs(root, **plan.layout.keywords())
    assert gangs.mesh is None and gangs.plan == plan
    for name in built(gangs, plan):
        gang = gangs[name]
        assert isinstance(gang, gm.FakeGang)
        assert (gang.rank, gang.size) == (plan.rank_in(rank, name), plan.size_of(name))
