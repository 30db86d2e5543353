"""The planner's layout is exactly the documented one, for any world and factorisation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gangmesh.topology import DIM_NAMES, MeshTopology
from tests.strategies import layouts, resolved

DIMS_AND_FLAT = (*DIM_NAMES, "dp", "dp_shard_cp")


@given(layouts(), st.sampled_from(DIMS_AND_FLAT))
def test_groups_partition_the_world(layout, dim):
    world_size, sizes = layout
    plan = MeshTopology(world_size, **sizes)
    groups = plan.groups(dim)
    assert groups.dtype == np.int64
    assert groups.shape == (world_size // plan.size_of(dim), plan.size_of(dim))
    assert np.array_equal(np.sort(groups.reshape(-1)), np.arange(world_size))


@given(layouts(), st.sampled_from(DIMS_AND_FLAT), st.data())
def test_a_group_is_the_ranks_that_differ_only_along_its_dims(layout, dim, data):
    world_size, sizes = layout
    plan = MeshTopology(world_size, **sizes)
    rank = data.draw(st.integers(0, world_size - 1))
    varying = set(plan.resolve(dim))
    here = plan.coordinate(rank)
    group = plan.group_of(rank, dim)
    assert len(set(group)) == len(group) == plan.size_of(dim)
    for member in group:
        there = plan.coordinate(member)
        assert all(here[n] == there[n] for n in DIM_NAMES if n not in varying)
    row = plan.groups(dim)[np.nonzero(plan.groups(dim) == rank)[0][0]]
    assert row.tolist() == group


@given(layouts(), st.data())
def test_coordinates_round_trip_and_equal_the_rank_inside_each_group(layout, data):
    world_size, sizes = layout
    plan = MeshTopology(world_size, **sizes)
    rank = data.draw(st.integers(0, world_size - 1))
    coordinate = plan.coordinate(rank)
    assert plan.rank_of(**coordinate) == rank
    for dim in DIM_NAMES:
        assert plan.group_of(rank, dim).index(rank) == coordinate[dim] == plan.rank_in(rank, dim)
    dp_index = coordinate["dp_replicate"] * plan.dims["dp_shard"] + coordinate["dp_shard"]
    assert plan.group_of(rank, "dp").index(rank) == dp_index == plan.rank_in(rank, "dp")


@given(layouts())
def test_documented_splits(layout):
    world_size, sizes = layout
    plan = MeshTopology(world_size, **sizes)
    d = resolved(world_size, sizes)
    assert plan.dims == d
    # tp groups are runs of tp consecutive ranks, starting at multiples of tp.
    tp = plan.groups("tp")
    assert (tp[:, 0] % d["tp"] == 0).all()
    assert (tp == tp[:, :1] + np.arange(d["tp"])).all()
    # dp groups (replicate x shard) are strided by cp * tp.
    assert (np.diff(plan.groups("dp"), axis=1) == d["cp"] * d["tp"]).all()
    # pp groups are strided by world_size / pp.
    assert (np.diff(plan.groups("pp"), axis=1) == world_size // d["pp"]).all()
    # HSDP: within a dp group, sdp groups are consecutive slices, rdp groups stride by sdp size.
    replicate, shard = d["dp_replicate"], d["dp_shard"]
    dp = plan.groups("dp").reshape(-1, replicate, shard)
    assert same_rows(dp.reshape(-1, shard), plan.groups("dp_shard"))
    assert same_rows(dp.transpose(0, 2, 1).reshape(-1, replicate), plan.groups("dp_replicate"))


def same_rows(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two group arrays hold the same groups, in any order."""
    return a.shape == b.shape and np.array_equal(np.unique(a, axis=0), np.unique(b, axis=0))


def test_design_tables_for_eight_processes():
    parallel = MeshTopology(8, dp_replicate=-1, dp_shard=1, tp=2)
    assert parallel.groups("tp").tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert parallel.groups("dp").tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    hsdp = MeshTopology(8, dp_replicate=2, dp_shard=4)
    assert hsdp.groups("sdp").tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert hsdp.groups("rdp").tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    fsdp = MeshTopology(8)
    assert fsdp.groups("sdp").tolist() == fsdp.groups("dp").tolist() == [list(range(8))]
    assert fsdp.groups("rdp").shape == (8, 1)


