"""Every collective on real gloo processes: the root gang and sub-gangs made with create_gang."""

from __future__ import annotations

import math

import pytest

from tests.dist.launch import torchrun

pytestmark = pytest.mark.dist

WORLD = 4
SUB = [3, 1, 2]  # global ranks of root.create_gang([3, 1, 2]), in gang rank order
PAIR = [2, 3]  # sub.create_gang([2, 0])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("collectives")
    run = torchrun("collectives.py", WORLD, str(out))
    assert run.returncode == 0, run.output
    found = run.results(out)
    assert sorted(found) == list(range(WORLD)), run.output
    return found


def expected(members: list[int], me: int) -> dict[str, object]:
    values = [g + 1.0 for g in members]
    last = members[-1]
    return {
        "rank": members.index(me),
        "size": len(members),
        "all_reduce_SUM": [sum(values), -sum(values)],
        "all_reduce_MEAN": [sum(values) / len(values), -sum(values) / len(values)],
        "all_reduce_PRODUCT": [math.prod(values), math.prod(-v for v in values)],
        "all_reduce_MIN": [min(values), -max(values)],
        "all_reduce_MAX": [max(values), -min(values)],
        "all_gather_stacked": [[g * 10, g * 10 + 1] for g in members],
        "all_gather_flat": [x for g in members for x in (g * 10, g * 10 + 1)],
        "all_gather_to_list": [[g * 10, g * 10 + 1] for g in members],
        "broadcast_from_last": float(last),
        "broadcast_objects_from_last": repr([{"from": last, "nested": [last, ("x", {last})]}, None]),
        "flag": last % 2 == 1,
        "all_sum": sum(members),
        "dict": len(members),
        "objects": [{"g": g} for g in members],
    }


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
