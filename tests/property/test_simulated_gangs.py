"""Gangs built through the real DeviceMesh path (fake backend) match the plan for sampled ranks.

CI simulates worlds of up to 4096 ranks; set GANGMESH_SIM_MAX_WORLD=65536 to run the same
properties at 65,536 ranks by hand.
"""

from __future__ import annotations

import os
from itertools import pairwise

import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gangmesh as gm
from gangmesh.testing import simulate_gangs
from gangmesh.topology import MeshTopology
from tests.strategies import layouts, resolved

MAX_WORLD = int(os.environ.get("GANGMESH_SIM_MAX_WORLD", "4096"))
GANG_DIMS = {
    "dp": "dp",
    "rdp": "dp_replicate",
    "sdp": "dp_shard",
    "tp": "tp",
    "pp": "pp",
    "cp": "cp",
}
SIMULATION = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def sampled_ranks(draw: st.DrawFn, world_size: int) -> list[int]:
    """Every rank of a small world; rank 0, the last rank and one more of a large one."""
    if world_size <= 8:
        return list(range(world_size))
    return sorted({0, world_size - 1, draw(st.integers(0, world_size - 1))})


def members(gang: gm.Gang) -> list[int]:
    if not gang.supports_process_group:
        return []
    return dist.get_process_group_ranks(gang.as_process_group())


def assert_matches_plan(gangs: gm.Gangs, plan: MeshTopology, rank: int) -> None:
    for name, dim in GANG_DIMS.items():
        gang = getattr(gangs, name)
        group = plan.group_of(rank, dim)
        assert (gang.rank, gang.size) == (plan.rank_in(rank, dim), len(group)), name
        assert members(gang) == group, name


def assert_documented_splits(gangs: gm.Gangs, d: dict[str, int], rank: int) -> None:
    """The rules of DESIGN.md, stated without the planner."""
    world = gangs.root.size
    tp_start = rank - rank % d["tp"]
    assert members(gangs.tp) == list(range(tp_start, tp_start + d["tp"]))
    dp = members(gangs.dp)
    assert all(b - a == d["cp"] * d["tp"] for a, b in pairwise(dp))
    pp = members(gangs.pp)
    assert all(b - a == world // d["pp"] for a, b in pairwise(pp))
    sdp, rdp = members(gangs.sdp), members(gangs.rdp)
    start = dp.index(rank) - dp.index(rank) % d["dp_shard"]
    assert sdp == dp[start : start + d["dp_shard"]]
    assert rdp == dp[dp.index(rank) % d["dp_shard"] :: d["dp_shard"]]
    assert gangs.root.rank != 0 or all(gang.rank == 0 for _, gang in gangs.items())


@SIMULATION
@given(layouts(max_world=MAX_WORLD).flatmap(lambda w: st.tuples(st.just(w), sampled_ranks(w[0]))))
def test_create_gangs_matches_the_plan_and_the_documented_splits(case):
    (world_size, sizes), ranks = case
    plan = MeshTopology(world_size, **sizes)
    for rank in ranks:
        with simulate_gangs(world_size, rank, **sizes) as gangs:
            assert gangs.mesh is not None and tuple(gangs.mesh.shape) == plan.shape
            assert_matches_plan(gangs, plan, rank)
            assert_documented_splits(gangs, resolved(world_size, sizes), rank)


@st.composite
def parallel_cases(draw: st.DrawFn) -> tuple[int, int, int | None, list[int]]:
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    dp = draw(st.sampled_from([1, 2, 3, 4, 8, 16, 64, 512]))
    dp = min(dp, MAX_WORLD // tp)
    intra = draw(
        st.one_of(st.none(), st.sampled_from([d for d in range(1, dp + 1) if dp % d == 0]))
    )
    world = tp * dp
    return world, tp, intra, draw(sampled_ranks(world))


@SIMULATION
@given(parallel_cases())
def test_parallel_then_fsdp_gangs_give_the_documented_layout(case):
    world_size, tp, intra, ranks = case
    dp_size = world_size // tp
    shard = dp_size if intra is None else intra
    plan = MeshTopology(world_size, dp_replicate=dp_size // shard, dp_shard=shard, tp=tp)
    for rank in ranks:
        with simulate_gangs(world_size, rank) as root_gangs:
            parallel = gm.create_parallel_gangs(root_gangs.root, tp_size=tp)
            assert members(parallel.tp) == list(range(rank - rank % tp, rank - rank % tp + tp))
            assert members(parallel.dp) == list(range(rank % tp, world_size, tp))
            assert parallel.rdp.size == dp_size and parallel.sdp.size == 1
            fsdp = gm.create_fsdp_gangs(parallel, intra_node_size=intra)
            assert_matches_plan(fsdp, plan, rank)
            assert_documented_splits(fsdp, plan.dims, rank)


@given(layouts(), st.data())
def test_a_fake_root_gives_the_planned_ranks_and_sizes(layout, data):
    world_size, sizes = layout
    plan = MeshTopology(world_size, **sizes)
    rank = data.draw(st.integers(0, world_size - 1))
    import torch

    gangs = gm.create_gangs(gm.FakeGang(torch.device("cpu"), rank=rank, size=world_size), **sizes)
    assert gangs.mesh is None
    for name, dim in GANG_DIMS.items():
        gang = getattr(gangs, name)
        assert isinstance(gang, gm.FakeGang)
        assert (gang.rank, gang.size) == (plan.rank_in(rank, dim), plan.size_of(dim))
