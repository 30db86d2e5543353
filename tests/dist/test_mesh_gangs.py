"""Gangs on 8 real gloo processes match the plan, talk, carry the timeout, and hold exactly one
communicator per distinct set of ranks, for dense, expert and reordered layouts; the same with
the default group bound to a device, where torch makes every group as a split of its parent."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from gangmesh.assembly.mesh_build import BUILT_NAMES
from gangmesh.plan.topology import MeshTopology
from tests.dist.launch import every_rank_results

pytestmark = pytest.mark.dist

WORLD = 8
PLANS = {
    "tp2": MeshTopology(WORLD, tp=2),
    "hsdp_tp2": MeshTopology(WORLD, dp_replicate=2, dp_shard=2, tp=2, expert=True),
    "pp2_rep2_tp2": MeshTopology(WORLD, pp=2, dp_replicate=2, tp=2),
    "cp2_tp2": MeshTopology(WORLD, cp=2, tp=2, expert=True),
    "ep4": MeshTopology(WORLD, dp_shard=4, tp=2, ep=4),
    "ep2_etp2": MeshTopology(WORLD, dp_replicate=2, dp_shard=2, tp=2, ep=2, etp=2),
    "ep1_etp2": MeshTopology(WORLD, dp_replicate=2, dp_shard=2, tp=2, ep=1, etp=2),
    "tp_outermost": MeshTopology(WORLD, tp=2, order="tp,pp,dp_replicate,dp_shard,cp"),
    "parallel": MeshTopology(WORLD, dp_replicate=-1, dp_shard=1, tp=2),
    "hsdp": MeshTopology(WORLD, dp_replicate=2, dp_shard=2, tp=2),
    "fsdp": MeshTopology(WORLD, dp_shard=-1, tp=2),
}
TIMED = set(PLANS) - {"parallel", "hsdp", "fsdp"}
"""Layouts created with a timeout of their own (77 s)."""


def splits_gloo_groups() -> bool:
    """Whether this torch splits a gloo group off an unbound parent (2.15 does)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        return isinstance(dist.split_group(dist.group.WORLD, [[0]]), dist.ProcessGroup)
    except RuntimeError:
        return False
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module", params=["member", "split"])
def results(request, tmp_path_factory):
    """Every rank's results, each group made by its members ("member"), or as torch makes
    them where it splits the default group's communicator, for real on gloo ("split")."""
    splits = request.param == "split"
    if splits and not splits_gloo_groups():
        pytest.skip("this torch does not split gloo groups (torch 2.15 does)")
    out = tmp_path_factory.mktemp("mesh")
    found = every_rank_results("mesh_gangs.py", WORLD, out, request.param, timeout=300)
    for me in range(WORLD):
        calls = found[me]["calls"]
        assert (calls["split_group"] > 0, calls["new_group"] > 0) == (splits, not splits), calls
    return found


def built(plan: MeshTopology) -> list[str]:
    """The gangs built: all but efsdp and edp in a job without experts."""
    return [n for n in BUILT_NAMES if plan.uses_experts or n not in ("efsdp", "edp")]


def test_a_dense_job_builds_no_expert_only_gang(results):
    for me in range(WORLD):
        for layout, plan in PLANS.items():
            expected = [] if plan.uses_experts else ["efsdp", "edp"]
            assert results[me][layout]["unbuilt"] == expected, (me, layout)
            assert ("expert_mesh" in results[me][layout]) == plan.uses_experts, (me, layout)


def test_groups_carry_the_gang_in_their_description(results):
    for me in range(WORLD):
        tp = results[me]["tp2"]["tp"]
        if tp["desc"] is not None:  # torch 2.9.1 on: group_desc
            assert tp["desc"] == "gangmesh:tp:" + ",".join(map(str, tp["members"]))


def test_a_sub_gang_is_made_by_its_parent_gang_and_numbered_as_asked(results):
    parallel = PLANS["parallel"]
    for me in range(WORLD):
        dp = parallel.group_of(me, "dp")
        picked = [dp[2], dp[0]]
        got = results[me]["sub_of_dp"]
        if me in picked:
            assert got == {"members": picked, "rank": picked.index(me), "sum": sum(picked)}
        else:
            assert got is None
        expected = (
            {"members": [2, 0], "rank": [2, 0].index(me), "sum": 2.0} if me in (0, 2) else None
        )
        assert results[me]["sub_of_root"] == expected


@pytest.mark.parametrize("layout", sorted(PLANS))
def test_every_gang_matches_the_plan_and_talks(results, layout):
    plan = PLANS[layout]
    for me in range(WORLD):
        for name in ("root", *built(plan)):
            got = results[me][layout][name]
            members = list(range(WORLD)) if name == "root" else plan.group_of(me, name)
            assert (got["rank"], got["size"]) == (members.index(me), len(members)), (me, name)
            assert got.get("members", [me]) == members, (me, name)
            assert got["sum_of_global_ranks"] == sum(members), (me, name)
            assert got["broadcast_from_last"] == members[-1], (me, name)


@pytest.mark.parametrize("layout", sorted(PLANS))
def test_one_communicator_per_distinct_rank_set_and_one_for_size_one(results, layout):
    plan = PLANS[layout]
    world = tuple(range(WORLD))
    for me in range(WORLD):
        expected = [
            r
            for r in {tuple(plan.group_of(me, name)) for name in built(plan)}
            if 1 < len(r) < WORLD
        ]
        # Gangs spanning the world share the root's group unless their timeout differs from
        # the root's (these layouts ask for 77 s; the root has 60 s): then they share one of their own.
        spans_world = any(len(plan.group_of(me, name)) == WORLD for name in built(plan))
        expected += [world] * (1 + (spans_world and layout in TIMED))
        got = results[me][layout]["communicators"]
        assert sorted(tuple(c["ranks"]) for c in got) == sorted(expected)
        # What torch holds behind the gangs and meshes: the same groups, and one gloo group of
        # this process alone for the size-1 dimensions of the meshes (every layout here has one).
        assert sorted(map(tuple, results[me][layout]["groups"])) == sorted(
            [(me,)] + [tuple(c["ranks"]) for c in got]
        )
        assert results[me][layout]["backends"] == ["gloo"]
        assert [
            c["created"] for c in got if c["ranks"] == list(range(WORLD)) and "root" in c["gangs"]
        ] == [False]


