"""Several models in one job: the world split into parts, each with its own layout.

A part is a run of consecutive global ranks, the parts in the order given: with
``trainer=4, generator=4`` the trainer holds ranks 0-3 and the generator ranks 4-7.
:class:`PartsPlan` names the parts and checks what crosses them (a bridge: a gang of ranks
of several parts); :class:`~gangmesh.plan.multipart.MultiPartPlan` gives each part the
plan of its layout, its groups in global ranks, and pairs the ranks of several parts by a
coordinate. This module uses numpy only.

>>> parts = PartsPlan(8, {"trainer": 4, "generator": -1})
>>> parts
PartsPlan(8, trainer=4, generator=4)
>>> parts.ranks("generator"), parts.part_of(5)
([4, 5, 6, 7], 'generator')
"""

from __future__ import annotations

import keyword
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import final

import numpy as np
from typing_extensions import override

from gangmesh.plan._checks import InvalidTypeError, check_index, check_int, is_int
from gangmesh.plan.dims import ALIASES, GANG_NAMES, ROOT, Dim

__all__ = ["RESERVED_NAMES", "PartsPlan", "check_part_name", "span_text"]

RESERVED_NAMES: frozenset[str] = frozenset(
    {*(dim.value for dim in Dim), *ALIASES, *GANG_NAMES, ROOT, "root_gang", "placement", "timeout"}
)
"""Names a part cannot take: every dimension, alias and gang the registry knows, and the
other arguments of :func:`~gangmesh.create_parts`."""


def span_text(ranks: range) -> str:
    """``"ranks 4-7"``, or ``"rank 4"``: a part's ranks in words.

    :param ranks: the ranks of a part.
    """
    return f"ranks {ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}"


def _check_sizes(world_size: int, sizes: object) -> dict[str, int]:
    """The sizes of the parts, each name checked and the -1 inferred."""
    if isinstance(sizes, Mapping):
        pairs = list(sizes.items())
    elif isinstance(sizes, Sequence) and not isinstance(sizes, (str, bytes)):
        pairs = list(sizes)
        if not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
            raise InvalidTypeError(
                f"sizes: expected a mapping or (name, size) pairs, got {sizes!r}"
            )
    else:
        raise InvalidTypeError(f"sizes: expected a mapping or (name, size) pairs, got {sizes!r}")
    if not pairs:
        raise ValueError("sizes: expected at least one part, got none")
    twice = sorted(name for name, n in Counter(name for name, _ in pairs).items() if n > 1)
    if twice:
        raise ValueError(f"sizes: expected each part named once, got {', '.join(twice)} twice")
    for name, size in pairs:
        check_part_name(name)
        if not is_int(size):
            raise InvalidTypeError(f"sizes[{name!r}]: expected a positive int or -1, got {size!r}")
        if size == 0 or size < -1:
            raise ValueError(f"sizes[{name!r}]: expected a positive int or -1, got {size}")
    checked = {name: int(size) for name, size in pairs}
    inferred = [name for name, size in checked.items() if size == -1]
    known = sum(size for size in checked.values() if size != -1)
    text = " + ".join(f"{name}={size}" for name, size in checked.items())
    if len(inferred) > 1:
        raise ValueError(f"sizes: at most one size may be -1 (inferred), got {text}")
    if inferred:
        if known >= world_size:
            raise ValueError(
                f"sizes: the other parts take {known} of world_size {world_size} ranks, "
                f"leaving none for {inferred[0]}=-1 ({text})"
            )
        checked[inferred[0]] = world_size - known
    elif known != world_size:
        shown = f"{text} = {known}" if len(checked) > 1 else text
        raise ValueError(
            f"sizes: expected sizes that add up to world_size {world_size}, got {shown}"
        )
    return checked


def check_part_name(name: object, argument: str = "sizes") -> str:
    """``name`` if it can name a part: a Python identifier, not a keyword, and not a name
    the registry gives a dimension or gang (:data:`RESERVED_NAMES`).

    :param name: the name to check.
    :param argument: the argument that gave it, named in the error.
    :raises TypeError: ``name`` is not a str.
    :raises ValueError: ``name`` cannot name a part.
    """
    if not isinstance(name, str):
        raise InvalidTypeError(f"{argument}: expected part names as str, got {name!r}")
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(
            f"{argument}: expected part names that are Python identifiers (a keyword of "
            f"create_parts), got {name!r}"
        )
    if name in RESERVED_NAMES:
        raise ValueError(
            f"{argument}: part name {name!r} is the name of a dimension or gang; expected "
            f"another name (not one of {', '.join(sorted(RESERVED_NAMES))})"
        )
    return name


