"""A rank's part of one push across a join: the routes it is in, every broadcast started and
then waited for, a receiver's pieces then put in place."""

from __future__ import annotations

import torch

from gangmesh.assembly.join_gangs import EpochGangs
from gangmesh.assembly.weight_push import direct, header, landing, pack, sent, unpack
from gangmesh.plan.push_plan import PushPlan
from gangmesh.runtime.bridge_gang import Pending
from gangmesh.runtime.gang import GangError


def cross(
    gangs: EpochGangs,
    plan: PushPlan,
    sender: str,
    receiver: str,
    tensors: dict[str, torch.Tensor],
    version: int | None,
    rank: int,
) -> int | None:
    """Rank ``rank``'s routes of a push from job ``sender`` to ``receiver`` in the epoch of
    ``gangs``: sent where ``version`` is given, else received into ``tensors``. The version
    received (None for a sender, or a rank in no route).

    :raises GangError: a broadcast failed, or what came was sent in another epoch.
    """
    epoch = gangs.epoch
    waits: list[Pending] = []
    copies: list[tuple[torch.Tensor, torch.Tensor]] = []
    buffers = []
    try:
        for route, gang, data in gangs.routes(plan, sender, receiver):
            if version is not None:
                pack(route, plan, tensors, version, epoch.number, data)
            waits.append(gang.start_broadcast(data, 0))
            buffers.append((route, data))
            for piece in direct(route):
                if version is not None:
                    waits.append(gang.start_broadcast(sent(piece, plan, rank, tensors), 0))
                    continue
                into, then = landing(piece, plan, rank, tensors)
                waits.append(gang.start_broadcast(into, 0))
                if then is not None:
                    copies.append((into, then))
        for pending in waits:
            pending.wait()
    finally:  # a failure's traceback keeps this frame: not the collectives it started
        waits.clear()
    if version is not None or not buffers:
        return None
    for route, data in buffers:
        unpack(route, plan, data, rank, tensors)
    for into, then in copies:
        then.copy_(into)
    version, sent_in = header(buffers[0][1])
    if sent_in != epoch.number:  # the routes of another epoch's push: never the current
        raise GangError(f"a push of join epoch {sent_in} arrived in epoch {epoch.number}")
    return version
