"""Views of a world: its ranks laid out along named dimensions, and the expert view's rules.

A view is row-major over its positions. The dense view's positions are the global ranks;
the expert view takes the same ranks with pp and dp_replicate as in the dense view, then
efsdp, ep and etp, where ep borrows dense ranks by the rules of :func:`expert_view`.
This module uses numpy only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from gangmesh.dims import DENSE_DIMS, EXPERT_DIMS, SHARED_DIMS, Dim


@dataclass(frozen=True)
class View:
    """One way of laying the world out: dimension names and sizes, outermost first.

    A view is row-major over its *positions*. The dense view's positions are the global
    ranks. Another view may list the dense dimensions in another order: then ``source``
    holds the dense sizes (whose row-major index is the rank) and ``axes`` the dense
    dimensions in the order the view takes them, before it regroups them into ``sizes``.
    A placed view (see :mod:`gangmesh.placement`) maps positions to ranks by ``placed``.
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
        """The global ranks laid out in this view's shape (the DeviceMesh tensor)."""
        ranks = np.arange(math.prod(self.sizes), dtype=np.int64)
        return self.ranks(ranks).reshape(self.sizes)


def reordered(view: View, names: tuple[str, ...]) -> bool:
    """Whether groups over ``names`` may list ranks out of order: several dimensions of a
    view that reorders the dense dimensions (the expert view at ep = 1, another order) or
    of a placed view."""
    return bool(view.axes or view.placed) and len(names) > 1


def position_of(view: View, rank: int) -> int:
    """The position of one global rank in ``view``."""
    return int(view.positions(np.int64(rank)))


def coordinate_at(view: View, position: int) -> dict[str, int]:
    """The coordinate along each dimension of ``view`` of one position."""
    return {
        name: (position // stride) % size
        for name, size, stride in zip(view.names, view.sizes, view.strides, strict=True)
    }


def borrowed_dims(etp: int) -> tuple[Dim, ...]:
    """The dense dimensions whose ranks expert parallelism borrows: dp_shard and cp, and
    tp too when the experts have no tensor parallelism of their own (etp = 1).

    :param etp: the experts' tensor parallel size.
    """
    return tuple(d for d in DENSE_DIMS if d not in SHARED_DIMS and (etp == 1 or d != Dim.TP))


def shared_outermost(order: tuple[str, ...]) -> bool:
    """Whether the dimensions the expert view shares are the outermost of ``order``
    (the rule for ep > 1: dense and expert layers share stages and replicas).

    :param order: dense dimension names, outermost first.
    """
    return set(order[: len(SHARED_DIMS)]) == set(SHARED_DIMS)


def tp_innermost(order: tuple[str, ...]) -> bool:
    """Whether tp is the innermost of ``order`` (the rule for ep > 1 with etp = tp:
    expert and dense layers share the tp groups).

    :param order: dense dimension names, outermost first.
    """
    return order[-1] == Dim.TP


def expert_view(dense: View, ep: int, etp: int) -> View:
    """The expert view of a dense layout, checked against the rules.

    ep borrows the ranks of dp_shard x cp (x tp when etp = 1); efsdp is what it leaves.
    With ep = 1 the view may take the dense dimensions in another order than the dense
    view; with ep > 1 the order rules keep it row-major over the ranks.

    :param dense: the dense view.
    :param ep: expert parallel size.
    :param etp: the experts' tensor parallel size: 1 or tp.
    :raises ValueError: ``etp`` is neither 1 nor tp, the order breaks a rule for
        ep > 1, or ``ep`` does not divide the ranks it borrows.
    """
    tp = dense.size(Dim.TP)
    if etp not in (1, tp):
        raise ValueError(
            f"etp: expected 1 (experts also borrow the tp ranks) or tp={tp} (experts keep "
            f"the dense tensor parallelism), got {etp}"
        )
    if ep > 1 and not shared_outermost(dense.names):
        raise ValueError(
            f"order: with ep={ep} > 1, pp and dp_replicate must be the two outermost "
            f"dimensions (dense and expert layers share pipeline stages and replicas); "
            f"got {','.join(dense.names)}"
        )
    if ep > 1 and etp > 1 and not tp_innermost(dense.names):
        raise ValueError(
            f"order: with etp = tp = {tp}, tp must be the innermost dimension (expert and "
            f"dense layers share the tp groups); got {','.join(dense.names)}"
        )
    borrowed = borrowed_dims(etp)
    ranks = math.prod(dense.size(name) for name in borrowed)
    if ranks % ep:
        terms = " * ".join(f"{name}={dense.size(name)}" for name in borrowed)
        raise ValueError(
            f"ep: expected a factor of the ranks expert parallelism borrows, {terms} = "
            f"{ranks} (etp={etp}), got ep={ep}"
        )
    shared = tuple(name for name in dense.names if name in SHARED_DIMS)
    taken = (
        *shared,
        *(name for name in dense.names if name in borrowed),
        *(name for name in dense.names if name not in (*SHARED_DIMS, *borrowed)),
    )
    axes = tuple(dense.names.index(name) for name in taken)
    sizes = (*(dense.size(name) for name in shared), ranks // ep, ep, etp)
    if axes == tuple(range(len(axes))):
        return View((*shared, *EXPERT_DIMS), sizes)
    return View((*shared, *EXPERT_DIMS), sizes, dense.sizes, axes)
