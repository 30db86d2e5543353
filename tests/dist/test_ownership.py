"""Every object closes exactly what it created, on 4 real gloo processes."""

from __future__ import annotations

import pytest

from tests.dist.launch import every_rank_results

pytestmark = pytest.mark.dist

WORLD = 4


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return every_rank_results("ownership.py", WORLD, tmp_path_factory.mktemp("ownership"))


def test_a_wrapped_user_mesh_keeps_working_after_close(results):
    for me in range(WORLD):
        tp = [me - me % 2, me - me % 2 + 1]
        assert results[me]["user_tp_after_close"] == sum(tp)
        assert results[me]["user_dp_shard_after_close"] == sum([me % 2, me % 2 + 2])
        # Its meshes are built over the user's groups and the flattened ones gangmesh made.
        assert results[me]["wrapped_loss_sum"] == sum([me % 2, me % 2 + 2])
        assert results[me]["wrapped_tp_is_users"] is True
        # root, tp and dp_shard are the user's (or torch's); none was created by gangmesh.
        assert results[me]["wrapped_created"] == [False, False, False]


def test_closing_gangs_leaves_the_default_group(results):
    for me in range(WORLD):
        assert results[me]["initialised_after_close"] is True
        assert results[me]["mesh_after_close"] == 4.0


def test_refined_gangs_share_groups_and_outlive_the_first(results):
    for me in range(WORLD):
        got = results[me]
        # A dense job: no expert gangs (efsdp and edp are not built).
        assert got["shared_with_first"] == ["dp", "rdp", "tp"]
        tp, dp = [me - me % 2, me - me % 2 + 1], [me % 2, me % 2 + 2]
        assert got["second_after_first_closed"] == {
            "root": 6.0, "dp": sum(dp), "rdp": sum(dp), "tp": sum(tp),
        }  # fmt: skip
        assert got["communicators"] == [*sorted([tp, dp]), [0, 1, 2, 3]]
    assert all(results[me]["hsdp_tp_grads_match"] for me in range(WORLD))
    sums = {results[me]["fsdp_grad_sum"] for me in range(WORLD)}
    assert len(sums) == 1, "every process holds the same full gradient"


def test_a_mesh_handed_back_takes_the_gangs_plan_and_is_refused_once_they_are_closed(results):
    for me in range(WORLD):
        got = results[me]
        assert got["handed_back"] == [True, True]
        assert got["closed_mesh"].startswith(
            "mesh: the 'dp_shard_cp' mesh {'pp': 1, 'dp_replicate': 1, 'dp_shard_cp': 2, "
            "'tp': 2} of closed gangs (MeshTopology(4, "
        ), got["closed_mesh"]
        assert "is not this job's (this job is 4 processes on gloo)" in got["closed_mesh"]
        assert got["closed_group"].startswith("pg: process group "), got["closed_group"]
        assert "of 2 processes is not this job's" in got["closed_group"]
