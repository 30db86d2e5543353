"""A weight push from one layout to another: which sender sends which piece of which tensor
to which receivers.

Every receiver gets each element of its shards once, from one sender that holds it; where
several senders hold the same shard (replicas), each piece is cut in as many parts along its
longest dimension, and each part goes to the holder that carries the fewest bytes so far,
the largest parts first. Pieces that one sender sends to the same
receivers travel together: a :class:`Route`, one broadcast from the sender to them.

>>> from gangmesh.plan.topology import MeshTopology
>>> weight = TensorShards((8, 4), "float32", {0: ("tp", "dp_shard")})
>>> replica = TensorShards((8, 4), "float32", {0: ("tp",)})
>>> plan = PushPlan(MeshTopology(4, dp_shard=2, tp=2), {"w": weight},
...                 MeshTopology(4, dp_replicate=2, tp=2), {"w": replica})
>>> for route in plan.routes:
...     print(route.sender, "->", route.receivers, route.pieces[0].box.text())
0 -> (0, 2) [0:2, 0:4]
1 -> (1, 3) [4:6, 0:4]
2 -> (0, 2) [2:4, 0:4]
3 -> (1, 3) [6:8, 0:4]

This module uses numpy only.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import final

from gangmesh.plan.shards import Box, TensorShards
from gangmesh.plan.topology import MeshTopology

__all__ = ["ALIGN", "Piece", "PushPlan", "Route"]

ALIGN = 16
"""Bytes each piece takes in a route's buffer are a multiple of this: every piece starts where
a tensor of any dtype may start."""


@final
@dataclass(frozen=True)
class Piece:
    """A box of one tensor, which a route carries."""

    name: str
    """The tensor's name."""
    box: Box
    """The box, in the whole tensor."""
    nbytes: int
    """Its bytes in a route's buffer (a multiple of :data:`ALIGN`)."""


@final
@dataclass(frozen=True)
class Route:
    """What one sender sends to some receivers, in one broadcast."""

    sender: int
    """The sending job's rank that sends."""
    receivers: tuple[int, ...]
    """The receiving job's ranks that receive, ascending."""
    pieces: tuple[Piece, ...]
    """What it carries, by tensor name and place."""
    nbytes: int
    """The bytes of the pieces in its buffer."""


