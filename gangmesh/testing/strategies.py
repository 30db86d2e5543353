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

import keyword
import math
from collections.abc import Sequence
from typing import Any

from gangmesh.plan._checks import check_positive
from gangmesh.plan.dims import DENSE_DIMS, EXPERT_DIMS, SHARED_DIMS, SIZE_NAMES, Dim
from gangmesh.plan.expert import borrowed_dims, order_rule_broken
from gangmesh.plan.layout import Layout, parse_order
from gangmesh.plan.multipart import MultiPartPlan
from gangmesh.plan.parts import RESERVED_NAMES, PartsPlan
from gangmesh.plan.topology import MeshTopology

try:
    from hypothesis import reject
    from hypothesis import strategies as st
except ImportError as ex:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "gangmesh.testing.strategies needs hypothesis: pip install 'gangmesh[testing]'"
    ) from ex

__all__ = ["layouts", "layouts_and_ranks", "part_names", "parts_plans"]

SIZE_CAP = 64
"""Largest size drawn for one dimension (fixed sizes may be larger)."""

_ORDER = "order"
_EP_ABOVE_ONE = 2
"""An expert parallel size above 1, to ask whether an order admits expert parallelism."""
"""The keyword that fixes the dense order."""

_FIXABLE = (*SIZE_NAMES, _ORDER)


def layouts(
    *,
    min_world_size: int = 1,
    max_world_size: int = 65536,
    world_sizes: Sequence[int] | None = None,
    ranks_per_node: int | None = None,
    orders: bool = False,
    experts: bool = False,
    **fixed: Any,
) -> st.SearchStrategy[MeshTopology]:
    """Valid layouts of ``min_world_size`` to ``max_world_size`` ranks (or one of ``world_sizes``).

    A dimension given in ``fixed`` (``pp=2``, ``tp=4``, ``ep=8``, ``etp=...``,
    ``order=...``) keeps that value; the others are drawn, expert parallelism
    included. ``etp > 1`` also holds ``tp`` at that size (the expert view's rule).
    ``orders=True`` also draws the dense order; ``experts=True`` also draws layouts
    that ask for the expert view at ep = etp = 1 (``expert=True``). ``ranks_per_node``
    keeps to worlds of whole nodes of that many ranks (or smaller than one node).

    :param min_world_size: the smallest world to draw.
    :param max_world_size: the largest world to draw.
    :param world_sizes: the only worlds to draw, instead of a range.
    :param ranks_per_node: node size that every world fills whole.
    :param orders: whether to draw the dense order too.
    :param experts: whether to draw ``expert=True`` at ep = etp = 1 too.
    :param fixed: sizes (and ``order``) that every layout has.
    :raises ValueError: an unknown fixed name, or bounds no layout can meet.
    """
    unknown = sorted(set(fixed) - set(_FIXABLE))
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown dimension; expected one of {_FIXABLE}")
    sizes = {Dim(name): check_positive(name, v) for name, v in fixed.items() if name != _ORDER}
    order = parse_order(fixed[_ORDER]) if fixed.get(_ORDER) else None
    _check_expert_rules(sizes, order)
    if sizes.get(Dim.ETP, 1) > 1:
        sizes.setdefault(Dim.TP, sizes[Dim.ETP])
    low = check_positive("min_world_size", min_world_size)
    high = check_positive("max_world_size", max_world_size)
    if low > high:
        raise ValueError(f"min_world_size: expected at most max_world_size {high}, got {low}")
    per_node = None if ranks_per_node is None else check_positive("ranks_per_node", ranks_per_node)
    fixed_product = math.prod(sizes.get(name, 1) for name in DENSE_DIMS)
    allowed = None
    if world_sizes is None:
        if fixed_product > high:
            raise ValueError(
                f"max_world_size: the fixed sizes need {fixed_product} ranks, more than {high}"
            )
    else:
        every = sorted({check_positive("world_sizes", w) for w in world_sizes})
        free = any(name not in sizes for name in DENSE_DIMS)
        allowed = [w for w in every if w % fixed_product == 0 and (free or w == fixed_product)]
        if not allowed:
            raise ValueError(
                f"world_sizes: none of {every} fits the fixed sizes ({fixed_product} ranks)"
            )

    def acceptable(plan: MeshTopology) -> bool:
        world = plan.world_size
        in_range = world in allowed if allowed is not None else low <= world <= high
        return in_range and (per_node is None or world % per_node == 0 or world < per_node)

    plans = _layout(sizes, order, low, high, orders, allowed, experts)
    return plans.filter(acceptable)


