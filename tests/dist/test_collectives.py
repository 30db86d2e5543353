"""Every collective on real gloo processes: the root gang, sub-gangs made with create_gang and
mesh gangs, with group creation interleaved between parts of the world and all of it."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from tests.dist.launch import every_rank_results

pytestmark = pytest.mark.dist

WORLD = 4
SUB = [3, 1, 2]  # global ranks of root.create_gang([3, 1, 2]), in gang rank order
PAIR = [2, 3]  # sub.create_gang([2, 0])
COMBINE: dict[str, Callable[[list[float]], float]] = {
    "SUM": sum,
    "MEAN": lambda v: sum(v) / len(v),
    "PRODUCT": math.prod,
    "MIN": min,
    "MAX": max,
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return every_rank_results("collectives.py", WORLD, tmp_path_factory.mktemp("collectives"))


def expected(members: list[int], me: int) -> dict[str, object]:
    values = [g + 1.0 for g in members]
    last = members[-1]
    rank, size = members.index(me), len(members)
    out: dict[str, object] = {
        "rank": rank,
        "size": size,
        "all_gather_stacked": [[g * 10, g * 10 + 1] for g in members],
        "all_gather_flat": [x for g in members for x in (g * 10, g * 10 + 1)],
        "all_gather_to_list": [[g * 10, g * 10 + 1] for g in members],
        "all_to_all_even": [100.0 * g + rank for g in members for _ in range(2)],
        "all_to_all_uneven": [100.0 * g + rank for g in members for _ in range(rank + 1)],
        "broadcast_from_last": float(last),
        "broadcast_objects_from_last": repr(
            [{"from": last, "nested": [last, ("x", {last})]}, None]
        ),
        "flag": last % 2 == 1,
        "all_sum": sum(members),
        "dict": size,
        "dict_mean": sum(values) / size,
        "objects": [{"g": g} for g in members],
    }
    for op, combine in COMBINE.items():
        out[f"all_reduce_{op}"] = [combine(values), combine([-v for v in values])]
        # another enum's member of the same name (fairseq2's) is taken as gangmesh's
        out[f"all_reduce_{op}_by_name"] = out[f"all_reduce_{op}"]
        # Process with global rank g holds (g + 1) * (i + 1) at index i; this rank gets 2r, 2r+1.
        out[f"reduce_scatter_{op}"] = [
            combine([v * (i + 1) for v in values]) for i in (2 * rank, 2 * rank + 1)
        ]
    return out


@pytest.mark.parametrize("me", range(WORLD))
def test_root_gang_collectives(results, me):
    assert results[me]["root"] == expected(list(range(WORLD)), me)


@pytest.mark.parametrize("me", SUB)
def test_sub_gang_collectives_use_gang_local_source_ranks(results, me):
    assert results[me]["sub"] == expected(SUB, me)


def test_processes_outside_the_sub_gang_get_none(results):
    assert results[0]["sub_is_none"] is True
    assert "sub" not in results[0]


@pytest.mark.parametrize("me", PAIR)
def test_a_sub_gang_of_a_sub_gang_is_made_by_its_members_only(results, me):
    assert results[me]["pair"] == expected(PAIR, me)


def test_sub_gangs_whose_members_made_different_numbers_of_groups(results):
    # first = global [3, 1]; second = global [1, 2]: rank 1 had made one group more than rank 2.
    assert results[3]["first"] == results[1]["first"] == 4.0
    assert results[1]["second"] == results[2]["second"] == 3.0


@pytest.mark.parametrize("me", range(WORLD))
def test_mesh_gangs_after_sub_gangs(results, me):
    tp = [me - me % 2, me - me % 2 + 1]
    dp = [me % 2, me % 2 + 2]
    assert results[me]["mesh_tp"] == expected(tp, me)
    assert results[me]["mesh_dp"] == expected(dp, me)


def test_group_creation_after_sub_gangs_and_mesh_gangs_completes(results):
    assert {me: results[me].get("lone") for me in range(WORLD)} == {0: None, 1: 1, 2: None, 3: 1}
    assert results[1]["deeper"] == results[2]["deeper"] == 3.0
    # create_gangs(dp_replicate=2) after everything: rdp pairs ranks 2 apart.
    assert [results[me]["again_rdp"] for me in range(WORLD)] == [2.0, 4.0, 2.0, 4.0]


@pytest.mark.parametrize("me", range(WORLD))
def test_fake_gang_gives_what_identical_real_processes_get(results, me):
    parity = results[me]["parity"]
    assert parity["fake"] == parity["real"]
    assert parity["real"]["all_to_all_split"] or [1, 0, 2, 1][me] == 0
