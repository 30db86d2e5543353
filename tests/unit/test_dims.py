"""The dimension registry: names that behave as their strings, facts that agree with the
planner, and the tuples derived from them."""

from __future__ import annotations

import json

import pytest

import gangmesh as gm
from gangmesh.plan import dims
from gangmesh.plan.dims import FACTS, Dim
from gangmesh.plan.topology import MeshTopology
from gangmesh.testing import simulate_gangs


def test_a_dimension_is_its_name_wherever_a_string_is():
    assert Dim.DP_SHARD == "dp_shard" and hash(Dim.DP_SHARD) == hash("dp_shard")
    assert {"dp_shard": 1}[Dim.DP_SHARD] == 1 and {Dim.DP_SHARD: 1}["dp_shard"] == 1
    assert f"{Dim.TP}|{Dim.TP:>4}|{Dim.TP!s}|{Dim.TP!r}" == "tp|  tp|tp|'tp'"
    assert json.dumps({Dim.EP: [Dim.ETP]}) == '{"ep": ["etp"]}'
    assert (
        str(MeshTopology(8, tp=2).dims)
        == "{'pp': 1, 'dp_replicate': 1, 'dp_shard': 4, 'cp': 1, 'tp': 2}"
    )


def test_every_dimension_has_facts_and_every_flattened_one_lies_in_one_view():
    assert set(FACTS) == set(Dim)
    for name, members in dims.FLATTENED.items():
        views = {FACTS[m].view for m in members} - {"shared"}
        assert views <= {"expert" if FACTS[name].expert else "dense"}, name


def test_the_derived_tuples_are_the_documented_layout():
    assert dims.DENSE_DIMS == ("pp", "dp_replicate", "dp_shard", "cp", "tp")
    assert dims.SHARED_DIMS == ("pp", "dp_replicate")
    assert dims.EXPERT_DIMS == ("efsdp", "ep", "etp")
    assert dims.SIZE_NAMES == ("pp", "dp_replicate", "dp_shard", "cp", "tp", "ep", "etp")
    assert dims.LOCALITY_PRIORITY == ("tp", "etp", "cp", "ep", "dp_shard", "efsdp")
    assert dims.GANG_NAMES == ("dp", "rdp", "sdp", "tp", "pp", "cp", "ep", "efsdp", "etp", "edp")
    assert dims.ALIASES["rdp"] == ("dp_replicate",) and dims.ALIASES["sdp"] == ("dp_shard",)
    assert gm.DENSE_DIMS is dims.DENSE_DIMS and gm.EXPERT_DIMS is dims.EXPERT_DIMS


@pytest.mark.parametrize("name", list(Dim))
def test_the_view_the_registry_names_is_the_one_the_planner_uses(name):
    plan = MeshTopology(16, dp_replicate=2, tp=2, cp=2, ep=2)
    expert = plan.view_of(name) is plan.view(expert=True)
    assert expert == FACTS[name].expert
    if FACTS[name].view == "shared":
        assert plan.groups(name).tolist() == plan.groups((name,)).tolist()
        assert name in plan.expert_dims and name in plan.dims


def test_every_size_a_layout_asks_for_is_an_option_with_the_planners_default():
    for name in dims.SIZE_NAMES:
        assert FACTS[name].default == gm.MeshTopology.__init__.__kwdefaults__[name]
        assert gm.create_gangs.__kwdefaults__[name] == FACTS[name].default
    assert dims.option(Dim.DP_REPLICATE) == "--dp-replicate"


def test_each_gangs_field_names_its_dimension():
    with simulate_gangs(16, 5, dp_replicate=2, tp=2, cp=2, ep=2) as simulated:
        for field, dim in zip(dims.GANG_NAMES, dims.GANG_DIMS, strict=True):
            assert getattr(simulated, field) is simulated[dim]
            assert dims.FAIRSEQ2_NAMES.get(field, field) == dim
