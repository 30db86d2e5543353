"""The planner's layout is exactly the documented one, for any world, factorisation, expert
view and order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gangmesh.plan.layout import Layout
from gangmesh.plan.topology import (
    DENSE_DIMS,
    EXPERT_DIMS,
    FLATTENED,
    SHARED_DIMS,
    MeshTopology,
)
from gangmesh.testing.strategies import layouts, layouts_and_ranks

EVERY_NAME = (*DENSE_DIMS, *EXPERT_DIMS, *FLATTENED, "rdp", "sdp")
ANY_LAYOUT = layouts(max_world_size=2**16, orders=True)
SMALL_LAYOUT = layouts(max_world_size=512, orders=True)


def expected_coordinates(plan: MeshTopology, rank: int) -> dict[str, int]:
    """Coordinates computed here, independently of the planner: the dense view row-major in
    plan.order; the expert view splits the borrowed dense dims (dp_shard, cp, and tp when
    etp = 1, taken in plan.order), then tp when etp = tp, into (efsdp, ep, etp)."""
    sizes = plan.dims
    out = {}
    rest = rank
    for name in reversed(plan.order):
        out[name] = rest % sizes[name]
        rest //= sizes[name]
    ep, etp = plan.size_of("ep"), plan.size_of("etp")
    borrowed = ("dp_shard", "cp", "tp") if etp == 1 else ("dp_shard", "cp")
    taken = [n for n in plan.order if n in borrowed] + ([] if etp == 1 else ["tp"])
    block = 0
    for name in taken:
        block = block * sizes[name] + out[name]
    out["etp"] = block % etp
    out["ep"] = block // etp % ep
    out["efsdp"] = block // (etp * ep)
    return out


def view_order(plan: MeshTopology, dims: tuple[str, ...]) -> list[str]:
    """The names of the view that holds ``dims``, outermost first."""
    expert = any(d in EXPERT_DIMS for d in dims)
    return list(plan.expert_dims) if expert else list(plan.order)


def view_of(name: str) -> tuple[str, ...]:
    dims = FLATTENED.get(name, ({"rdp": "dp_replicate", "sdp": "dp_shard"}.get(name, name),))
    return tuple(dims)


@given(ANY_LAYOUT, st.sampled_from(EVERY_NAME))
def test_groups_partition_the_world(plan, dim):
    groups = plan.groups(dim)
    assert groups.dtype == np.int64
    assert groups.shape == (plan.world_size // plan.size_of(dim), plan.size_of(dim))
    assert np.array_equal(np.sort(groups.reshape(-1)), np.arange(plan.world_size))


@settings(max_examples=60)
@given(SMALL_LAYOUT, st.sampled_from(EVERY_NAME))
def test_groups_equal_an_independent_coordinate_formula(plan, dim):
    """Two ranks share a group along ``dim`` exactly when their coordinates agree on every
    dimension of the same view outside ``dim``; inside a group, ranks are in mesh order."""
    dims = view_of(dim)
    view = view_order(plan, dims)
    coords = [expected_coordinates(plan, r) for r in range(plan.world_size)]
    fixed = [d for d in view if d not in dims]
    found: dict[tuple[int, ...], list[int]] = {}
    for rank, c in enumerate(coords):
        found.setdefault(tuple(c[d] for d in fixed), []).append(rank)
    assert sorted(map(sorted, found.values())) == sorted(map(sorted, plan.groups(dim).tolist()))
    inner = [d for d in view if d in dims]
    # A view that reorders the dense dims (the expert view at ep = 1) lists several dims ascending.
    reordered = len(inner) > 1 and bool(plan.view(expert=view != list(plan.order)).axes)
    for group in plan.groups(dim).tolist():
        along = [tuple(coords[r][d] for d in inner) for r in group]
        assert (group if reordered else along) == sorted(group if reordered else along), (
            "groups enumerate in mesh order"
        )


@given(layouts_and_ranks(max_world_size=2**16, orders=True))
def test_coordinates_match_the_formula_and_round_trip(case):
    plan, rank = case
    coordinate = plan.coordinate(rank)
    assert coordinate == expected_coordinates(plan, rank)
    assert plan.rank_of(**{n: coordinate[n] for n in DENSE_DIMS}) == rank
    expert = {n: coordinate[n] for n in (*SHARED_DIMS, *EXPERT_DIMS)}
    assert plan.rank_of(**expert) == rank
    for dim in (*DENSE_DIMS, *EXPERT_DIMS):
        group = plan.group_of(rank, dim)
        assert group.index(rank) == plan.rank_in(rank, dim) == coordinate.get(dim, 0)


@given(layouts_and_ranks(max_world_size=2**16, orders=True))
def test_the_expert_view_borrows_dense_ranks_by_the_rules(case):
    plan, rank = case
    sizes = plan.sizes()
    assert sizes["ep"] == 1 or set(plan.order[:2]) == {"pp", "dp_replicate"}
    borrowed = ["dp_shard", "cp"] + (["tp"] if sizes["etp"] == 1 else [])
    block = set(plan.group_of(rank, tuple(d for d in plan.order if d in borrowed)))
    assert set(plan.group_of(rank, "ep")) <= block, "an ep group stays inside one dense block"
    assert set(plan.group_of(rank, "efsdp")) <= block
    if sizes["etp"] > 1:
        assert plan.group_of(rank, "etp") == plan.group_of(rank, "tp")
    for shared in SHARED_DIMS:
        groups = plan.groups(shared)
        assert plan.group_of(rank, shared) == groups[np.nonzero(groups == rank)[0][0]].tolist()
    product_of_views = plan.size_of("pp") * plan.size_of("edp") * sizes["ep"] * sizes["etp"]
    assert product_of_views == plan.world_size
    assert plan.size_of("edp") == sizes["dp_replicate"] * plan.size_of("efsdp")
    held = {(c["ep"], c["etp"], c["pp"]) for c in map(plan.coordinate, plan.group_of(rank, "edp"))}
    assert len(held) == 1, "an edp group holds one expert shard of one stage"


@given(layouts_and_ranks(max_world_size=2**16, orders=True, ep=1))
def test_without_expert_parallelism_the_expert_groups_are_the_dense_ones(case):
    """At ep = 1 every rank that holds the same expert weights is in one edp group, as
    Megatron-Core and torchtitan define it: edp spans the dense data (and cp) ranks, and the
    tp ranks too when the experts do not keep tensor parallelism."""
    plan, rank = case
    kept_tp = plan.size_of("etp") == plan.size_of("tp") > 1
    data = ("dp_replicate", "dp_shard", "cp") + (() if kept_tp else ("tp",))
    dense = tuple(d for d in plan.order if d in data)
    assert sorted(plan.group_of(rank, "edp")) == sorted(plan.group_of(rank, dense))
    assert sorted(plan.group_of(rank, "efsdp")) == sorted(
        plan.group_of(rank, tuple(d for d in dense if d != "dp_replicate"))
    )
    assert plan.group_of(rank, "ep") == [rank]
    assert plan.group_of(rank, "etp") == (plan.group_of(rank, "tp") if kept_tp else [rank])
    assert plan.size_of("edp") == plan.world_size // (plan.size_of("pp") * plan.size_of("etp"))


@given(ANY_LAYOUT)
def test_default_order_splits(plan):
    assume(plan.order == DENSE_DIMS)
    d = plan.dims
    # tp groups are runs of tp consecutive ranks, starting at multiples of tp.
    tp = plan.groups("tp")
    assert (tp[:, 0] % d["tp"] == 0).all()
    assert (tp == tp[:, :1] + np.arange(d["tp"])).all()
    # dp groups (replicate x shard) are strided by cp * tp.
    assert (np.diff(plan.groups("dp"), axis=1) == d["cp"] * d["tp"]).all()
    # pp groups are strided by world_size / pp.
    assert (np.diff(plan.groups("pp"), axis=1) == plan.world_size // d["pp"]).all()
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


def test_expert_tables_for_eight_processes():
    moe = MeshTopology(8, dp_shard=4, tp=2, ep=4)
    assert moe.expert_dims == {"pp": 1, "dp_replicate": 1, "efsdp": 2, "ep": 4, "etp": 1}
    assert moe.groups("ep").tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert moe.groups("efsdp").tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    kept_tp = MeshTopology(8, dp_replicate=2, dp_shard=2, tp=2, ep=2, etp=2)
    assert kept_tp.groups("ep").tolist() == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert kept_tp.groups("etp").tolist() == kept_tp.groups("tp").tolist()
    assert kept_tp.groups("edp").tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    tp_outermost = MeshTopology(8, tp=2, order="tp,pp,dp_replicate,dp_shard,cp")
    assert tp_outermost.groups("tp").tolist() == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert tp_outermost.groups("dp").tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert MeshTopology(8).megatron_order() == "tp-cp-ep-dp-pp"


@given(ANY_LAYOUT)
def test_the_megatron_spelling_of_an_order_reads_back(plan):
    """Megatron-Core writes dp for both data dimensions, so it spells exactly the orders with
    dp_replicate just outside dp_shard, and each spelling reads back as the same plan."""
    if plan.order.index("dp_shard") != plan.order.index("dp_replicate") + 1:
        with pytest.raises(ValueError, match=r"^order: .* has no Megatron-Core spelling"):
            plan.megatron_order()
        return
    spelled = plan.megatron_order()
    assert Layout(order=spelled).megatron_order() == spelled
    assert Layout(order=spelled).order == plan.order
    assert MeshTopology(plan.world_size, **plan.sizes(), order=spelled) == plan


@given(st.permutations(list(DENSE_DIMS)))
def test_every_order_megatron_spells_reads_back_as_the_same_layout(order):
    layout = Layout(order=order)
    try:
        spelled = layout.megatron_order()
    except ValueError as error:
        assert order.index("dp_shard") != order.index("dp_replicate") + 1
        assert str(error).startswith(f"order: {','.join(order)} has no Megatron-Core spelling")
        return
    assert Layout(order=spelled) == layout


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        ({"ep": 3}, "ep: expected a factor of the ranks expert parallelism borrows, dp_shard=8"),
        (
            {"tp": 4, "ep": 2, "etp": 2},
            "etp: expected 1 (experts also borrow the tp ranks) or tp=4",
        ),
        ({"etp": 2}, "etp: expected 1 (experts also borrow the tp ranks) or tp=1"),
        (
            {"tp": 2, "ep": 2, "order": "tp,pp,dp_replicate,dp_shard,cp"},
            "order: with ep=2 > 1, pp and dp_replicate must be the two outermost",
        ),
        (
            {"tp": 2, "ep": 2, "etp": 2, "order": "pp,dp_replicate,tp,dp_shard,cp"},
            "order: with ep=2 > 1 and etp = tp = 2, tp must be the innermost dimension",
        ),
        ({"order": "pp,tp"}, "order: expected each of pp, dp_replicate, dp_shard, cp, tp once"),
    ],
)
def test_each_broken_rule_is_a_value_error_that_states_it(kwargs, rule):
    with pytest.raises(ValueError) as info:
        MeshTopology(8, **kwargs)
    assert str(info.value).startswith(rule)


@given(ANY_LAYOUT, st.integers(2, 64))
def test_an_ep_that_does_not_divide_the_borrowed_ranks_is_rejected(plan, ep):
    sizes = plan.sizes()
    borrowed = sizes["dp_shard"] * sizes["cp"] * sizes["tp"]
    assume(borrowed % ep)
    with pytest.raises(ValueError, match=f"got ep={ep}"):
        MeshTopology(plan.world_size, **{**sizes, "ep": ep, "etp": 1})


BAD_SIZES = st.one_of(
    st.integers(max_value=0).filter(lambda v: v != -1),
    st.floats(allow_nan=True),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
)


@given(layouts(max_world_size=4096), st.sampled_from(DENSE_DIMS), BAD_SIZES)
def test_a_bad_size_is_a_value_error_naming_the_dimension(plan, dim, bad):
    with pytest.raises(ValueError, match=dim):
        MeshTopology(plan.world_size, **{**plan.dims, dim: bad})


@given(layouts(max_world_size=4096), st.integers(2, 97))
def test_sizes_whose_product_is_not_the_world_are_rejected(plan, factor):
    with pytest.raises(ValueError, match=f"but world_size is {plan.world_size * factor}"):
        MeshTopology(plan.world_size * factor, **plan.dims)


@given(layouts(max_world_size=4096), st.sampled_from(DENSE_DIMS), st.data())
def test_sizes_that_do_not_divide_the_world_leave_nothing_to_infer(plan, dim, data):
    known = plan.world_size // plan.dims[dim]
    assume(known > 1)
    # Every world that the sizes given do not divide: a multiple of them plus a remainder.
    world = known * data.draw(st.integers(0, 64)) + data.draw(st.integers(1, known - 1))
    with pytest.raises(ValueError, match="cannot infer its size"):
        MeshTopology(world, **{**plan.dims, dim: -1})


@given(layouts(max_world_size=4096), st.sampled_from(DENSE_DIMS))
def test_one_size_may_be_inferred(plan, dim):
    sizes = {**plan.dims, dim: -1}
    assert MeshTopology(plan.world_size, **sizes).dims == plan.dims


@given(st.sampled_from(DENSE_DIMS), st.sampled_from(DENSE_DIMS))
def test_two_inferred_sizes_are_rejected(first, second):
    assume(first != second)
    with pytest.raises(ValueError, match="at most one size may be -1"):
        MeshTopology(16, **{first: -1, second: -1})


@given(layouts(max_world_size=4096), st.one_of(st.integers(), st.floats(), st.text(max_size=2)))
def test_ranks_outside_the_world_and_unknown_names_are_rejected(plan, rank):
    if isinstance(rank, int) and 0 <= rank < plan.world_size:
        return
    with pytest.raises(ValueError, match="rank"):
        plan.coordinate(rank)
    with pytest.raises(ValueError, match="rank"):
        plan.group_of(rank, "tp")


@given(st.text(min_size=1, max_size=12))
def test_unknown_dimension_names_are_rejected(name):
    assume(name not in EVERY_NAME)
    plan = MeshTopology(8, tp=2)
    with pytest.raises(ValueError, match="unknown dimension"):
        plan.groups(name)
    with pytest.raises(ValueError, match="unknown dimension"):
        plan.rank_of(**{name: 0})


def test_coordinates_out_of_range_and_out_of_order_dims_are_rejected():
    plan = MeshTopology(8, tp=2, ep=2)
    with pytest.raises(ValueError, match=r"tp: expected a coordinate in \[0, 2\), got 2"):
        plan.rank_of(tp=2)
    with pytest.raises(ValueError, match="mesh order"):
        plan.groups(("tp", "pp"))
    with pytest.raises(ValueError, match="mixes dense-only and expert dimensions"):
        plan.groups(("dp_shard", "ep"))
    with pytest.raises(ValueError, match="tp: unknown dimension in the expert view"):
        plan.rank_of(ep=1, tp=1)
    with pytest.raises(ValueError, match="ranks_per_node"):
        plan.check_locality(0)


def test_expert_groups_without_expert_parallelism_for_eight_processes():
    plan = MeshTopology(8, pp=2, dp_replicate=2, dp_shard=2)
    assert plan.expert_dims == {"pp": 2, "dp_replicate": 2, "efsdp": 2, "ep": 1, "etp": 1}
    assert plan.groups("edp").tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert plan.groups("efsdp").tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert plan.groups("ep").tolist() == [[r] for r in range(8)]
    assert plan.coordinate(5)["ep"] == 0 and plan.rank_of(ep=0, efsdp=1, pp=1) == 5
    kept_tp = MeshTopology(
        8, dp_replicate=2, dp_shard=2, tp=2, order="tp,pp,dp_replicate,dp_shard,cp", etp=2
    )
    assert (
        kept_tp.groups("etp").tolist()
        == kept_tp.groups("tp").tolist()
        == [[0, 4], [1, 5], [2, 6], [3, 7]]
    )
    assert kept_tp.groups("edp").tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]


@settings(max_examples=40)
@given(layouts(max_world_size=4096, orders=True), st.data())
def test_locality_findings_are_exactly_the_crossing_gangs(plan, data):
    # Only node sizes the world accepts: whole nodes, or one node larger than the world.
    fits = [n for n in range(1, 65) if plan.world_size % n == 0 or n >= plan.world_size]
    per_node = data.draw(st.sampled_from(fits))
    findings = {f.dim: f for f in plan.check_locality(per_node)}
    for f in findings.values():
        assert len(set(f.nodes)) > 1
        assert sorted({r // per_node for r in f.group}) == f.nodes
    for dim in ("tp", "cp", "ep"):
        nodes = plan.groups(dim) // per_node
        crosses = bool((nodes.min(axis=1) != nodes.max(axis=1)).any())
        assert (dim in findings) == (crosses and plan.size_of(dim) > 1), dim


def test_ranks_per_node_must_divide_the_world():
    with pytest.raises(ValueError, match="ranks_per_node: expected a factor of world_size 16"):
        MeshTopology(16).check_locality(3)
    assert MeshTopology(4).check_locality(8) == [], "one node holds the whole world"


def test_locality_examples():
    assert MeshTopology(16, tp=8).check_locality(8) == []
    (finding,) = MeshTopology(16, tp=16).check_locality(8)
    assert finding.dim == "tp" and finding.nodes == [0, 1] and finding.avoidable
    assert "use tp=8 (dp_shard becomes 2)" in finding.message
    (finding,) = MeshTopology(16, dp_replicate=2, dp_shard=8).check_locality(4)
    assert (
        finding.dim == "dp_shard" and "use dp_shard=4 (dp_replicate becomes 4)" in finding.message
    )
    assert MeshTopology(16, dp_replicate=4, dp_shard=4).check_locality(4) == []
    (finding,) = MeshTopology(12, tp=4).check_locality(6)
    assert finding.group == [4, 5, 6, 7] and finding.nodes == [0, 1]
    assert finding.message.endswith("not aligned to nodes; use tp=3 (dp_shard becomes 4)")
    assert finding.fix == {"tp": 3, "dp_shard": -1}
    (note,) = MeshTopology(64, dp_replicate=2, dp_shard=4, tp=8).check_locality(8)
    assert note.dim == "dp_shard" and not note.avoidable, "tp filling a node is no mistake"
    (finding,) = MeshTopology(16, tp=2, order="pp,dp_replicate,tp,dp_shard,cp").check_locality(8)
    assert "put tp inside dp_shard (--order pp,dp_replicate,dp_shard,cp,tp)" in finding.message
    (finding,) = MeshTopology(24, dp_shard=12, tp=2, ep=4).check_locality(6)
    assert finding.dim == "ep" and finding.avoidable
