"""A gang that numbers the members of its process group otherwise than the group does.

A process group numbers its members by ascending global rank. A gang made with ranks
out of order (``create_gang([2, 0])``), or a flattened expert dimension under another
order, numbers them as it was asked to; its collectives then map between the two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias, TypeVar

import torch
from torch import Tensor

from gangmesh.runtime._validate import Splits

T = TypeVar("T")
Exchange: TypeAlias = Callable[[Tensor, Tensor, list[int], list[int]], None]
"""An all_to_all in group rank order: (output, input, rows received from each group rank,
rows sent to each)."""


class RankOrder:
    """Gang rank <-> group rank, for a gang whose members are ``members`` in gang rank order.

    >>> order = RankOrder(group_members=[0, 2, 5], members=[5, 0, 2])
    >>> order.to_group, order.from_group
    ([2, 0, 1], [1, 2, 0])

    :param group_members: the global ranks of the group's members, in group rank order.
    :param members: the same global ranks, in gang rank order.
    """

    __slots__ = ("from_group", "to_group")

    def __init__(self, group_members: Sequence[int], members: Sequence[int]) -> None:
        position = {member: index for index, member in enumerate(group_members)}
        self.to_group = [position[member] for member in members]
        """Group rank of each gang rank."""
        self.from_group = [0] * len(members)
        """Gang rank of each group rank."""
        for gang_rank, group_rank in enumerate(self.to_group):
            self.from_group[group_rank] = gang_rank

    def in_group_order(self, items: Sequence[T]) -> list[T]:
        """``items``, one per gang rank, listed by group rank."""
        return [items[r] for r in self.from_group]

    def all_to_all(
        self, exchange: Exchange, output_tensor: Tensor, input_tensor: Tensor, splits: Splits
    ) -> None:
        """all_to_all by ``exchange``, with the pieces of both tensors in gang rank order.

        :raises RuntimeError: the backend fails.
        """
        size = len(self.to_group)
        output_split_sizes, input_split_sizes = splits
        sends = self.in_group_order(_split(input_tensor, input_split_sizes, size))
        receives = _split(output_tensor, output_split_sizes, size)
        by_group = [piece.shape[0] for piece in self.in_group_order(receives)]
        received = torch.empty_like(output_tensor)
        exchange(received, torch.cat(sends), by_group, [piece.shape[0] for piece in sends])
        for piece, r in zip(torch.split(received, by_group), self.from_group, strict=True):
            receives[r].copy_(piece)


def _split(tensor: Tensor, sizes: list[int] | None, parts: int) -> list[Tensor]:
    """``tensor`` cut along dim 0 into ``sizes`` rows each, or into ``parts`` equal parts."""
    return list(torch.split(tensor, sizes) if sizes else tensor.chunk(parts))
