"""The hypothesis strategies users get: only valid layouts, the documented reach, fixed sizes
held, and first and last ranks of groups drawn more often than chance."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from gangmesh.plan.topology import DENSE_DIMS, SHARED_DIMS, MeshTopology
from gangmesh.testing.strategies import SIZE_CAP, layouts, layouts_and_ranks

EVERY_SIZE = (*DENSE_DIMS, "ep", "etp")
SEARCH = settings(max_examples=2000, database=None)
"""For hypothesis.find: how long to look for an example (it stops at the first one)."""


def drawn(strategy: st.SearchStrategy, count: int = 200) -> list:
    """``count`` values hypothesis generates from ``strategy`` (no shrinking, no database)."""
    values: list = []

    @settings(
        max_examples=count,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(strategy)
    def record(value):
        values.append(value)

    record()
    return values


def rebuilt(plan: MeshTopology) -> MeshTopology:
    return MeshTopology(plan.world_size, **plan.sizes(), order=plan.order)


@given(
    st.integers(1, 2**16)
    .flatmap(lambda high: st.tuples(st.integers(1, high), st.just(high), st.booleans()))
    .flatmap(
        lambda bounds: st.tuples(
            layouts(min_world_size=bounds[0], max_world_size=bounds[1], orders=bounds[2]),
            st.just(bounds),
        )
    )
)
def test_every_layout_is_valid_and_within_bounds(case):
    plan, (low, high, orders) = case
    assert rebuilt(plan) == plan
    assert low <= plan.world_size <= high
    assert math.prod(plan.dims.values()) == plan.world_size
    assert orders or plan.order == DENSE_DIMS
    sizes = plan.sizes()
    assert sizes["ep"] == 1 or plan.order[:2] in (SHARED_DIMS, SHARED_DIMS[::-1])
    assert sizes["etp"] in (1, sizes["tp"])
    assert sizes["ep"] == 1 or sizes["etp"] == 1 or plan.order[-1] == "tp"


@given(layouts_and_ranks(max_world_size=4096, orders=True))
def test_ranks_belong_to_their_layout(case):
    plan, rank = case
    assert rebuilt(plan) == plan
    assert 0 <= rank < plan.world_size <= 4096


def test_worlds_reach_32768_ranks():
    plan = find(layouts(), lambda p: p.world_size >= 32768, settings=SEARCH)
    assert 32768 <= plan.world_size <= 65536


@pytest.mark.parametrize("name", EVERY_SIZE)
def test_every_dimension_is_drawn_above_1(name):
    plan = find(layouts(), lambda p: p.sizes()[name] > 1, settings=SEARCH)
    assert plan.sizes()[name] > 1 and rebuilt(plan) == plan


def test_orders_draws_orders_other_than_the_default_expert_layouts_included():
    plan = find(
        layouts(max_world_size=4096, orders=True),
        lambda p: p.order != DENSE_DIMS and p.sizes()["ep"] > 1,
        settings=SEARCH,
    )
    assert plan.order != DENSE_DIMS and rebuilt(plan) == plan


def test_a_small_world_shrinks_to_the_smallest_layout():
    assert find(layouts(), lambda p: True, settings=SEARCH) == MeshTopology(1)


@given(layouts(max_world_size=4096, pp=2, tp=4))
def test_fixed_pp_and_tp_are_held(plan):
    assert (plan.sizes()["pp"], plan.sizes()["tp"]) == (2, 4)


@given(layouts(max_world_size=4096, ep=8))
def test_fixed_ep_is_held(plan):
    assert plan.sizes()["ep"] == 8 and rebuilt(plan) == plan


@given(layouts(max_world_size=4096, etp=2))
def test_fixed_etp_holds_tp(plan):
    sizes = plan.sizes()
    assert (sizes["etp"], sizes["tp"]) == (2, 2) and rebuilt(plan) == plan


@given(layouts(max_world_size=4096, ep=1, etp=2, orders=True))
def test_experts_keep_tp_without_expert_parallelism_in_any_order(plan):
    sizes = plan.sizes()
    assert (sizes["ep"], sizes["etp"], sizes["tp"]) == (1, 2, 2) and rebuilt(plan) == plan


ORDER = ("tp", "pp", "dp_replicate", "dp_shard", "cp")


@given(layouts(max_world_size=4096, order=ORDER))
def test_a_fixed_order_is_held_without_experts_where_it_allows_none(plan):
    assert plan.order == ORDER and plan.sizes()["ep"] == 1


@given(layouts(max_world_size=4096, order="dp_replicate,pp,cp,dp_shard,tp", ep=2, etp=2))
def test_a_fixed_expert_order_is_held(plan):
    assert plan.order == ("dp_replicate", "pp", "cp", "dp_shard", "tp")
    assert (plan.sizes()["ep"], plan.sizes()["etp"]) == (2, 2)


@given(layouts(world_sizes=[24, 4096, 65536], tp=4))
def test_world_sizes_are_the_only_worlds(plan):
    assert plan.world_size in (24, 4096, 65536) and plan.sizes()["tp"] == 4


@given(layouts(max_world_size=4096, ranks_per_node=8))
def test_ranks_per_node_keeps_to_whole_nodes(plan):
    assert plan.world_size % 8 == 0 or plan.world_size < 8


def test_ranks_per_node_still_reaches_several_nodes():
    plan = find(layouts(ranks_per_node=8), lambda p: p.world_size >= 32768, settings=SEARCH)
    assert plan.world_size % 8 == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_world_size": 16, "pp": 4, "tp": 8}, "max_world_size: the fixed sizes need 32"),
        ({"world_sizes": [24], "tp": 16}, "world_sizes: none of"),
        (
            {"order": ORDER, "ep": 2},
            "order: with ep=2 > 1, pp and dp_replicate must be the two outermost",
        ),
        ({"tp": 4, "etp": 2}, "etp: expected 1 or tp=4, got 2"),
        (
            {"order": "pp,dp_replicate,tp,dp_shard,cp", "ep": 2, "etp": 2},
            "order: with ep=2 > 1 and etp = tp = 2, tp must be the innermost",
        ),
        ({"zz": 2}, "zz: unknown dimension"),
        ({"min_world_size": 9, "max_world_size": 8}, "min_world_size: expected at most"),
        ({"order": "pp,tp"}, "order: expected each of"),
    ],
)
def test_bounds_no_layout_meets_are_refused_at_once(kwargs, match):
    with pytest.raises(ValueError, match=match):
        layouts(**kwargs)


def test_first_and_last_ranks_of_groups_are_over_represented():
    """In a 4096-rank layout (dp_shard=64, tp=64) 6% of the ranks are the first or last of
    a group; hypothesis's own integers, biased to small and extreme values, draw such edges
    in about 11% of examples; layouts_and_ranks draws them in more than half."""
    sizes = {"pp": 1, "dp_replicate": 1, "dp_shard": 64, "cp": 1, "tp": 64}
    plan = MeshTopology(4096, **sizes)
    edges = np.zeros(4096, dtype=bool)
    for name in ("dp_shard", "tp"):
        groups = plan.groups(name)
        edges[groups[:, 0]] = edges[groups[:, -1]] = True
    fixed = layouts(world_sizes=[4096], **sizes, ep=1, etp=1)
    assert set(drawn(fixed, 5)) == {plan}  # everything fixed: only the rank varies
    every = layouts_and_ranks(world_sizes=[4096], **sizes, ep=1, etp=1)
    ranks = [rank for _, rank in drawn(every)]
    share = edges[ranks].mean()
    chance = edges[drawn(st.integers(0, 4095))].mean()
    assert share >= 0.4 and share >= chance + 0.25, (share, chance)


def test_drawn_sizes_stay_under_the_cap_in_open_worlds():
    for plan in drawn(layouts(), 100):
        assert all(size <= SIZE_CAP for size in plan.dims.values())


def test_importing_without_hypothesis_says_what_to_install():
    script = textwrap.dedent(
        """
        import sys

        class NoHypothesis:
            def find_spec(self, name, path=None, target=None):
                if name == "hypothesis" or name.startswith("hypothesis."):
                    raise ImportError(f"No module named {name!r} (blocked)")
                return None

        sys.meta_path.insert(0, NoHypothesis())
        try:
            import gangmesh.testing.strategies
        except ImportError as ex:
            print(ex)
        else:
            raise SystemExit("imported without hypothesis")
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert "pip install 'gangmesh[testing]'" in run.stdout
    assert "hypothesis" in run.stdout
