"""create_parts and bridges on simulated ranks (FakeGang roots): each process's part, its
root, bridges, whole hosts, and bad input named before any process would wait."""

from __future__ import annotations

import pytest
import torch

import gangmesh as gm

CPU = torch.device("cpu")


def simulated(rank: int, size: int = 8) -> gm.FakeGang:
    return gm.FakeGang(CPU, rank=rank, size=size)


@pytest.mark.parametrize("rank", range(8))
def test_every_rank_gets_its_part_and_a_root_numbered_from_0(rank):
    parts = gm.create_parts(simulated(rank), trainer=4, rollout=-1)
    assert parts.name == ("trainer" if rank < 4 else "rollout")
    assert (parts.root.rank, parts.root.size) == (rank % 4, 4)
    assert parts.ranks("rollout") == [4, 5, 6, 7]
    gangs = gm.create_gangs(parts.root, tp=2)
    assert (gangs.tp.rank, gangs.dp.rank) == (rank % 2, rank % 4 // 2)


@pytest.mark.parametrize("rank", range(8))
def test_a_bridge_joins_exactly_the_ranks_asked(rank):
    parts = gm.create_parts(simulated(rank), trainer=4, rollout=4)
    bridge = parts.bridge(trainer=[0], rollout=[4, 5, 6, 7])
    if rank in (0, 4, 5, 6, 7):
        assert bridge is not None and (bridge.rank, bridge.size) == ([0, 4, 5, 6, 7].index(rank), 5)
    else:
        assert bridge is None


def test_pairing_by_coordinate_joins_each_generator_tp_rank_with_the_trainers_shard():
    parts = gm.create_parts(simulated(0), trainer=4, generator=4)
    layouts = {"trainer": {"dp_shard": 2, "tp": 2}, "generator": {"dp_replicate": 2, "tp": 2}}
    routes = parts.pair_by_coordinate("tp", layouts, where={"trainer": {"dp_shard": 0}})
    assert routes == [{"trainer": [0], "generator": [4, 6]}, {"trainer": [1], "generator": [5, 7]}]


def test_placement_asks_for_whole_hosts_per_part():
    sites = [gm.Site("host0")] * 4 + [gm.Site("host1")] * 4
    parts = gm.create_parts(simulated(5), trainer=4, rollout=4, placement=sites)
    assert parts.name == "rollout"
    with pytest.raises(
        ValueError, match=r"placement: .*host host0 runs ranks of trainer and of rollout"
    ):
        gm.create_parts(simulated(5), trainer=2, rollout=6, placement=sites)
    with pytest.raises(
        ValueError, match=r"placement: expected True, False, None or a gangmesh\.Site"
    ):
        gm.create_parts(simulated(5), trainer=4, rollout=4, placement=sites[:3])


@pytest.mark.parametrize(
    ("sizes", "said"),
    [
        ({"trainer": 3, "rollout": 4}, "sizes"),
        ({"trainer": -1, "rollout": -1}, "sizes"),
        ({"trainer": 4, "tp": 4}, "tp"),
        ({"trainer": 4, "root": 4}, "root"),
        ({"trainer": 0, "rollout": 8}, "trainer"),
        ({"trainer": 4, "rollout": 4, "optimizer": 0}, "optimizer"),
    ],
)
def test_bad_parts_are_refused_naming_the_argument(sizes, said):
    with pytest.raises(ValueError, match=said):
        gm.create_parts(simulated(0), **sizes)


@pytest.mark.parametrize(
    ("ranks", "said"),
    [
        ({"trainer": [0], "rollout": [3]}, "rollout"),
        ({"critic": [0]}, "critic"),
        ({"trainer": [0, 0]}, "trainer"),
        ({"trainer": 0}, "trainer: expected"),
    ],
)
def test_bad_bridges_are_refused_naming_the_argument(ranks, said):
    parts = gm.create_parts(simulated(0), trainer=4, rollout=4)
    with pytest.raises((TypeError, ValueError), match=said):
        parts.bridge(**ranks)


def test_a_root_that_is_not_a_gang_is_refused():
    with pytest.raises(TypeError, match="root_gang: expected a Gang"):
        gm.create_parts("root", trainer=4)  # type: ignore[arg-type]


def test_the_other_arguments_of_create_parts_cannot_name_a_part():
    for name in ("placement", "timeout", "root_gang"):
        with pytest.raises(ValueError, match=name):
            gm.plan.parts.PartsPlan(8, {name: 4, "rollout": 4})
