"""Plan a parallel layout without processes: which ranks form which gang.

The dense view has the dimensions pp, dp_replicate, dp_shard, cp and tp, outermost
(slowest-varying) first by default; ``order`` permutes them. A rank is the row-major
index of its coordinate, so inner dimensions hold adjacent ranks and stay on one node
first. The same ranks also form an expert view: pp and dp_replicate as in the dense
view, then efsdp, ep and etp. At ``ep = 1`` its groups are still real: efsdp holds the
ranks that shard one expert's weights, edp those that hold the same expert shard.

This module uses numpy only; nothing here imports torch or starts a process.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gangmesh._checks import check_int, check_positive, is_int

if TYPE_CHECKING:
    from gangmesh.locality import LocalityFinding

DENSE_DIMS: tuple[str, ...] = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
"""Dense dimension names in the default order, outermost first."""

DIM_NAMES = DENSE_DIMS
"""The dense dimension names (the name older code uses)."""

SHARED_DIMS: tuple[str, ...] = ("pp", "dp_replicate")
"""Dimensions the expert view shares with the dense view, ranks and all."""

EXPERT_DIMS: tuple[str, ...] = ("efsdp", "ep", "etp")
"""Expert dimension names, outermost first; the expert view puts SHARED_DIMS outside them."""

FLATTENED: dict[str, tuple[str, ...]] = {
    "dp": ("dp_replicate", "dp_shard"),
    "dp_shard_cp": ("dp_shard", "cp"),
    "dp_cp": ("dp_replicate", "dp_shard", "cp"),
    "edp": ("dp_replicate", "efsdp"),
}
"""Flattened dimensions: a name for several dimensions taken together, in mesh order."""

ALIASES: dict[str, tuple[str, ...]] = {
    **FLATTENED,
    "rdp": ("dp_replicate",),
    "sdp": ("dp_shard",),
}
"""Every name that stands for other dimensions: flattened ones and fairseq2's short names."""

GANG_NAMES: tuple[str, ...] = ("dp", "rdp", "sdp", "tp", "pp", "cp", "ep", "efsdp", "etp", "edp")
"""The parallel gangs of a job (the fields of Gangs besides root), each a dimension or alias."""

MEGATRON_NAMES: dict[str, str] = {"pp": "pp", "dp_replicate": "dp", "dp_shard": "dp", "cp": "cp"}
"""How Megatron-Core names each dense dimension in its order strings (tp keeps its name)."""


@dataclass(frozen=True)
class View:
    """One way of laying the world out: dimension names and sizes, outermost first.

    A view is row-major over its *positions*. The dense view's positions are the global
    ranks. Another view may list the dense dimensions in another order: then ``source``
    holds the dense sizes (whose row-major index is the rank) and ``axes`` the dense
    dimensions in the order the view takes them, before it regroups them into ``sizes``.
    """

    names: tuple[str, ...]
    """Dimension names, outermost first."""
    sizes: tuple[int, ...]
    """Size of each dimension, in the same order."""
    source: tuple[int, ...] = ()
    """The dense sizes, when the view reorders the dense dimensions; else empty."""
    axes: tuple[int, ...] = ()
    """The dense dimensions (indices into ``source``) in the order the view takes them."""

    @property
    def strides(self) -> tuple[int, ...]:
        """Position distance between neighbours along each dimension."""
        return tuple(math.prod(self.sizes[i + 1 :]) for i in range(len(self.sizes)))

    def size(self, name: str) -> int:
        """Size of dimension ``name``.

        :param name: one of :attr:`names`.
        """
        return self.sizes[self.names.index(name)]

    def stride(self, name: str) -> int:
        """Position distance between neighbours along dimension ``name``.

        :param name: one of :attr:`names`.
        """
        return self.strides[self.names.index(name)]

    def positions(self, ranks: np.ndarray) -> np.ndarray:
        """The position in this view of each global rank.

        :param ranks: global ranks (an int64 array or scalar).
        """
        if not self.axes:
            return ranks
        dense = np.unravel_index(ranks, self.source)
        return np.ravel_multi_index(
            [dense[axis] for axis in self.axes], [self.source[axis] for axis in self.axes]
        )

    def ranks(self, positions: np.ndarray) -> np.ndarray:
        """The global rank at each position of this view.

        :param positions: positions in this view (an int64 array or scalar).
        """
        if not self.axes:
            return positions
        taken = np.unravel_index(positions, [self.source[axis] for axis in self.axes])
        dense = [taken[self.axes.index(axis)] for axis in range(len(self.source))]
        return np.ravel_multi_index(dense, self.source)

    def coordinates(self, ranks: np.ndarray) -> dict[str, np.ndarray]:
        """Each rank's coordinate along every dimension of this view.

        :param ranks: global ranks (an int64 array).
        """
        along = np.unravel_index(self.positions(ranks), self.sizes)
        return dict(zip(self.names, along, strict=True))

    def grid(self) -> np.ndarray:
        """The global ranks laid out in this view's shape (the DeviceMesh tensor)."""
        ranks = np.arange(math.prod(self.sizes), dtype=np.int64)
        return self.ranks(ranks).reshape(self.sizes)


