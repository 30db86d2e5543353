"""The tensors of a push across a join: checked against the plan; in each route, the large
pieces sent straight from the sender's tensors into the receivers' (one broadcast each, no
copy where a side holds the piece in one run of memory), the small ones packed by the sender
into one buffer behind a header (the version and the epoch) and copied out of it by the
receivers, each into its place.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from gangmesh.plan.push_plan import Piece, PushPlan, Route

HEADER = 16
"""Bytes before the pieces: the version and the epoch's number, two int64."""
DIRECT = 4 * 1024 * 1024
"""Pieces of at least this many bytes cross in a broadcast of their own: one more collective
costs less than copying them in and out of a buffer."""


def direct(route: Route) -> list[Piece]:
    """The pieces of ``route`` that cross on their own, in the route's order."""
    return [piece for piece in route.pieces if piece.nbytes >= DIRECT]


def _packed(route: Route) -> list[Piece]:
    return [piece for piece in route.pieces if piece.nbytes < DIRECT]


def check_tensors(
    tensors: object, plan: PushPlan, rank: int, sending: bool, device: torch.device
) -> dict[str, Tensor]:
    """``tensors``: this rank's shard of every tensor of ``plan``, as it holds it.

    :raises TypeError: ``tensors`` is no mapping of names to tensors.
    :raises ValueError: a tensor missing or unknown, or one of another shape, dtype or device
        than the plan gives this rank, naming it and what was expected.
    """
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors: expected a mapping of names to tensors, got {tensors!r}")
    missing = [name for name in plan.names if name not in tensors]
    unknown = sorted(str(name) for name in tensors if name not in plan.names)
    if missing or unknown:
        said = [f"missing {', '.join(missing)}"] if missing else []
        said += [f"unknown {', '.join(unknown)}"] if unknown else []
        raise ValueError(f"tensors: expected {', '.join(plan.names)}; {'; '.join(said)}")
    for name in plan.names:
        tensor = tensors[name]
        if not isinstance(tensor, Tensor):
            raise TypeError(f"tensors[{name!r}]: expected a torch.Tensor, got {tensor!r}")
        box = plan.sender_box(name, rank) if sending else plan.receiver_box(name, rank)
        dtype = getattr(torch, plan.shards(name).dtype)
        if tuple(tensor.shape) != box.size or tensor.dtype != dtype:
            raise ValueError(
                f"tensors[{name!r}]: expected this rank's shard {box.text()} of "
                f"{list(plan.shards(name).shape)}, shape {list(box.size)} and dtype {dtype}; "
                f"got shape {list(tensor.shape)} and dtype {tensor.dtype}"
            )
        if tensor.device != device:
            raise ValueError(
                f"tensors[{name!r}]: expected a tensor on {device}, got {tensor.device}"
            )
    return {name: tensors[name] for name in plan.names}


def buffer(route: Route, device: torch.device) -> Tensor:
    """An empty buffer for ``route``: its header and small pieces."""
    size = HEADER + sum(piece.nbytes for piece in _packed(route))
    return torch.empty(size, dtype=torch.uint8, device=device)


def pack(
    route: Route,
    plan: PushPlan,
    tensors: Mapping[str, Tensor],
    version: int,
    epoch: int,
    out: Tensor,
) -> None:
    """Fill ``out``, the sender's buffer for ``route``: the header, then each small piece, cut
    out of its tensor."""
    out[:HEADER].view(torch.int64).copy_(torch.tensor([version, epoch]))
    at = HEADER
    for piece in _packed(route):
        held = tensors[piece.name][piece.box.within(plan.sender_box(piece.name, route.sender))]
        size = piece.box.numel * held.element_size()
        out[at : at + size].view(held.dtype).view(held.shape).copy_(held)
        at += piece.nbytes


def header(data: Tensor) -> tuple[int, int]:
    """The version and the epoch's number a buffer carries."""
    version, epoch = data[:HEADER].view(torch.int64).tolist()
    return int(version), int(epoch)


def unpack(
    route: Route, plan: PushPlan, data: Tensor, rank: int, tensors: Mapping[str, Tensor]
) -> None:
    """Copy each small piece of a received buffer into receiver ``rank``'s tensors."""
    at = HEADER
    for piece in _packed(route):
        target = tensors[piece.name]
        place = piece.box.within(plan.receiver_box(piece.name, rank))
        size = piece.box.numel * target.element_size()
        target[place].copy_(data[at : at + size].view(target.dtype).view(piece.box.size))
        at += piece.nbytes


def sent(piece: Piece, plan: PushPlan, sender: int, tensors: Mapping[str, Tensor]) -> Tensor:
    """What the sender broadcasts of a large piece: its part of the tensor, copied only where
    it is not one run of memory."""
    held = tensors[piece.name][piece.box.within(plan.sender_box(piece.name, sender))]
    return held if held.is_contiguous() else held.contiguous()


def landing(
    piece: Piece, plan: PushPlan, rank: int, tensors: Mapping[str, Tensor]
) -> tuple[Tensor, Tensor | None]:
    """Where a receiver takes a large piece in: its part of the tensor, where that is one run
    of memory; else a new tensor, and the part to copy it to once received."""
    target = tensors[piece.name][piece.box.within(plan.receiver_box(piece.name, rank))]
    if target.is_contiguous():
        return target, None
    return torch.empty_like(target, memory_format=torch.contiguous_format), target