@final
class PartsPlan:
    """The world split into named parts, each a run of consecutive global ranks, in order.

    >>> PartsPlan(8, [("trainer", 6), ("generator", 2)]).offset("generator")
    6

    :param world_size: number of processes in the job.
    :param sizes: part name -> number of ranks (or such pairs), in rank order; exactly
        one size may be -1: the ranks the others leave.
    :raises TypeError: a size that is not an int, or sizes that are no mapping or pairs.
    :raises ValueError: no parts, a size that is 0 or below -1, more than one -1, sizes
        that do not add up to ``world_size``, a part named twice, a name that is no Python
        identifier or that names a dimension or gang (:data:`RESERVED_NAMES`).
    """

    __slots__ = ("_offsets", "_sizes", "_world_size")

    def __init__(
        self, world_size: int, sizes: Mapping[str, int] | Sequence[tuple[str, int]]
    ) -> None:
        world = check_int("world_size", world_size)
        if world < 1:
            raise ValueError(f"world_size: expected an int >= 1, got {world}")
        self._world_size = world
        self._sizes = _check_sizes(world, sizes)
        starts = np.cumsum([0, *self._sizes.values()])[:-1].tolist()
        self._offsets = dict(zip(self._sizes, starts, strict=True))

    @override
    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={size}" for name, size in self._sizes.items())
        return f"PartsPlan({self._world_size}, {sizes})"

    @override
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PartsPlan):
            return NotImplemented
        return self._key == other._key

    @override
    def __hash__(self) -> int:
        return hash(self._key)

    @property
    def _key(self) -> tuple[int, tuple[tuple[str, int], ...]]:
        return self._world_size, tuple(self._sizes.items())

    @property
    def world_size(self) -> int:
        """Number of processes in the job: the sizes of the parts added up."""
        return self._world_size

    @property
    def names(self) -> tuple[str, ...]:
        """The part names, in rank order."""
        return tuple(self._sizes)

    @property
    def sizes(self) -> dict[str, int]:
        """Part name -> number of ranks (the -1 inferred), in rank order."""
        return dict(self._sizes)

    def size(self, name: str) -> int:
        """Number of ranks of part ``name``.

        :param name: a part name.
        :raises ValueError: no part has that name.
        """
        return self._sizes[self.known(name)]

    def offset(self, name: str) -> int:
        """The first global rank of part ``name``.

        :param name: a part name.
        :raises ValueError: no part has that name.
        """
        return int(self._offsets[self.known(name)])

    def span(self, name: str) -> range:
        """The global ranks of part ``name``, as a range.

        :param name: a part name.
        :raises ValueError: no part has that name.
        """
        start = self.offset(name)
        return range(start, start + self._sizes[name])

    def ranks(self, name: str) -> list[int]:
        """The global ranks of part ``name``, ascending.

        :param name: a part name.
        :raises ValueError: no part has that name.
        """
        return list(self.span(name))

    def part_of(self, rank: int) -> str:
        """The name of the part that holds global rank ``rank``.

        :param rank: a global rank.
        :raises ValueError: ``rank`` is not in ``[0, world_size)``.
        """
        checked = check_index("rank", rank, self._world_size, "a rank")
        starts = list(self._offsets.values())
        return self.names[int(np.searchsorted(starts, checked, side="right")) - 1]

    def bridge_ranks(self, **ranks_by_part: Sequence[int]) -> tuple[int, ...]:
        """The global ranks of a bridge (a gang across parts), sorted, after checking them.

        >>> PartsPlan(8, {"trainer": 4, "generator": 4}).bridge_ranks(generator=[5], trainer=[1])
        (1, 5)

        :param ranks_by_part: part name -> global ranks of that part to take.
        :raises TypeError: ranks that are no sequence of ints.
        :raises ValueError: no part given, an unknown part, a part with no ranks, a rank
            outside its part or a rank given twice.
        """
        if not ranks_by_part:
            raise ValueError(
                f"ranks_by_part: expected ranks of at least one part of {', '.join(self.names)}, "
                f"got none"
            )
        unknown = [name for name in ranks_by_part if name not in self._sizes]
        if unknown:
            raise ValueError(
                f"ranks_by_part: unknown part {', '.join(unknown)}; expected parts of "
                f"{', '.join(self.names)}"
            )
        taken: list[int] = []
        for name, ranks in ranks_by_part.items():
            taken.extend(self._part_ranks(name, ranks))
        return tuple(sorted(taken))

    def _part_ranks(self, name: str, ranks: object) -> list[int]:
        """``ranks`` as ints if they are distinct ranks of part ``name``."""
        if isinstance(ranks, np.ndarray):
            ranks = ranks.reshape(-1).tolist()
        if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Sequence):
            raise InvalidTypeError(f"{name}: expected a sequence of global ranks, got {ranks!r}")
        if not ranks:
            raise ValueError(f"{name}: expected at least one rank of the part, got none")
        span = self.span(name)
        checked = [check_int(f"{name}[{i}]", rank) for i, rank in enumerate(ranks)]
        outside = [rank for rank in checked if rank not in span]
        if outside:
            raise ValueError(
                f"{name}: rank {outside[0]} is not a rank of part {name}; "
                f"expected {span_text(span)}"
            )
        twice = sorted(rank for rank, n in Counter(checked).items() if n > 1)
        if twice:
            raise ValueError(f"{name}: expected each rank once, got {twice} more than once")
        return checked

    def known(self, name: str, argument: str = "name") -> str:
        """``name``, a part's name.

        :param name: the name to check.
        :param argument: the argument that gave it, named in the error.
        :raises ValueError: no part has that name.
        """
        if name not in self._sizes:
            raise ValueError(
                f"{argument}: unknown part {name!r}; expected one of {', '.join(self.names)}"
            )
        return name