BAD_SIZES = st.one_of(
    st.integers(max_value=0).filter(lambda v: v != -1),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
)


@given(layouts(max_world=4096), st.sampled_from(DIM_NAMES), BAD_SIZES)
def test_a_bad_size_is_a_value_error_naming_the_dimension(layout, dim, bad):
    world_size, sizes = layout
    with pytest.raises(ValueError, match=dim):
        MeshTopology(world_size, **{**sizes, dim: bad})


@given(layouts(max_world=4096), st.integers(2, 97))
def test_sizes_whose_product_is_not_the_world_are_rejected(layout, factor):
    world_size, sizes = layout
    assume(-1 not in sizes.values())
    with pytest.raises(ValueError, match=f"but world_size is {world_size * factor}"):
        MeshTopology(world_size * factor, **sizes)
    assume(world_size % factor)
    with pytest.raises(ValueError, match="cannot infer its size"):
        MeshTopology(world_size // factor or 1, **{**sizes, "pp": sizes["pp"] * factor, "tp": -1})


@given(st.sampled_from(DIM_NAMES), st.sampled_from(DIM_NAMES))
def test_two_inferred_sizes_are_rejected(first, second):
    assume(first != second)
    with pytest.raises(ValueError, match="at most one size may be -1"):
        MeshTopology(16, **{first: -1, second: -1})


@given(layouts(max_world=4096), st.one_of(st.integers(), st.floats(), st.text(max_size=2)))
def test_ranks_outside_the_world_and_unknown_names_are_rejected(layout, rank):
    world_size, sizes = layout
    plan = MeshTopology(world_size, **sizes)
    if isinstance(rank, int) and 0 <= rank < world_size:
        return
    with pytest.raises(ValueError, match="rank"):
        plan.coordinate(rank)
    with pytest.raises(ValueError, match="rank"):
        plan.group_of(rank, "tp")


@given(st.text(min_size=1, max_size=12))
def test_unknown_dimension_names_are_rejected(name):
    assume(name not in (*DIM_NAMES, "dp", "rdp", "sdp", "dp_shard_cp"))
    plan = MeshTopology(8, tp=2)
    with pytest.raises(ValueError, match="unknown dimension"):
        plan.groups(name)
    with pytest.raises(ValueError, match="unknown dimension"):
        plan.rank_of(**{name: 0})


def test_coordinates_out_of_range_and_out_of_order_dims_are_rejected():
    plan = MeshTopology(8, tp=2)
    with pytest.raises(ValueError, match=r"tp: expected a coordinate in \[0, 2\), got 2"):
        plan.rank_of(tp=2)
    with pytest.raises(ValueError, match="mesh order"):
        plan.groups(("tp", "pp"))
    with pytest.raises(ValueError, match="ranks_per_node"):
        plan.check_locality(0)


@settings(max_examples=30)
@given(layouts(max_world=4096), st.integers(1, 64))
def test_locality_findings_are_exactly_the_crossing_gangs(layout, per_node):
    world_size, sizes = layout
    plan = MeshTopology(world_size, **sizes)
    findings = {f.dim: f for f in plan.check_locality(per_node)}
    for f in findings.values():
        assert len(set(f.nodes)) > 1
        assert sorted({r // per_node for r in f.group}) == f.nodes
    tp_groups = plan.groups("tp") // per_node
    tp_crosses = bool((tp_groups.min(axis=1) != tp_groups.max(axis=1)).any())
    assert ("tp" in findings) == tp_crosses


def test_locality_examples():
    assert MeshTopology(16, tp=8).check_locality(8) == []
    (finding,) = MeshTopology(16, tp=16).check_locality(8)
    assert finding.dim == "tp" and finding.nodes == [0, 1]
    (finding,) = MeshTopology(16, dp_replicate=2, dp_shard=8).check_locality(4)
    assert finding.dim == "dp_shard" and "HSDP" in finding.message
    assert MeshTopology(16, dp_replicate=4, dp_shard=4).check_locality(4) == []
    (finding,) = MeshTopology(12, tp=4).check_locality(6)
    assert finding.group == [4, 5, 6, 7] and finding.nodes == [0, 1]
