"""The questions a plan answers about its groups, by dimension name: their sizes, members
and ranks, over the dense and the expert view. :class:`~gangmesh.MeshTopology` lays the
views out; this module uses numpy only.
"""

from __future__ import annotations

import math

import numpy as np

from gangmesh.plan._checks import check_count, check_index
from gangmesh.plan.dims import EXPERT_DIMS
from gangmesh.plan.view import View, named_view


class GroupQueries:
    """The group queries of :class:`~gangmesh.MeshTopology`, over its world size and its
    dense and expert views."""

    _world_size: int
    _dense: View
    _expert: View

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
        return view.groups(names)

    def group_of(self, rank: int, dim: str | tuple[str, ...]) -> list[int]:
        """The group along ``dim`` that holds ``rank``, in O(number of dims) work.

        :param rank: a global rank.
        :param dim: a dimension name or alias, or a tuple of dimension names.
        """
        rank = check_index("rank", rank, self._world_size, "a rank")
        view, names = self._view_of(dim)
        return view.group_of(rank, names)

    def rank_in(self, rank: int, dim: str | tuple[str, ...]) -> int:
        """The rank of process ``rank`` inside its group along ``dim``.

        :param rank: a global rank.
        :param dim: a dimension name or alias, or a tuple of dimension names.
        """
        rank = check_index("rank", rank, self._world_size, "a rank")
        view, names = self._view_of(dim)
        return view.rank_in(rank, names)

    def coordinate(self, rank: int) -> dict[str, int]:
        """The coordinate of ``rank`` along each dense dimension, then each expert one.

        :param rank: a global rank.
        """
        rank = check_index("rank", rank, self._world_size, "a rank")
        expert = self._expert.coordinate(rank)
        return {**self._dense.coordinate(rank), **{name: expert[name] for name in EXPERT_DIMS}}

    def rank_of(self, **coordinate: int) -> int:
        """The rank at a coordinate of one view; omitted dimensions count as 0.

        :param coordinate: dimension name -> position along it, e.g. ``tp=1, pp=0``.
        :raises ValueError: unknown dimensions, coordinates out of range, or
            dense-only and expert-only dimensions in one call.
        """
        expert = [name for name in coordinate if name in EXPERT_DIMS]
        view = self._expert if expert else self._dense
        checked = {}
        for name, value in coordinate.items():
            if name not in view.names:
                which = "expert" if expert else "dense"
                raise ValueError(
                    f"{name}: unknown dimension in the {which} view; expected one of {view.names}"
                )
            checked[name] = check_index(name, value, view.size(name), "a coordinate")
        return view.rank_at(checked)

    def view(self, expert: bool = False) -> View:
        """The dense view, or the expert view.

        :param expert: whether to return the expert view.
        """
        return self._expert if expert else self._dense

    def view_of(self, dim: str | tuple[str, ...]) -> View:
        """The view whose groups ``dim`` names: the dense one or the expert one.

        :param dim: a dimension name or alias, or a tuple of dimension names.
        :raises ValueError: as :meth:`resolve` does.
        """
        return self._view_of(dim)[0]

    def group_count(self, dim: str | tuple[str, ...]) -> int:
        """How many groups ``dim`` has, without listing them.

        :param dim: a dimension name or alias, or a tuple of dimension names.
        """
        return self._world_size // self.size_of(dim)

    def group_ids(self, dim: str | tuple[str, ...], ranks: np.ndarray) -> np.ndarray:
        """For each rank, the index of its group along ``dim``: its row in :meth:`groups`.

        >>> import numpy as np
        >>> from gangmesh.plan.topology import MeshTopology
        >>> MeshTopology(8, tp=2).group_ids("dp", np.arange(8)).tolist()
        [0, 1, 0, 1, 0, 1, 0, 1]

        :param dim: a dimension name or alias, or a tuple of dimension names.
        :param ranks: global ranks (an int64 array).
        """
        view, names = self._view_of(dim)
        return view.group_ids(names, ranks)

    def first_groups(self, dim: str | tuple[str, ...], count: int) -> list[list[int]]:
        """The first ``count`` rows of :meth:`groups`, without listing the others.

        :param dim: a dimension name or alias, or a tuple of dimension names.
        :param count: how many groups, at most.
        """
        count = check_count("count", count)
        view, names = self._view_of(dim)
        return view.first_groups(names, count)

    def _view_of(self, dim: str | tuple[str, ...]) -> tuple[View, tuple[str, ...]]:
        return named_view(dim, self._dense, self._expert)