@final
class PushPlan:
    """The routes of a push of named tensors from the ranks of ``senders`` to those of
    ``receivers``, each tensor laid out as its :class:`~gangmesh.plan.shards.TensorShards`
    says on each side.

    :param senders: the sending job's plan.
    :param sent: tensor name -> how the senders hold it.
    :param receivers: the receiving job's plan.
    :param received: tensor name -> how the receivers hold it.
    :raises ValueError: names that differ between the two sides, a tensor whose shape or
        dtype differs, or a split by a dimension a side's layout does not have.
    """

    __slots__ = ("_received", "_receivers", "_senders", "_sent", "routes")

    def __init__(
        self,
        senders: MeshTopology,
        sent: Mapping[str, TensorShards],
        receivers: MeshTopology,
        received: Mapping[str, TensorShards],
    ) -> None:
        _check_same_tensors(sent, received)
        for name in sent:
            sent[name].check_dims(senders, f"sent[{name!r}]")
            received[name].check_dims(receivers, f"received[{name!r}]")
        self._senders, self._sent = senders, dict(sent)
        self._receivers, self._received = receivers, dict(received)
        self.routes: tuple[Route, ...] = self._lay_routes()
        """Every route, by sender, then receivers."""

    def sender_box(self, name: str, rank: int) -> Box:
        """The box of tensor ``name`` that sender ``rank`` holds.

        :param name: a tensor's name.
        :param rank: a rank of the sending job.
        """
        return self._sent[name].box(self._senders, rank)

    def receiver_box(self, name: str, rank: int) -> Box:
        """The box of tensor ``name`` that receiver ``rank`` holds.

        :param name: a tensor's name.
        :param rank: a rank of the receiving job.
        """
        return self._received[name].box(self._receivers, rank)

    @property
    def sender_plan(self) -> MeshTopology:
        """The sending job's plan."""
        return self._senders

    @property
    def receiver_plan(self) -> MeshTopology:
        """The receiving job's plan."""
        return self._receivers

    @property
    def names(self) -> tuple[str, ...]:
        """The tensors pushed, sorted."""
        return tuple(sorted(self._sent))

    def shards(self, name: str) -> TensorShards:
        """How the senders hold tensor ``name`` (its shape and dtype).

        :param name: a tensor's name.
        """
        return self._sent[name]

    def data_bytes(self, route: Route) -> int:
        """The bytes of the tensors' elements ``route`` carries (its buffer's padding not
        counted).

        :param route: one of :attr:`routes`.
        """
        return sum(self._bytes(piece.name, piece.box) for piece in route.pieces)

    def bytes_sent(self, rank: int) -> int:
        """The bytes of elements sender ``rank`` sends (each route's once).

        :param rank: a rank of the sending job.
        """
        return sum(self.data_bytes(route) for route in self.routes if route.sender == rank)

    @property
    def total_bytes(self) -> int:
        """The bytes of every tensor pushed, whole."""
        return sum(
            s.item_size * Box((0,) * len(s.shape), s.shape).numel for s in self._sent.values()
        )

    def _lay_routes(self) -> tuple[Route, ...]:
        """Each piece assigned to the holder with the least bytes so far, largest first;
        the pieces of one sender to the same receivers gathered in one route."""
        wanted: dict[tuple[str, Box, Box], list[int]] = {}
        holders: dict[tuple[str, Box], list[int]] = {}
        found: dict[tuple[TensorShards, TensorShards], _Overlaps] = {}
        for name in self.names:  # tensors held alike (a model's layers) are looked at once
            alike = (self._sent[name], self._received[name])
            held_by, pieces = found.get(alike) or found.setdefault(alike, self._overlaps(name))
            holders.update(((name, held), senders) for held, senders in held_by.items())
            wanted.update(((name, *box_pair), ranks) for box_pair, ranks in pieces.items())
        parts = [
            (name, held, part, tuple(receivers))
            for (name, held, piece), receivers in wanted.items()
            for part in _cut(piece, len(holders[name, held]))
        ]
        parts.sort(key=lambda p: (-self._bytes(p[0], p[2]), p[0], p[2].start))
        load = dict.fromkeys(range(self._senders.world_size), 0)
        routes: dict[tuple[int, tuple[int, ...]], list[Piece]] = defaultdict(list)
        for name, held, part, receivers in parts:
            sender = min(holders[name, held], key=lambda rank: (load[rank], rank))
            load[sender] += self._bytes(name, part)
            aligned = -(-self._bytes(name, part) // ALIGN) * ALIGN
            routes[sender, receivers].append(Piece(name, part, aligned))
        return tuple(
            Route(sender, receivers, tuple(sorted(pieces, key=_piece_order)),
                  sum(p.nbytes for p in pieces))
            for (sender, receivers), pieces in sorted(routes.items())
        )  # fmt: skip

    def _overlaps(self, name: str) -> _Overlaps:
        """Tensor ``name``'s held boxes with their senders, and each piece of a held box that
        receivers hold, with those receivers."""
        held_by: dict[Box, list[int]] = defaultdict(list)
        for sender in range(self._senders.world_size):
            held_by[self.sender_box(name, sender)].append(sender)
        pieces: dict[tuple[Box, Box], list[int]] = defaultdict(list)
        for receiver in range(self._receivers.world_size):
            mine = self.receiver_box(name, receiver)
            for held in held_by:
                piece = held.overlap(mine)
                if piece is not None:
                    pieces[held, piece].append(receiver)
        return held_by, pieces

    def _bytes(self, name: str, box: Box) -> int:
        return self._sent[name].item_size * box.numel


_Overlaps = tuple[dict[Box, list[int]], dict[tuple[Box, Box], list[int]]]
"""A tensor's held boxes with their senders; its pieces (held box, piece) with receivers."""


def _cut(box: Box, count: int) -> list[Box]:
    """``box`` in ``count`` parts (``torch.chunk``'s) along its longest dimension, the empty
    ones left out."""
    if count == 1 or not box.size:
        return [box]
    axis = max(range(len(box.size)), key=lambda d: box.size[d])
    each = -(-box.size[axis] // count)
    found = []
    for first in range(0, box.size[axis], each):
        start, size = list(box.start), list(box.size)
        start[axis] += first
        size[axis] = min(each, box.size[axis] - first)
        found.append(Box(tuple(start), tuple(size)))
    return found


def _piece_order(piece: Piece) -> tuple[str, tuple[int, ...]]:
    return piece.name, piece.box.start


def _check_same_tensors(
    sent: Mapping[str, TensorShards], received: Mapping[str, TensorShards]
) -> None:
    """:raises ValueError: the two sides name other tensors, or give one another shape or dtype."""
    missing = sorted(set(sent) - set(received))
    extra = sorted(set(received) - set(sent))
    if missing or extra:
        said = [f"not received: {', '.join(missing)}"] if missing else []
        said += [f"not sent: {', '.join(extra)}"] if extra else []
        raise ValueError(f"received: expected the tensors sent, {sorted(sent)}; {'; '.join(said)}")
    for name, shards in sent.items():
        other = received[name]
        if (shards.shape, shards.dtype) != (other.shape, other.dtype):
            raise ValueError(
                f"received[{name!r}]: expected shape {list(shards.shape)} and dtype "
                f"{shards.dtype} as sent, got {list(other.shape)} and {other.dtype}"
            )