class MeshTopology:
    """The rank layout of a job with named parallel dimensions.

    Exactly one dense size may be -1; it is inferred from ``world_size``. ``order``
    is a permutation of the dense names, outermost first (a sequence, or a string
    such as ``"tp,pp,dp_replicate,dp_shard,cp"``).

    >>> plan = MeshTopology(8, tp=2)
    >>> plan.dims
    {'pp': 1, 'dp_replicate': 1, 'dp_shard': 4, 'cp': 1, 'tp': 2}
    >>> plan.groups("tp").tolist()
    [[0, 1], [2, 3], [4, 5], [6, 7]]
    >>> plan.group_of(5, "dp")
    [1, 3, 5, 7]
    >>> moe = MeshTopology(8, dp_shard=4, tp=2, ep=4)
    >>> moe.expert_dims
    {'pp': 1, 'dp_replicate': 1, 'efsdp': 2, 'ep': 4, 'etp': 1}
    >>> moe.groups("ep").tolist()
    [[0, 1, 2, 3], [4, 5, 6, 7]]

    :param world_size: number of processes in the job.
    :param pp: pipeline parallel size (stages).
    :param dp_replicate: replicated data parallel size (the replicas of HSDP).
    :param dp_shard: sharded data parallel size (FSDP); -1 infers it.
    :param cp: context parallel size.
    :param tp: tensor parallel size.
    :param ep: expert parallel size.
    :param etp: tensor parallel size of the experts: 1 or ``tp``.
    :param order: the dense dimensions, outermost first.
    :raises ValueError: sizes that are not positive or whose product is not
        ``world_size`` (naming the dimensions, sizes and world size), or ``ep``,
        ``etp`` or ``order`` breaking a rule (naming it).
    """

    def __init__(
        self,
        world_size: int,
        *,
        pp: int = 1,
        dp_replicate: int = 1,
        dp_shard: int = -1,
        cp: int = 1,
        tp: int = 1,
        ep: int = 1,
        etp: int = 1,
        order: Sequence[str] | str | None = None,
    ) -> None:
        self._world_size = check_positive("world_size", world_size)
        self._order = _check_order(order)
        given = {"pp": pp, "dp_replicate": dp_replicate, "dp_shard": dp_shard, "cp": cp, "tp": tp}
        sizes = _resolve_sizes(self._world_size, given)
        self._dense = View(self._order, tuple(sizes[name] for name in self._order))
        self._expert = _expert_view(
            self._dense, check_positive("ep", ep), check_positive("etp", etp)
        )

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={size}" for name, size in self.sizes().items())
        order = "" if self._order == DENSE_DIMS else f", order={','.join(self._order)!r}"
        return f"MeshTopology({self._world_size}, {sizes}{order})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MeshTopology):
            return NotImplemented
        return (self._world_size, self._dense, self._expert) == (
            other._world_size,
            other._dense,
            other._expert,
        )

    def __hash__(self) -> int:
        return hash((self._world_size, self._dense, self._expert))

    @property
    def world_size(self) -> int:
        """Number of processes in the job."""
        return self._world_size

    @property
    def order(self) -> tuple[str, ...]:
        """The dense dimension names, outermost first."""
        return self._order

    @property
    def dims(self) -> dict[str, int]:
        """Dense dimension name -> size, outermost first."""
        return dict(zip(self._dense.names, self._dense.sizes, strict=True))

    @property
    def shape(self) -> tuple[int, ...]:
        """Dense sizes in mesh order, the shape of the dense DeviceMesh."""
        return self._dense.sizes

    @property
    def expert_dims(self) -> dict[str, int]:
        """Expert view name -> size, outermost first."""
        return dict(zip(self._expert.names, self._expert.sizes, strict=True))

    @property
    def expert_shape(self) -> tuple[int, ...]:
        """Sizes of the expert view, the shape of the expert DeviceMesh."""
        return self._expert.sizes

    def sizes(self) -> dict[str, int]:
        """Every size the layout was built from: the five dense ones, then ep and etp."""
        dense = {name: self._dense.size(name) for name in DENSE_DIMS}
        return {**dense, "ep": self.size_of("ep"), "etp": self.size_of("etp")}

    def megatron_order(self) -> str:
        """The order as Megatron-Core writes it: innermost first, dashes, ep beside dp.

        >>> MeshTopology(8, tp=2).megatron_order()
        'tp-cp-ep-dp-pp'
        """
        names: list[str] = []
        for dim in reversed(self._order):
            name = MEGATRON_NAMES.get(dim, dim)
            if name == "dp" and "dp" in names:
                continue
            names.extend(["ep", "dp"] if name == "dp" else [name])
        return "-".join(names)

    def resolve(self, dim: str | tuple[str, ...]) -> tuple[str, ...]:
        """The dimensions behind a name, alias or tuple of names, outermost first.

        :param dim: a dimension name or alias, or a tuple of dimension names.
        :raises ValueError: unknown names, repeats, names out of mesh order or names
            of the dense and the expert view together.
        """
        return self._view_of(dim)[1]

    def size_of(self, dim: str | tuple[str, ...]) -> int:
        """Size of a dimension, or of several flattened together.

        :param dim: a dimension name or alias, or a tuple of dimension names.
        """
        view, names = self._view_of(dim)
        return math.prod(view.size(name) for name in names)

    def groups(self, dim: str | tuple[str, ...]) -> np.ndarray:
        """Every group along ``dim``: an int64 array ``[n_groups, group_size]``.

        Row i is the i-th group in row-major order of the other dimensions;
        within a row, ranks follow the coordinate along ``dim`` (ascending, as in
        every process group; a view that reorders the dense dimensions lists the
        members of several dimensions ascending too).

        :param dim: a dimension name or alias, or a tuple of dimension names.
        """
        view, names = self._view_of(dim)
        inner = [view.names.index(name) for name in names]
        outer = [i for i in range(len(view.names)) if i not in inner]
        groups: np.ndarray = view.grid().transpose(outer + inner).reshape(-1, self.size_of(dim))
        return np.sort(groups, axis=1) if _reordered(view, names) else groups

    def group_of(self, rank: int, dim: str | tuple[str, ...]) -> list[int]:
        """The group along ``dim`` that holds ``rank``, in O(number of dims) work.

        :param rank: a global rank.
        :param dim: a dimension name or alias, or a tuple of dimension names.
        """
        rank = self._check_rank(rank)
        view, names = self._view_of(dim)
        position = _position(view, rank)
        coordinate = _coordinate(view, position)
        base = position - sum(coordinate[name] * view.stride(name) for name in names)
        offsets = np.zeros(1, dtype=np.int64)
        for name in names:
            steps = np.arange(view.size(name), dtype=np.int64) * view.stride(name)
            offsets = (offsets[:, None] + steps[None, :]).reshape(-1)
        members = view.ranks(base + offsets)
        return (np.sort(members) if _reordered(view, names) else members).tolist()  # type: ignore[no-any-return]

    def rank_in(self, rank: int, dim: str | tuple[str, ...]) -> int:
        """The rank of process ``rank`` inside its group along ``dim``.

        :param rank: a global rank.
        :param dim: a dimension name or alias, or a tuple of dimension names.
        """
        rank = self._check_rank(rank)
        view, names = self._view_of(dim)
        if _reordered(view, names):
            return self.group_of(rank, dim).index(rank)
        coordinate = _coordinate(view, _position(view, rank))
        index = 0
        for name in names:
            index = index * view.size(name) + coordinate[name]
        return index

    def coordinate(self, rank: int) -> dict[str, int]:
        """The coordinate of ``rank`` along each dense dimension, then each expert one.

        :param rank: a global rank.
        """
        rank = self._check_rank(rank)
        coordinate = _coordinate(self._dense, rank)
        expert = _coordinate(self._expert, _position(self._expert, rank))
        coordinate.update({name: expert[name] for name in EXPERT_DIMS})
        return coordinate

    def rank_of(self, **coordinate: int) -> int:
        """The rank at a coordinate of one view; omitted dimensions count as 0.

        :param coordinate: dimension name -> position along it, e.g. ``tp=1, pp=0``.
        :raises ValueError: unknown dimensions, coordinates out of range, or
            dense-only and expert-only dimensions in one call.
        """
        expert = [name for name in coordinate if name in EXPERT_DIMS]
        view = self._expert if expert else self._dense
        position = 0
        for name, value in coordinate.items():
            if name not in view.names:
                which = "expert" if expert else "dense"
                raise ValueError(
                    f"{name}: unknown dimension in the {which} view; expected one of {view.names}"
                )
            size = view.size(name)
            value_at = check_int(name, value)
            if not 0 <= value_at < size:
                raise ValueError(f"{name}: expected a coordinate in [0, {size}), got {value_at}")
            position += value_at * view.stride(name)
        return int(view.ranks(np.int64(position)))

    def check_locality(self, ranks_per_node: int) -> list[LocalityFinding]:
        """Gangs that cross nodes where they should not; empty when all is node-local.

        See :func:`gangmesh.locality.find_crossings` for the rules.

        :param ranks_per_node: how many consecutive ranks share a node.
        :raises ValueError: ``ranks_per_node`` does not divide the world size.
        """
        from gangmesh.locality import find_crossings

        return find_crossings(self, ranks_per_node)

    def view(self, expert: bool = False) -> View:
        """The dense view, or the expert view.

        :param expert: whether to return the expert view.
        """
        return self._expert if expert else self._dense

    def _view_of(self, dim: str | tuple[str, ...]) -> tuple[View, tuple[str, ...]]:
        """The view a name or tuple lives in, and its dims."""
        names = ALIASES.get(dim, (dim,)) if isinstance(dim, str) else tuple(dim)
        if not names:
            raise ValueError("dim: expected at least one dimension name, got ()")
        known = (*DENSE_DIMS, *EXPERT_DIMS)
        for name in names:
            if name not in known:
                every = ", ".join([*known, *ALIASES])
                raise ValueError(f"dim: unknown dimension {name!r}; expected one of {every}")
        expert = [name for name in names if name in EXPERT_DIMS]
        if expert and any(name not in (*EXPERT_DIMS, *SHARED_DIMS) for name in names):
            raise ValueError(
                f"dim: {names} mixes dense-only and expert dimensions; a group lives in one "
                f"view: {DENSE_DIMS} or {(*SHARED_DIMS, *EXPERT_DIMS)}"
            )
        view = self._expert if expert else self._dense
        if isinstance(dim, str):
            names = tuple(sorted(names, key=view.names.index))
        positions = [view.names.index(name) for name in names]
        if positions != sorted(set(positions)):
            raise ValueError(
                f"dim: expected distinct dimensions in mesh order {view.names}, got {names}"
            )
        return view, names

    def _check_rank(self, rank: int) -> int:
        value = check_int("rank", rank)
        if not 0 <= value < self._world_size:
            raise ValueError(f"rank: expected a rank in [0, {self._world_size}), got {value}")
        return value


