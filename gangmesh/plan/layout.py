"""The layout a job asks for: a size per dimension and the dense order, checked once.

A :class:`Layout` is what ``MeshTopology``, ``create_gangs``, the command line and the
test strategies are given; a plan resolves it against a world size. This module imports
nothing of torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from typing_extensions import TypedDict, Unpack, final, override

from gangmesh.plan._checks import InvalidTypeError, check_flag, check_positive, is_int
from gangmesh.plan.dim_keywords import closest, with_keywords
from gangmesh.plan.dims import DENSE_DIMS, FACTS, MEGATRON_NAMES, SIZE_NAMES, Dim

OrderArg = Sequence[str] | str | None
"""An order as given: dense names outermost first (a sequence or a comma-separated
string), a Megatron-Core order string (innermost first, dashes), or None (the default)."""

_MEGATRON_EP = Dim.EP.value
"""The name Megatron-Core's order strings give expert parallelism, beside dp."""


class LayoutKeywords(TypedDict, total=False):
    """The keywords that ask for a layout, declared once: those of :class:`Layout`,
    :class:`~gangmesh.MeshTopology` and :func:`~gangmesh.create_gangs`. A size is one of
    :data:`~gangmesh.plan.dims.SIZE_NAMES`, its default the registry's."""

    pp: int
    dp_replicate: int
    dp_shard: int
    cp: int
    tp: int
    ep: int
    etp: int
    order: OrderArg
    expert: bool


LAYOUT_DEFAULTS: dict[str, object] = {
    **{dim.value: FACTS[dim].default for dim in SIZE_NAMES},
    "order": None,
    "expert": False,
}
"""Keyword of ``LayoutKeywords`` -> its default."""


