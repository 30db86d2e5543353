"""Views of a world: its ranks laid out along named dimensions, and the groups along them.

A view is row-major over its positions. The dense view's positions are the global ranks;
the expert view takes the same ranks with pp and dp_replicate as in the dense view, then
efsdp, ep and etp (see :mod:`gangmesh.plan.expert`). Every rank computation of a plan is made
here: groups, one rank's group and its rank in it, group ids, coordinates; and the short
way a group is written. This module uses numpy only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from gangmesh.plan._checks import InvalidTypeError, check_listable
from gangmesh.plan.dims import ALIASES, DENSE_DIMS, EXPERT_DIMS, FACTS, SHARED_DIMS, Dim


@dataclass(frozen=True)
class View:
    """One way of laying the world out: dimension names and sizes, outermost first.

    A view is row-major over its *positions*. The dense view's positions are the global
    ranks. Another view may list the dense dimensions in another order: then ``source``
    holds the dense sizes (whose row-major index is the rank) and ``axes`` the dense
    dimensions in the order the view takes them, before it regroups them into ``sizes``.
    A placed view (see :mod:`gangmesh.plan.placement`) maps positions to ranks by ``placed``.
    """

    names: tuple[str, ...]
    """Dimension names, outermost first."""
    sizes: tuple[int, ...]
    """Size of each dimension, in the same order."""
    source: tuple[int, ...] = ()
    """The dense sizes, when the view reorders the dense dimensions; else empty."""
    axes: tuple[int, ...] = ()
    """The dense dimensions (indices into ``source``) in the order the view takes them."""
    placed: tuple[int, ...] = ()
    """The global rank at each position, where placement laid the view over a
    permutation of the ranks (``source`` and ``axes`` are then empty); else empty."""

    @functools.cached_property
    def _placed(self) -> np.ndarray:
        return np.asarray(self.placed, dtype=np.int64)

    @functools.cached_property
    def _slots(self) -> np.ndarray:
        slots = np.empty(len(self.placed), dtype=np.int64)
        slots[self._placed] = np.arange(len(self.placed), dtype=np.int64)
        return slots

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
        if self.placed:
            return self._slots[ranks]  # type: ignore[no-any-return]
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
        if self.placed:
            return self._placed[positions]  # type: ignore[no-any-return]
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
        """The global ranks laid out in this view's shape (the DeviceMesh tensor).

        :raises ValueError: a world too large to list (above 2**26 ranks).
        """
        world = math.prod(self.sizes)
        check_listable("world_size", world, "listing every group")
        ranks = np.arange(world, dtype=np.int64)
        return self.ranks(ranks).reshape(self.sizes)

    def placed_over(self, ranks: np.ndarray) -> View:
        """This view's dimensions over other ranks: ``ranks[i]`` at position ``i``.

        :param ranks: a permutation of the global ranks (an int64 array).
        """
        return View(self.names, self.sizes, placed=tuple(ranks.tolist()))

    def groups(self, names: tuple[str, ...]) -> np.ndarray:
        """Every group along ``names``: an int64 array ``[n_groups, group_size]``, rows in
        row-major order of the other dimensions (see :meth:`MeshTopology.groups
        <gangmesh.MeshTopology.groups>`).

        :param names: distinct dimensions of this view, in its order.
        """
        inner = [self.names.index(name) for name in names]
        outer = [i for i in range(len(self.names)) if i not in inner]
        size = math.prod(self.sizes[i] for i in inner)
        groups: np.ndarray = self.grid().transpose(outer + inner).reshape(-1, size)
        return np.sort(groups, axis=1) if self._reorders(names) else groups

    def group_of(self, rank: int, names: tuple[str, ...]) -> list[int]:
        """The group along ``names`` that holds ``rank``, in O(number of dims) work.

        :param rank: a global rank.
        :param names: distinct dimensions of this view, in its order.
        """
        check_listable(
            "dim", math.prod(self.size(name) for name in names), f"a group along {names}"
        )
        position = self._position(rank)
        coordinate = self._coordinate(position)
        base = position - sum(coordinate[name] * self.stride(name) for name in names)
        offsets = np.zeros(1, dtype=np.int64)
        for name in names:
            steps = np.arange(self.size(name), dtype=np.int64) * self.stride(name)
            offsets = (offsets[:, None] + steps[None, :]).reshape(-1)
        members = self.ranks(base + offsets)
        return (np.sort(members) if self._reorders(names) else members).tolist()  # type: ignore[no-any-return]

    def rank_in(self, rank: int, names: tuple[str, ...]) -> int:
        """The rank of process ``rank`` inside its group along ``names``.

        :param rank: a global rank.
        :param names: distinct dimensions of this view, in its order.
        """
        if self._reorders(names):
            return self.group_of(rank, names).index(rank)
        coordinate = self._coordinate(self._position(rank))
        index = 0
        for name in names:
            index = index * self.size(name) + coordinate[name]
        return index

    def coordinate(self, rank: int) -> dict[str, int]:
        """The coordinate of one global rank along each dimension.

        :param rank: a global rank.
        """
        return self._coordinate(self._position(rank))

    def rank_at(self, coordinate: dict[str, int]) -> int:
        """The global rank at a coordinate; omitted dimensions count as 0.

        :param coordinate: dimension name -> position along it, each in range.
        """
        return int(self.ranks(np.int64(sum(v * self.stride(n) for n, v in coordinate.items()))))

    def group_ids(self, names: tuple[str, ...], ranks: np.ndarray) -> np.ndarray:
        """For each rank, the index of its group along ``names``: its row in :meth:`groups`.

        :param names: distinct dimensions of this view, in its order.
        :param ranks: global ranks (an int64 array).
        """
        coordinates = self.coordinates(np.asarray(ranks, dtype=np.int64))
        ids = np.zeros(len(ranks), dtype=np.int64)
        for name, size in zip(self.names, self.sizes, strict=True):
            if name not in names:
                ids = ids * size + coordinates[name]
        return ids

    def first_groups(self, names: tuple[str, ...], count: int) -> list[list[int]]:
        """The first ``count`` rows of :meth:`groups`, without listing the others.

        :param names: distinct dimensions of this view, in its order.
        :param count: how many groups, at most.
        """
        dims = zip(self.names, self.sizes, self.strides, strict=True)
        outer = [(size, stride) for name, size, stride in dims if name not in names]
        groups = []
        for index in range(min(count, math.prod(size for size, _ in outer))):
            base, rest = 0, index
            for size, stride in reversed(outer):
                base += (rest % size) * stride
                rest //= size
            groups.append(self.group_of(int(self.ranks(np.int64(base))), names))
        return groups

    def _reorders(self, names: tuple[str, ...]) -> bool:
        """Whether groups over ``names`` may list ranks out of order: several dimensions of
        a view that reorders the dense dimensions (the expert view at ep = 1, another
        order) or of a placed view."""
        return bool(self.axes or self.placed) and len(names) > 1

    def _position(self, rank: int) -> int:
        return int(self.positions(np.int64(rank)))

    def _coordinate(self, position: int) -> dict[str, int]:
        return {
            name: (position // stride) % size
            for name, size, stride in zip(self.names, self.sizes, self.strides, strict=True)
        }


def named_view(
    dim: str | tuple[str, ...], dense: View, expert: View
) -> tuple[View, tuple[str, ...]]:
    """The view of a plan that a name, alias or tuple of names lives in, and its dimensions
    in that view's order.

    :param dim: a dimension name or alias, or a tuple of dimension names.
    :param dense: the plan's dense view.
    :param expert: the plan's expert view.
    :raises ValueError: unknown names, repeats, names out of mesh order or names of the
        dense and the expert view together.
    """
    if not isinstance(dim, (str, tuple)) or not all(isinstance(name, str) for name in dim):
        raise InvalidTypeError(f"dim: expected a dimension name or a tuple of names, got {dim!r}")
    names = ALIASES.get(dim, (dim,)) if isinstance(dim, str) else tuple(dim)
    if not names:
        raise ValueError("dim: expected at least one dimension name, got ()")
    known = (*DENSE_DIMS, *EXPERT_DIMS)
    for name in names:
        if name not in known:
            every = ", ".join([*known, *ALIASES])
            raise ValueError(f"dim: unknown dimension {name!r}; expected one of {every}")
    in_expert = [name for name in names if FACTS[Dim(name)].expert]
    if in_expert and any(FACTS[Dim(name)].view == "dense" for name in names):
        raise ValueError(
            f"dim: {names} mixes dense-only and expert dimensions; a group lives in one "
            f"view: {DENSE_DIMS} or {(*SHARED_DIMS, *EXPERT_DIMS)}"
        )
    view = expert if in_expert else dense
    if isinstance(dim, str):
        names = tuple(sorted(names, key=view.names.index))
    positions = [view.names.index(name) for name in names]
    if positions != sorted(set(positions)):
        raise ValueError(
            f"dim: expected distinct dimensions in mesh order {view.names}, got {names}"
        )
    return view, names


def short_group(group: list[int], limit: int = 8) -> str:
    """A group as the table writes it: ``[0,2,4]``, or ``[0,2,...,30]`` beyond ``limit``."""
    if len(group) <= limit:
        return "[" + ",".join(map(str, group)) + "]"
    return "[" + ",".join(map(str, group[: limit - 1])) + f",...,{group[-1]}]"
