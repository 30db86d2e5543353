"""Layout: the sizes and order a job asks for, checked once, and its Megatron-Core spelling."""

from __future__ import annotations

import dataclasses
import re

import pytest

from gangmesh.assembly.agreement import _normalized
from gangmesh.plan.dims import DENSE_DIMS
from gangmesh.plan.layout import Layout, parse_order
from gangmesh.plan.topology import MeshTopology


def test_a_layout_keeps_what_was_asked_and_resolves_it_against_a_world():
    layout = Layout(tp=2, order="tp, pp,dp_replicate,dp_shard,cp")
    assert layout.dp_shard == -1 and layout.order == ("tp", "pp", "dp_replicate", "dp_shard", "cp")
    assert layout.resolve(8) == {"pp": 1, "dp_replicate": 1, "dp_shard": 4, "cp": 1, "tp": 2}
    assert Layout(**layout.keywords()) == layout
    assert MeshTopology.from_layout(8, layout) == MeshTopology(8, **layout.keywords())
    assert MeshTopology(8, tp=2).layout == Layout(dp_shard=4, tp=2)
    with pytest.raises(AttributeError):
        layout.tp = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tp": 0}, "tp: expected a positive int or -1, got 0"),
        ({"cp": "2"}, "cp: expected a positive int or -1, got '2'"),
        ({"pp": -1}, "pp and dp_shard: at most one size may be -1 (inferred), got pp=-1 * "),
        ({"ep": -1}, "ep: expected an int >= 1, got -1"),
        ({"order": "tp,pp"}, "order: expected each of pp, dp_replicate, dp_shard, cp, tp once"),
    ],
)
def test_bad_layouts_are_refused_with_the_planners_messages(kwargs, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        Layout(**kwargs)
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        MeshTopology(8, **kwargs)


@pytest.mark.parametrize(
    ("order", "hint"),
    [
        ("pp,dp_replicate,dp_shrad,cp,tp", "; did you mean dp_shard for dp_shrad?"),
        (["pp", "dp_replicate", "dp_shard", "context", "tp"], "; did you mean cp for context?"),
        (
            "pp, dp_replicat, dp_shard, cp, tensor",
            "; did you mean dp_replicate for dp_replicat, tp for tensor?",
        ),
    ],
)
def test_a_misspelt_name_of_an_order_gets_the_name_it_meant(order, hint):
    with pytest.raises(ValueError, match=re.escape(hint) + "$"):
        MeshTopology(8, order=order)


@pytest.mark.parametrize(
    ("megatron", "order"),
    [
        ("tp-cp-ep-dp-pp", DENSE_DIMS),
        ("tp-cp-dp-pp", DENSE_DIMS),
        ("cp-tp-dp-ep-pp", ("pp", "dp_replicate", "dp_shard", "tp", "cp")),
        ("tp-pp-ep-dp-cp", ("cp", "dp_replicate", "dp_shard", "pp", "tp")),
    ],
)
def test_megatron_orders_read_innermost_first_with_dp_for_both_data_dims(megatron, order):
    assert parse_order(megatron) == order


@pytest.mark.parametrize(
    "bad", ["tp-cp-ep-dp", "tp-ep-cp-dp-pp", "tp-cp-dp-dp-pp", "tp-cp-ep-dp-xx"]
)
def test_bad_megatron_orders_say_what_is_expected(bad):
    with pytest.raises(
        ValueError, match=r"^order: expected Megatron-Core.s spelling, innermost first"
    ):
        parse_order(bad)


def test_agreement_compares_layouts_so_equal_ones_spelled_differently_agree():
    default = _normalized({"tp": 2, "order": None, "timeout": 5})
    assert default == _normalized({"tp": 2, "order": "tp-cp-ep-dp-pp", "timeout": 5})
    assert default == {**Layout(tp=2).keywords(), "timeout": 5}
    assert default["order"] is None and list(default)[-1] == "timeout"
    raw = {"tp": 0, "order": None}
    assert _normalized(raw) == raw


def test_a_plans_layout_changed_with_replace_is_checked_and_planned_again():
    plan = MeshTopology(8, tp=2, order="pp,dp_replicate,dp_shard,tp,cp")
    hsdp = dataclasses.replace(plan.layout, dp_replicate=2, dp_shard=2)
    expected = MeshTopology(8, dp_replicate=2, dp_shard=2, tp=2, order=plan.order)
    assert MeshTopology.from_layout(8, hsdp) == expected
    with pytest.raises(ValueError, match=r"^tp: expected a positive int or -1, got 0$"):
        dataclasses.replace(plan.layout, tp=0)
