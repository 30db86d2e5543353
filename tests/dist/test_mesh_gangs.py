"""Gangs built from one DeviceMesh on 8 real gloo processes match the plan, talk, and time out."""

from __future__ import annotations

import pytest

from gangmesh.topology import MeshTopology
from tests.dist.launch import torchrun

pytestmark = pytest.mark.dist

WORLD = 8
GANG_DIMS = {"dp": "dp", "rdp": "dp_replicate", "sdp": "dp_shard", "tp": "tp", "pp": "pp", "cp": "cp"}
PLANS = {
    "pp2_rep2_tp2": MeshTopology(WORLD, pp=2, dp_replicate=2, tp=2),
    "cp2_tp2": MeshTopology(WORLD, cp=2, tp=2),
    "parallel": MeshTopology(WORLD, dp_replicate=-1, dp_shard=1, tp=2),
    "hsdp": MeshTopology(WORLD, dp_replicate=2, dp_shard=2, tp=2),
    "fsdp": MeshTopology(WORLD, dp_shard=-1, tp=2),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("mesh")
    run = torchrun("mesh_gangs.py", WORLD, str(out), timeout=300)
    assert run.returncode == 0, run.output
    found = run.results(out)
    assert sorted(found) == list(range(WORLD)), run.output
    return found


@pytest.mark.parametrize("layout", sorted(PLANS))
@pytest.mark.parametrize("gang", sorted(GANG_DIMS))
def test_every_gang_matches_the_plan_and_sums_its_members(results, layout, gang):
    plan = PLANS[layout]
    dim = GANG_DIMS[gang]
    for me in range(WORLD):
        got = results[me][layout][gang]
        members = plan.group_of(me, dim)
        assert (got["rank"], got["size"]) == (plan.rank_in(me, dim), len(members))
        if "members" in got:
            assert got["members"] == members
        else:
            assert len(members) == 1, "only size-1 gangs may be fake"
        assert got["sum_of_global_ranks"] == sum(members)
        assert got["broadcast_from_last"] == members[-1]


def test_documented_hsdp_split_with_tensor_parallel_on_gloo(results):
    # tp=2: dp = [0,2,4,6] / [1,3,5,7]; intra_node_size=2 splits each dp gang in consecutive pairs.
    sdp = {tuple(results[me]["hsdp"]["sdp"]["members"]) for me in range(WORLD)}
    rdp = {tuple(results[me]["hsdp"]["rdp"]["members"]) for me in range(WORLD)}
    assert sdp == {(0, 2), (4, 6), (1, 3), (5, 7)}
    assert rdp == {(0, 4), (2, 6), (1, 5), (3, 7)}


def test_the_timeout_reaches_every_group_created(results):
    for me in range(WORLD):
        for layout in ("pp2_rep2_tp2", "cp2_tp2"):
            entry = results[me][layout]
            for gang in ("dp", "rdp", "sdp", "tp", "pp", "cp"):
                if "timeout" in entry[gang]:
                    assert entry[gang]["timeout"] == 77.0, (me, layout, gang)
            # gangs.tp.create_gang([1]) exists on tp rank 1, the odd ranks.
            assert entry.get("tp_sub_timeout") == (77.0 if me % 2 else None)
        assert results[me]["cp2_tp2"]["dp_shard_cp"]["timeout"] == 77.0
        # Gangs made without a timeout inherit the root gang's.
        assert results[me]["parallel"]["tp"]["timeout"] == 60.0


def test_flattened_fsdp_dim_with_context_parallel(results):
    plan = PLANS["cp2_tp2"]
    for me in range(WORLD):
        assert results[me]["cp2_tp2"]["dp_shard_cp"]["members"] == plan.group_of(me, "dp_shard_cp")
        assert results[me]["cp2_tp2"]["mesh_shape"] == list(plan.shape)