@final
@dataclass(frozen=True, init=False)
class Layout:
    """The sizes and dense order a job asks for, checked; exactly one dense size may be -1.

    >>> Layout(tp=2, order="tp-cp-ep-dp-pp")
    Layout(pp=1, dp_replicate=1, dp_shard=-1, cp=1, tp=2, ep=1, etp=1)
    >>> Layout(tp=2).resolve(8)
    {'pp': 1, 'dp_replicate': 1, 'dp_shard': 4, 'cp': 1, 'tp': 2}

    Each size is an attribute of the same name; see :class:`~gangmesh.MeshTopology`.

    :param order: the dense dimensions, outermost first, as a sequence or a
        comma-separated string; or Megatron-Core's spelling, innermost first with
        dashes (``"tp-cp-ep-dp-pp"``, as :meth:`megatron_order` writes it).
    :param expert: build the expert view's gangs even at ep = 1 and etp = 1 (a mixture
        of experts without expert parallelism); ep or etp above 1 builds them anyway.
    :raises TypeError: ``expert`` is not a bool.
    :raises ValueError: a size that is not a positive int (or -1 for a dense one), more
        than one -1, or an order that is not a permutation of the dense names.
    """

    pp: int
    """Pipeline stages."""
    dp_replicate: int
    """Replicas of HSDP (replicated data parallel)."""
    dp_shard: int
    """Shards of FSDP (sharded data parallel); -1: inferred."""
    cp: int
    """Context parallel size."""
    tp: int
    """Tensor parallel size."""
    ep: int
    """Expert parallel size."""
    etp: int
    """Tensor parallel size of the experts: 1 or tp."""
    order: tuple[Dim, ...]
    """The dense dimensions, outermost first."""
    expert: bool
    """Whether the job asked for the expert view's gangs at ep = 1 and etp = 1 too (False
    where ep or etp is above 1: those build them anyway)."""

    @with_keywords(LayoutKeywords, LAYOUT_DEFAULTS)
    def __init__(self, **keywords: Unpack[LayoutKeywords]) -> None:
        asked_for: dict[str, object] = {**LAYOUT_DEFAULTS, **keywords}
        given = {name: asked_for[name.value] for name in SIZE_NAMES}
        object.__setattr__(self, "order", parse_order(keywords.get("order")))
        asked = check_flag("expert", keywords.get("expert", False))
        dense = _check_dense({name: given[name] for name in DENSE_DIMS})
        for name in SIZE_NAMES:
            value = dense[name] if name in dense else check_positive(name, given[name])
            object.__setattr__(self, name.value, value)
        object.__setattr__(self, "expert", asked and self.ep == 1 and self.etp == 1)

    @override
    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={size}" for name, size in self.sizes().items())
        order = "" if self.order == DENSE_DIMS else f", order={','.join(self.order)!r}"
        expert = ", expert=True" if self.expert else ""
        return f"Layout({sizes}{order}{expert})"

    @property
    def uses_experts(self) -> bool:
        """Whether the job's gangs include the expert view: ep or etp above 1, or ``expert``."""
        return self.expert or self.ep > 1 or self.etp > 1

    def sizes(self) -> dict[Dim, int]:
        """Every size asked for, -1 included: the five dense ones, then ep and etp."""
        return {name: getattr(self, name.value) for name in SIZE_NAMES}

    def size(self, name: str) -> int:
        """The size asked for dimension ``name``.

        :param name: one of the sizes a layout asks for (:data:`gangmesh.plan.dims.SIZE_NAMES`).
        """
        return int(getattr(self, Dim(name).value))

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments that ask for this layout (``create_gangs(root, **...)``);
        ``order`` is None where it is the default."""
        order = None if self.order == DENSE_DIMS else ",".join(self.order)
        sizes = {name.value: size for name, size in self.sizes().items()}
        return {**sizes, "order": order, "expert": self.expert}

    def resolve(self, world_size: int) -> dict[Dim, int]:
        """The dense sizes in the default order, the -1 inferred from ``world_size``.

        :param world_size: number of processes in the job.
        :raises ValueError: sizes whose product is not ``world_size`` (naming the
            dimensions, sizes and world size).
        """
        checked = {name: self.size(name) for name in DENSE_DIMS}
        inferred = [name for name, size in checked.items() if size == -1]
        known = math.prod(size for size in checked.values() if size != -1)
        named = {name: size for name, size in checked.items() if size > 1}
        subject = ", ".join(named) or "sizes"
        if inferred:
            if world_size % known:
                raise ValueError(
                    f"{subject}: {_product_text(named)} does not divide world_size "
                    f"{world_size}, so {inferred[0]} cannot infer its size{_default(inferred)}"
                )
            checked[inferred[0]] = world_size // known
        elif known != world_size:
            raise ValueError(
                f"{subject}: {_product_text(named) or 'every size is 1'}, but world_size "
                f"is {world_size}"
            )
        return checked

    def megatron_order(self) -> str:
        """The order as Megatron-Core writes it: innermost first, dashes, ep beside dp.

        >>> Layout(order="pp,dp_replicate,dp_shard,tp,cp").megatron_order()
        'cp-tp-ep-dp-pp'

        :raises ValueError: an order Megatron-Core cannot write: its one dp stands for
            dp_replicate directly outside dp_shard.
        """
        names: list[str] = []
        for dim in reversed(self.order):
            name = MEGATRON_NAMES[dim]
            if name in names:
                continue
            names.extend([_MEGATRON_EP, name] if name == MEGATRON_NAMES[Dim.DP_SHARD] else [name])
        spelled = "-".join(names)
        read_back = parse_order(spelled)
        if read_back != self.order:
            raise ValueError(
                f"order: {','.join(self.order)} has no Megatron-Core spelling: its one "
                f"{MEGATRON_NAMES[Dim.DP_SHARD]} stands for {Dim.DP_REPLICATE} directly outside "
                f"{Dim.DP_SHARD} ({spelled} reads back as {','.join(read_back)})"
            )
        return spelled


def parse_order(order: OrderArg) -> tuple[Dim, ...]:
    """The dense order, outermost first, of an order as given.

    :param order: dense names outermost first (a sequence or a comma-separated string),
        Megatron-Core's spelling (innermost first, dashes), or None for the default.
    :raises ValueError: not a permutation of the dense names (or of Megatron-Core's).
    """
    if order is None:
        return DENSE_DIMS
    if not isinstance(order, (str, Sequence)):  # a set has no order; a number is no name
        raise InvalidTypeError(
            f"order: expected the names {', '.join(DENSE_DIMS)} in a sequence or a "
            f"comma-separated string, outermost first, got {order!r}"
        )
    if isinstance(order, str) and "-" in order and "," not in order:
        return _parse_megatron(order)
    names = tuple(order.split(",")) if isinstance(order, str) else tuple(order)
    names = tuple(name.strip() if isinstance(name, str) else name for name in names)
    if sorted(map(str, names)) != sorted(DENSE_DIMS) or len(set(names)) != len(names):
        raise ValueError(
            f"order: expected each of {', '.join(DENSE_DIMS)} once, outermost first, got "
            f"{order!r}{_order_hint(names)}"
        )
    return tuple(Dim(name) for name in names)


def _order_hint(names: tuple[object, ...]) -> str:
    """ "; did you mean dp_shard for dp_shrad?" for each misspelt name of an order."""
    valid = [str(dim) for dim in DENSE_DIMS]
    guesses = [
        f"{guess} for {name}"
        for name in names
        if isinstance(name, str) and name not in valid
        and (guess := closest(name, valid)) is not None and guess not in names
    ]  # fmt: skip
    return f"; did you mean {', '.join(guesses)}?" if guesses else ""


def _parse_megatron(order: str) -> tuple[Dim, ...]:
    """The dense order of a Megatron-Core order string such as ``"tp-cp-ep-dp-pp"``."""
    parts = [part.strip() for part in order.split("-")]
    spelled = sorted(set(MEGATRON_NAMES.values()))
    expected = sorted([*spelled, _MEGATRON_EP] if _MEGATRON_EP in parts else spelled)
    data = MEGATRON_NAMES[Dim.DP_SHARD]
    beside = _MEGATRON_EP not in parts or abs(parts.index(_MEGATRON_EP) - parts.index(data)) == 1
    if sorted(parts) != expected or not beside:
        raise ValueError(
            f"order: expected Megatron-Core's spelling, innermost first, with each of "
            f"{', '.join(spelled)} once (and {_MEGATRON_EP} beside {data} if at all), "
            f"such as tp-cp-ep-dp-pp; got {order!r}"
        )
    outermost = [part for part in reversed(parts) if part != _MEGATRON_EP]
    return tuple(dim for part in outermost for dim in DENSE_DIMS if MEGATRON_NAMES[dim] == part)


def _check_dense(sizes: dict[Dim, object]) -> dict[Dim, int]:
    """The dense sizes as ints, each positive or -1, at most one -1."""
    for name, size in sizes.items():
        if not is_int(size):
            raise InvalidTypeError(f"{name}: expected a positive int or -1, got {size!r}")
        if size == 0 or int(size) < -1:  # type: ignore[call-overload]
            raise ValueError(f"{name}: expected a positive int or -1, got {size}")
    checked = {name: int(size) for name, size in sizes.items()}  # type: ignore[call-overload]
    inferred = [name for name, size in checked.items() if size == -1]
    if len(inferred) > 1:
        raise ValueError(
            f"{', '.join(inferred[:-1])} and {inferred[-1]}: at most one size may be -1 "
            f"(inferred), got "
            f"{_product_text(checked)}{_default(inferred)}"
        )
    return checked


def _default(inferred: list[Dim]) -> str:
    """The note that a size is -1 unless told otherwise, where one of ``inferred`` is."""
    dims = [dim for dim in inferred if FACTS[dim].default == -1]
    return f" ({dims[0]} is -1 by default)" if dims else ""


def _product_text(sizes: dict[Dim, int]) -> str:
    """``"tp=2"``, or ``"dp_shard=3 * tp=2 = 6"``."""
    text = " * ".join(f"{name}={size}" for name, size in sizes.items())
    return (
        f"{text} = {math.prod(sizes.values())}"
        if len(sizes) > 1 and -1 not in sizes.values()
        else text
    )
