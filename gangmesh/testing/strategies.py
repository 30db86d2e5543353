"""Hypothesis strategies for parallel layouts: property-test code that depends on the layout.

>>> from hypothesis import given
>>> from gangmesh.testing.strategies import layouts_and_ranks
>>> @given(layouts_and_ranks(max_world_size=4096, tp=2))
... def test_tp_pairs(case):
...     plan, rank = case
...     assert plan.group_of(rank, "tp") == [rank - rank % 2, rank - rank % 2 + 1]
>>> test_tp_pairs()

Every value is a valid :class:`~gangmesh.MeshTopology`; hypothesis shrinks a failing
one towards small worlds and dimensions of size 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from gangmesh._checks import check_positive
from gangmesh.topology import DENSE_DIMS, SHARED_DIMS, MeshTopology

try:
    from hypothesis import reject
    from hypothesis import strategies as st
except ImportError as ex:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "gangmesh.testing.strategies needs hypothesis: pip install 'gangmesh[testing]'"
    ) from ex

__all__ = ["layouts", "layouts_and_ranks"]

SIZE_CAP = 64
"""Largest size drawn for one dimension (fixed sizes may be larger)."""

_FIXABLE = (*DENSE_DIMS, "ep", "etp", "order")


def layouts(
    *,
    min_world_size: int = 1,
    max_world_size: int = 65536,
    world_sizes: Sequence[int] | None = None,
    ranks_per_node: int | None = None,
    orders: bool = False,
    **fixed: Any,
) -> st.SearchStrategy[MeshTopology]:
    """Valid layouts of ``min_world_size`` to ``max_world_size`` ranks (or one of ``world_sizes``).

    A dimension given in ``fixed`` (``pp=2``, ``tp=4``, ``ep=8``, ``etp=...``,
    ``order=...``) keeps that value; the others are drawn, expert parallelism
    included. ``orders=True`` also draws the dense order. ``ranks_per_node``
    keeps to worlds of whole nodes of that many ranks.

    :raises ValueError: an unknown fixed name, or bounds no layout can meet.
    """
    unknown = sorted(set(fixed) - set(_FIXABLE))
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown dimension; expected one of {_FIXABLE}")
    for name, value in fixed.items():
        if name != "order":
            check_positive(name, value)
    low = check_positive("min_world_size", min_world_size)
    high = check_positive("max_world_size", max_world_size)
    if low > high:
        raise ValueError(f"min_world_size: expected at most max_world_size {high}, got {low}")
    per_node = None if ranks_per_node is None else check_positive("ranks_per_node", ranks_per_node)
    allowed = (
        None
        if world_sizes is None
        else sorted({check_positive("world_sizes", w) for w in world_sizes})
    )

    def acceptable(plan: MeshTopology) -> bool:
        world = plan.world_size
        in_range = world in allowed if allowed is not None else low <= world <= high
        return in_range and (per_node is None or world % per_node == 0 or world < per_node)

    return _layout(fixed, high if allowed is None else max(allowed), orders, allowed).filter(
        acceptable
    )


@st.composite
def _layout(
    draw: st.DrawFn,
    fixed: dict[str, Any],
    limit: int,
    orders: bool,
    allowed: list[int] | None,
) -> MeshTopology:
    sizes: dict[str, int] = {}
    if allowed is not None:
        world = draw(st.sampled_from(allowed))
        remaining = world
        for name in DENSE_DIMS[:-1]:
            if name in fixed:
                sizes[name] = fixed[name]
            else:
                choices = [d for d in range(1, min(remaining, SIZE_CAP) + 1) if remaining % d == 0]
                sizes[name] = draw(st.sampled_from(choices))
            remaining = max(1, remaining // sizes[name])
        sizes["tp"] = fixed.get("tp", remaining)
    else:
        for name in DENSE_DIMS:
            room = max(1, limit // math.prod(sizes.values() or [1]))
            sizes[name] = fixed.get(name) or draw(st.integers(1, max(1, min(room, SIZE_CAP))))
    ep, etp = _expert(draw, sizes, fixed)
    order = fixed.get("order") or (_order(draw, ep, etp) if orders else None)
    world = math.prod(sizes.values())
    if world > limit:
        reject()
    try:
        return MeshTopology(world, **sizes, ep=ep, etp=etp, order=order)
    except ValueError:
        reject()


def _expert(draw: st.DrawFn, sizes: dict[str, int], fixed: dict[str, Any]) -> tuple[int, int]:
    """Expert sizes that fit the dense sizes; a fixed ep grows dp_shard until it fits."""
    tp = sizes["tp"]
    etp = fixed.get("etp") or draw(st.sampled_from([1, tp] if tp > 1 else [1]))
    if "ep" in fixed:
        ep = int(fixed["ep"])
        borrowed = sizes["dp_shard"] * sizes["cp"] * (tp if etp == 1 else 1)
        if borrowed % ep and "dp_shard" not in fixed:
            sizes["dp_shard"] *= ep // math.gcd(ep, borrowed)
        return ep, etp if ep > 1 else 1
    borrowed = sizes["dp_shard"] * sizes["cp"] * (tp if etp == 1 else 1)
    factors = [f for f in range(1, min(borrowed, SIZE_CAP) + 1) if borrowed % f == 0]
    ep = draw(st.sampled_from(factors))
    return ep, etp if ep > 1 else 1


def _order(draw: st.DrawFn, ep: int, etp: int) -> tuple[str, ...]:
    """A dense order that the expert view accepts when there is one."""
    if ep == 1:
        return tuple(draw(st.permutations(DENSE_DIMS)))
    outer = tuple(draw(st.permutations(SHARED_DIMS)))
    inner = ("dp_shard", "cp") if etp > 1 else ("dp_shard", "cp", "tp")
    middle = tuple(draw(st.permutations(inner)))
    return (*outer, *middle, *(("tp",) if etp > 1 else ()))


@st.composite
def _with_rank(draw: st.DrawFn, plans: st.SearchStrategy[MeshTopology]) -> tuple[MeshTopology, int]:
    plan = draw(plans)
    rank = draw(st.integers(0, plan.world_size - 1))
    names = [name for name in (*DENSE_DIMS, "ep", "efsdp", "etp") if plan.size_of(name) > 1]
    at_an_edge: bool = draw(st.booleans())
    if names and at_an_edge:
        group = plan.group_of(rank, draw(st.sampled_from(names)))
        first: bool = draw(st.booleans())
        rank = group[0] if first else group[-1]
    return plan, rank


def layouts_and_ranks(**kwargs: Any) -> st.SearchStrategy[tuple[MeshTopology, int]]:
    """(plan, rank) pairs from :func:`layouts` (same arguments); half of the ranks are
    the first or last rank of one of their groups, where off-by-one bugs live."""
    return _with_rank(layouts(**kwargs))