@pytest.mark.parametrize("layout", sorted(PLANS))
def test_every_dimension_of_every_mesh_sums_over_its_gang(results, layout):
    plan = PLANS[layout]
    for me in range(WORLD):
        sums = results[me][layout]["mesh_sums"]
        assert {key.split("/")[0] for key in sums} >= {"dense", "dp_shard_cp", "dp_cp", "dp"}
        for key, total in sums.items():
            assert total == sum(plan.group_of(me, key.split("/")[1])), (me, key)


def test_counts_for_the_documented_layouts(results):
    counts = {layout: len(results[0][layout]["communicators"]) for layout in PLANS}
    # root + each distinct set of ranks of size > 1 for rank 0.
    # At ep = 1 the expert groups are real where asked (expert=True): efsdp = dp_shard x cp x
    # tp, edp = dp_replicate x efsdp; a dense job has none.
    # A whole-world gang with the layout's own timeout has a group of its own beside the root's.
    assert counts["tp2"] == 3  # root, tp [0,1], dp = dp_shard [0,2,4,6]
    assert (
        counts["hsdp_tp2"] == 7
    )  # root, edp (world), tp, rdp [0,4], sdp [0,2], dp, efsdp [0,1,2,3]
    assert counts["pp2_rep2_tp2"] == 4  # root, tp, pp [0,4], rdp [0,2] = dp
    assert counts["cp2_tp2"] == 6  # root, efsdp = edp (world), tp, cp [0,2], dp [0,4], dp_shard_cp
    assert counts["ep1_etp2"] == 5  # root, tp = etp, rdp, sdp = efsdp, dp = edp


def test_expert_layouts_share_pp_replicas_and_tp_with_the_dense_mesh(results):
    for me in range(WORLD):
        ep4 = results[me]["ep4"]
        assert ep4["expert_mesh"] == {"names": ["pp", "dp_replicate", "efsdp", "ep", "etp"],
                                      "shape": [1, 1, 2, 4, 1], "shares_pp": True}  # fmt: skip
        kept = results[me]["ep2_etp2"]
        assert kept["etp"]["members"] == kept["tp"]["members"]
        tp_comm = [c for c in kept["communicators"] if c["ranks"] == kept["tp"]["members"]]
        assert len(tp_comm) == 1 and set(tp_comm[0]["gangs"]) == {"tp", "etp"}
        assert "expert_mesh" not in results[me]["tp2"]  # a dense job: no expert view
        assert results[me]["cp2_tp2"]["expert_mesh"] == {"names": ["pp", "dp_replicate", "efsdp", "ep", "etp"],
                                                         "shape": [1, 1, 8, 1, 1], "shares_pp": True}  # fmt: skip
        without_ep = results[me]["ep1_etp2"]
        for expert, dense in (("etp", "tp"), ("efsdp", "dp_shard"), ("edp", "dp")):
            assert without_ep[expert]["members"] == without_ep[dense]["members"], (me, expert)


@pytest.mark.parametrize("layout", ["ep4", "ep2_etp2", "ep1_etp2", "hsdp_tp2"])
def test_uneven_all_to_all_on_the_expert_gangs(results, layout):
    plan = PLANS[layout]
    for me in range(WORLD):
        for name in ("ep", "efsdp", "etp"):
            group = plan.group_of(me, name)
            rank = group.index(me)
            # Every peer sent rank + 1 rows holding its global rank, in gang rank order.
            expected = [float(peer) for peer in group for _ in range(rank + 1)]
            assert results[me][layout][name]["all_to_all"] == expected, (me, name)


def test_a_reordered_layout_puts_tp_outermost(results):
    for me in range(WORLD):
        got = results[me]["tp_outermost"]
        assert got["tp"]["members"] == [me % 4, me % 4 + 4]
        assert got["mesh"]["names"] == ["tp", "pp", "dp_replicate", "dp_shard", "cp"]


def test_documented_hsdp_split_with_tensor_parallel_on_gloo(results):
    # tp=2: dp = [0,2,4,6] / [1,3,5,7]; intra_node_size=2 splits each dp gang in consecutive pairs.
    sdp = {tuple(results[me]["hsdp"]["dp_shard"]["members"]) for me in range(WORLD)}
    rdp = {tuple(results[me]["hsdp"]["dp_replicate"]["members"]) for me in range(WORLD)}
    assert sdp == {(0, 2), (4, 6), (1, 3), (5, 7)}
    assert rdp == {(0, 4), (2, 6), (1, 5), (3, 7)}


def test_the_timeout_reaches_every_group_created(results):
    for me in range(WORLD):
        for layout in ("tp2", "hsdp_tp2", "pp2_rep2_tp2", "cp2_tp2", "ep4", "ep2_etp2", "ep1_etp2"):
            for name in built(PLANS[layout]):
                entry = results[me][layout][name]
                if "timeout" in entry:
                    assert entry["timeout"] == 77.0, (me, layout, name)
        # Gangs made without a timeout inherit the root gang's, and share its group.
        assert results[me]["parallel"]["tp"]["timeout"] == 60.0
        assert results[me]["fsdp"]["dp"]["timeout"] == 60.0
