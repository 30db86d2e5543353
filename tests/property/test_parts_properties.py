"""The parts of a job partition the world in order, each part's groups are its own plan's
shifted to where it sits, bridges hold exactly the ranks asked for, and pairing by a
coordinate groups exactly the ranks that have it."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gangmesh.plan.dims import ALIASES, DENSE_DIMS, EXPERT_DIMS, SHARED_DIMS
from gangmesh.plan.multipart import MultiPartPlan
from gangmesh.testing.strategies import parts_plans

EVERY_NAME = (*DENSE_DIMS, *EXPERT_DIMS, *ALIASES)
PLANS = parts_plans(max_world_size=512, max_parts=5, orders=True)


@given(PLANS)
def test_the_parts_partition_the_world_in_order(plan: MultiPartPlan):
    parts = plan.parts
    every = [rank for name in parts.names for rank in parts.ranks(name)]
    assert every == list(range(parts.world_size))
    offsets = [parts.offset(name) for name in parts.names]
    assert offsets == sorted(set(offsets)) and offsets[0] == 0
    for name in parts.names:
        assert len(parts.ranks(name)) == parts.sizes[name] == plan.plan(name).world_size
        assert all(parts.part_of(rank) == name for rank in parts.ranks(name))


@given(PLANS, st.sampled_from(EVERY_NAME), st.data())
def test_each_part_has_its_own_plans_groups_where_it_sits(plan: MultiPartPlan, dim, data):
    parts = plan.parts
    for name in parts.names:
        own = plan.plan(name).groups(dim)
        assert np.array_equal(plan.groups(name, dim), own + parts.offset(name))
    rank = data.draw(st.integers(0, parts.world_size - 1), label="rank")
    name = parts.part_of(rank)
    offset = parts.offset(name)
    local = plan.plan(name).group_of(rank - offset, dim)
    assert plan.group_of(rank, dim) == [offset + r for r in local]
    assert set(plan.group_of(rank, dim)) <= set(parts.ranks(name)), "a group stays in its part"


@st.composite
def bridges(draw: st.DrawFn) -> tuple[MultiPartPlan, dict[str, list[int]]]:
    plan = draw(PLANS)
    names = draw(st.lists(st.sampled_from(plan.parts.names), min_size=1, unique=True))
    asked = {
        name: draw(st.lists(st.sampled_from(plan.parts.ranks(name)), min_size=1, unique=True))
        for name in names
    }
    return plan, asked


@given(bridges())
def test_a_bridge_holds_exactly_the_ranks_asked_for(case):
    plan, asked = case
    ranks = plan.parts.bridge_ranks(**asked)
    assert list(ranks) == sorted(rank for taken in asked.values() for rank in taken)
    assert {plan.parts.part_of(rank) for rank in ranks} == set(asked)


PAIRED = ("pp", "dp_replicate", "dp_shard", "cp", "tp", "ep")


@st.composite
def paired(draw: st.DrawFn) -> tuple[MultiPartPlan, str]:
    dim = draw(st.sampled_from(PAIRED), label="dim")
    size = draw(st.sampled_from([1, 2, 3, 4]), label="size")
    return draw(parts_plans(max_world_size=256, max_parts=4, **{dim: size})), dim


@given(paired())
def test_pairing_gives_each_coordinate_exactly_the_ranks_there(case):
    plan, dim = case
    parts = plan.parts
    pairs = plan.pair_by_coordinate(dim)
    assert len(pairs) == plan.plan(parts.names[0]).size_of(dim)
    for c, pair in enumerate(pairs):
        assert list(pair) == list(parts.names)
        for name in parts.names:
            there = [r for r in parts.ranks(name) if plan.coordinate(r)[dim] == c]
            assert pair[name] == there
        parts.bridge_ranks(**pair)  # what a bridge takes


@given(paired(), st.data())
def test_pairing_where_keeps_only_the_ranks_with_those_coordinates(case, data):
    plan, dim = case
    parts = plan.parts
    name = data.draw(st.sampled_from(parts.names), label="part")
    part = plan.plan(name)
    # Dense coordinates are independent of one another; an expert one (ep) only of those
    # the expert view shares with the dense view.
    independent = [d for d in (SHARED_DIMS if dim in EXPERT_DIMS else DENSE_DIMS) if d != dim]
    others = [d for d in independent if part.size_of(d) > 1] or independent
    fixed = data.draw(st.sampled_from(others), label="fixed")
    value = data.draw(st.integers(0, part.size_of(fixed) - 1), label="value")
    pairs = plan.pair_by_coordinate(dim, where={name: {fixed: value}})
    for c, pair in enumerate(pairs):
        coordinates = {r: plan.coordinate(r) for r in parts.ranks(name)}
        there = [r for r, at in coordinates.items() if at[dim] == c and at[fixed] == value]
        assert pair[name] == there
        unfixed = [n for n in parts.names if n != name]
        assert all(pair[n] == plan.pair_by_coordinate(dim)[c][n] for n in unfixed)


@given(PLANS, st.data())
def test_a_part_that_shares_a_node_is_a_finding_and_one_of_whole_nodes_is_not(plan, data):
    parts = plan.parts
    world = parts.world_size
    per_node = data.draw(st.sampled_from([d for d in range(1, world + 1) if world % d == 0]))
    findings = plan.check_locality(per_node)
    for name in parts.names:
        span = parts.span(name)
        whole = span.start % per_node == 0 and span.stop % per_node == 0
        shares = [f for f in findings[name] if f.dim == "root"]
        assert bool(shares) != whole, (name, span, per_node)
        for finding in findings[name]:
            assert set(finding.group) <= set(span), "findings are in global ranks"
        if whole:  # the part's own check, where it sits
            node = span.start // per_node
            own = [
                (f.dim, [span.start + r for r in f.group], [node + n for n in f.nodes], f.avoidable)
                for f in plan.plan(name).check_locality(per_node)
            ]
            assert [(f.dim, f.group, f.nodes, f.avoidable) for f in findings[name]] == own