def _check_expert_rules(sizes: dict[Dim, int], order: tuple[Dim, ...] | None) -> None:
    """ValueError for fixed expert sizes that no layout can meet."""
    ep, etp = sizes.get(Dim.EP, 1), sizes.get(Dim.ETP, 1)
    if etp > 1 and sizes.get(Dim.TP, etp) != etp:
        raise ValueError(f"etp: expected 1 or tp={sizes[Dim.TP]}, got {etp}")
    broken = None if order is None else order_rule_broken(order, ep, etp)
    if broken is not None:
        raise ValueError(f"order: {broken}; got {','.join(order or ())}")


def _divisors(number: int, cap: int) -> list[int]:
    return [d for d in range(1, min(number, cap) + 1) if number % d == 0]


@st.composite
def _layout(
    draw: st.DrawFn,
    fixed: dict[Dim, int],
    order: tuple[Dim, ...] | None,
    low: int,
    high: int,
    orders: bool,
    allowed: list[int] | None,
    experts: bool,
) -> MeshTopology:
    dense_fixed = {name: fixed[name] for name in DENSE_DIMS if name in fixed}
    free = [name for name in DENSE_DIMS if name not in dense_fixed]
    sizes = dict(dense_fixed)
    if allowed is not None:
        remaining = draw(st.sampled_from(allowed)) // math.prod(dense_fixed.values())
        for name in free[:-1]:
            sizes[name] = draw(st.sampled_from(_divisors(remaining, SIZE_CAP)))
            remaining //= sizes[name]
        if free:
            sizes[free[-1]] = remaining
    else:
        # A random order of drawing, so that no dimension always gets the room left last.
        for i, name in enumerate(draw(st.permutations(free))):
            placed = math.prod(sizes.values())
            room = max(1, min(high // placed, SIZE_CAP))
            least = -(-low // placed) if i == len(free) - 1 else 1
            if least > room:
                reject()
            sizes[name] = draw(st.integers(least, room))
    ep, etp = _expert(draw, sizes, fixed, order)
    if order is None and orders:
        order = _order(draw, ep, etp)
    world = math.prod(sizes.values())
    if world > high:
        reject()
    expert = experts and ep == etp == 1 and draw(st.booleans())
    try:
        layout = Layout(**{name.value: size for name, size in sizes.items()}, ep=ep, etp=etp,
                        order=order, expert=expert)  # fmt: skip
        return MeshTopology.from_layout(world, layout)
    except ValueError:
        reject()


def _expert(
    draw: st.DrawFn, sizes: dict[Dim, int], fixed: dict[Dim, int], order: tuple[Dim, ...] | None
) -> tuple[int, int]:
    """Expert sizes that fit the dense sizes and the order; a fixed ep grows dp_shard to fit.

    etp is 1 or tp whatever ep is; ep > 1 needs an order that keeps the expert view
    row-major (pp and dp_replicate outermost, and tp innermost when etp = tp).
    """
    tp = sizes[Dim.TP]
    etp = fixed[Dim.ETP] if Dim.ETP in fixed else draw(st.sampled_from(sorted({1, tp})))
    borrowed = math.prod(sizes[name] for name in borrowed_dims(etp))
    if Dim.EP in fixed:
        ep = fixed[Dim.EP]
        if borrowed % ep and Dim.DP_SHARD not in fixed:
            sizes[Dim.DP_SHARD] *= ep // math.gcd(ep, borrowed)
        return ep, etp
    if order is not None and order_rule_broken(order, _EP_ABOVE_ONE, etp) is not None:
        return 1, etp
    return draw(st.sampled_from(_divisors(borrowed, SIZE_CAP))), etp


def _order(draw: st.DrawFn, ep: int, etp: int) -> tuple[Dim, ...]:
    """A dense order that the expert view accepts when there is one: at ep > 1, the shared
    dimensions outermost, then the borrowed ones, then tp where experts keep it."""
    if ep == 1:
        return tuple(draw(st.permutations(DENSE_DIMS)))
    outer = tuple(draw(st.permutations(SHARED_DIMS)))
    inner = borrowed_dims(etp)
    middle = tuple(draw(st.permutations(inner)))
    kept = tuple(name for name in DENSE_DIMS if name not in (*SHARED_DIMS, *inner))
    return (*outer, *middle, *kept)


@st.composite
def _with_rank(draw: st.DrawFn, plans: st.SearchStrategy[MeshTopology]) -> tuple[MeshTopology, int]:
    plan = draw(plans)
    rank = draw(st.integers(0, plan.world_size - 1))
    names = [name for name in (*DENSE_DIMS, *EXPERT_DIMS) if plan.size_of(name) > 1]
    at_an_edge: bool = draw(st.booleans())
    if names and at_an_edge:
        group = plan.group_of(rank, draw(st.sampled_from(names)))
        first: bool = draw(st.booleans())
        rank = group[0] if first else group[-1]
    return plan, rank


def layouts_and_ranks(**kwargs: Any) -> st.SearchStrategy[tuple[MeshTopology, int]]:
    """(plan, rank) pairs from :func:`layouts` (same arguments); half of the ranks are
    the first or last rank of one of their groups, where off-by-one bugs live.

    :param kwargs: the keyword arguments of :func:`layouts`.
    :raises ValueError: arguments no layout can meet.
    """
    return _with_rank(layouts(**kwargs))


_WORLD_KEYWORDS = ("min_world_size", "max_world_size", "world_sizes")
"""The arguments of :func:`layouts` that :func:`parts_plans` sets itself, part by part."""


def part_names() -> st.SearchStrategy[str]:
    """Names a part may take: short lowercase identifiers that name no dimension, gang or
    Python keyword."""
    names = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
    return names.filter(lambda name: name not in RESERVED_NAMES and not keyword.iskeyword(name))


def parts_plans(
    *, max_world_size: int = 256, max_parts: int = 4, **kwargs: Any
) -> st.SearchStrategy[MultiPartPlan]:
    """Jobs of 1 to ``max_parts`` parts in at most ``max_world_size`` ranks, each part with
    a layout drawn by :func:`layouts` that fits its size: a
    :class:`~gangmesh.plan.multipart.MultiPartPlan`, whose ``parts`` is the
    :class:`~gangmesh.plan.parts.PartsPlan`.

    >>> from hypothesis import given
    >>> @given(parts_plans(max_world_size=64, tp=2))
    ... def test_each_part_pairs_its_tp_ranks(plan):
    ...     assert len(plan.pair_by_coordinate("tp")) == 2
    >>> test_each_part_pairs_its_tp_ranks()

    :param max_world_size: the largest world to draw (all parts together).
    :param max_parts: the most parts to draw.
    :param kwargs: the other keyword arguments of :func:`layouts`, for every part (e.g.
        ``tp=2`` gives every part tp = 2, ``orders=True`` draws each part's order).
    :raises ValueError: a world keyword of :func:`layouts` in ``kwargs``, or bounds no
        part can meet.
    """
    given = [name for name in _WORLD_KEYWORDS if name in kwargs]
    if given:
        raise ValueError(f"{given[0]}: set by parts_plans per part; use max_world_size")
    high = check_positive("max_world_size", max_world_size)
    most = check_positive("max_parts", max_parts)
    least = math.prod(kwargs.get(name.value, 1) for name in DENSE_DIMS)
    layouts(max_world_size=high, **kwargs)  # arguments no layout can meet raise here
    return _parts(high, min(most, max(1, high // least)), least, kwargs)


@st.composite
def _parts(
    draw: st.DrawFn, high: int, most: int, least: int, kwargs: dict[str, Any]
) -> MultiPartPlan:
    count = draw(st.integers(1, most))
    names = draw(st.lists(part_names(), min_size=count, max_size=count, unique=True))
    plans: list[MeshTopology] = []
    room = high
    for left in range(count - 1, -1, -1):
        plan = draw(layouts(max_world_size=room - least * left, **kwargs))
        plans.append(plan)
        room -= plan.world_size
    sizes = [(name, plan.world_size) for name, plan in zip(names, plans, strict=True)]
    parts = PartsPlan(sum(size for _, size in sizes), sizes)
    chosen = {name: plan.layout for name, plan in zip(names, plans, strict=True)}
    return MultiPartPlan(parts, chosen)