def _reordered(view: View, names: tuple[str, ...]) -> bool:
    """Whether groups over ``names`` may list ranks out of order: several dimensions of a
    view that reorders the dense dimensions (the expert view at ep = 1, another order)."""
    return bool(view.axes) and len(names) > 1


def _position(view: View, rank: int) -> int:
    return int(view.positions(np.int64(rank)))


def _coordinate(view: View, position: int) -> dict[str, int]:
    return {
        name: (position // stride) % size
        for name, size, stride in zip(view.names, view.sizes, view.strides, strict=True)
    }


def _check_order(order: Sequence[str] | str | None) -> tuple[str, ...]:
    """The dense order as a tuple; ValueError unless it is a permutation of DENSE_DIMS."""
    if order is None:
        return DENSE_DIMS
    names = tuple(order.split(",")) if isinstance(order, str) else tuple(order)
    names = tuple(name.strip() if isinstance(name, str) else name for name in names)
    if sorted(map(str, names)) != sorted(DENSE_DIMS) or len(set(names)) != len(names):
        raise ValueError(
            f"order: expected each of {', '.join(DENSE_DIMS)} once, outermost first, got {order!r}"
        )
    return names


def _expert_view(dense: View, ep: int, etp: int) -> View:
    """The expert view of a dense layout, checked against the rules.

    ep borrows the ranks of dp_shard x cp (x tp when etp = 1); efsdp is what it leaves.
    With ep = 1 the view may take the dense dimensions in another order than the dense
    view; with ep > 1 the order rules keep it row-major over the ranks.
    """
    tp = dense.size("tp")
    if etp not in (1, tp):
        raise ValueError(
            f"etp: expected 1 (experts also borrow the tp ranks) or tp={tp} (experts keep "
            f"the dense tensor parallelism), got {etp}"
        )
    if ep > 1 and set(dense.names[:2]) != set(SHARED_DIMS):
        raise ValueError(
            f"order: with ep={ep} > 1, pp and dp_replicate must be the two outermost "
            f"dimensions (dense and expert layers share pipeline stages and replicas); "
            f"got {','.join(dense.names)}"
        )
    if ep > 1 and etp > 1 and dense.names[-1] != "tp":
        raise ValueError(
            f"order: with etp = tp = {tp}, tp must be the innermost dimension (expert and "
            f"dense layers share the tp groups); got {','.join(dense.names)}"
        )
    borrowed_dims = ("dp_shard", "cp", "tp") if etp == 1 else ("dp_shard", "cp")
    borrowed = math.prod(dense.size(name) for name in borrowed_dims)
    if borrowed % ep:
        terms = " * ".join(f"{name}={dense.size(name)}" for name in borrowed_dims)
        raise ValueError(
            f"ep: expected a factor of the ranks expert parallelism borrows, {terms} = "
            f"{borrowed} (etp={etp}), got ep={ep}"
        )
    shared = tuple(name for name in dense.names if name in SHARED_DIMS)
    taken = (
        *shared,
        *(name for name in dense.names if name in borrowed_dims),
        *(name for name in dense.names if name not in (*SHARED_DIMS, *borrowed_dims)),
    )
    axes = tuple(dense.names.index(name) for name in taken)
    sizes = (dense.size(shared[0]), dense.size(shared[1]), borrowed // ep, ep, etp)
    if axes == tuple(range(len(axes))):
        return View((*shared, *EXPERT_DIMS), sizes)
    return View((*shared, *EXPERT_DIMS), sizes, dense.sizes, axes)


def _resolve_sizes(world_size: int, sizes: Mapping[str, object]) -> dict[str, int]:
    """Check the sizes and infer the one given as -1; errors name the sizes set above 1."""
    for name, size in sizes.items():
        if not is_int(size):
            raise ValueError(f"{name}: expected a positive int or -1, got {size!r}")
        if size == 0 or int(size) < -1:  # type: ignore[call-overload]
            raise ValueError(f"{name}: expected a positive int or -1, got {size}")
    checked = {name: int(size) for name, size in sizes.items()}  # type: ignore[call-overload]
    inferred = [name for name, size in checked.items() if size == -1]
    default = " (dp_shard is -1 by default)" if "dp_shard" in inferred else ""
    if len(inferred) > 1:
        raise ValueError(
            f"{' and '.join(inferred)}: at most one size may be -1 (inferred), got "
            f"{_product_text(checked)}{default}"
        )
    known = math.prod(size for size in checked.values() if size != -1)
    named = {name: size for name, size in checked.items() if size > 1}
    subject = ", ".join(named) or "sizes"
    if inferred:
        if world_size % known:
            raise ValueError(
                f"{subject}: {_product_text(named)} does not divide world_size "
                f"{world_size}, so {inferred[0]} cannot infer its size{default}"
            )
        checked[inferred[0]] = world_size // known
    elif known != world_size:
        raise ValueError(
            f"{subject}: {_product_text(named) or 'every size is 1'}, but world_size "
            f"is {world_size}"
        )
    return checked


def _product_text(sizes: dict[str, int]) -> str:
    """``"tp=2"``, or ``"dp_shard=3 * tp=2 = 6"``."""
    text = " * ".join(f"{name}={size}" for name, size in sizes.items())
    return (
        f"{text} = {math.prod(sizes.values())}"
        if len(sizes) > 1 and -1 not in sizes.values()
        else text
    )
