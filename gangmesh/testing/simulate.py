"""Simulate one rank of a large world with torch's fake process group."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from gangmesh.assembly.factories import create_gangs
from gangmesh.assembly.gangs import Gangs
from gangmesh.plan._checks import check_index, check_positive
from gangmesh.runtime import _c10d
from gangmesh.runtime.process_group_gang import ProcessGroupGang


@contextmanager
def simulate_gangs(world_size: int, rank: int, **dims: Any) -> Iterator[Gangs]:
    """Gangs of process ``rank`` in a world of ``world_size``, with no peers.

    Initialises torch's "fake" process group (collectives return at once and
    move no data), builds the gangs through :func:`~gangmesh.create_gangs` and its real
    DeviceMesh, and tears everything down on exit. ``dims`` are the sizes
    create_gangs takes (pp, dp_replicate, dp_shard, cp, tp, ep, etp, order, timeout,
    placement: a list of :class:`~gangmesh.Site`, one per rank, simulates where ranks run).

    >>> with simulate_gangs(4096, 4095, tp=8, pp=4) as gangs:
    ...     (gangs.tp.rank, gangs.pp.rank, gangs.dp.size)
    (7, 3, 128)

    :param world_size: number of processes in the simulated world.
    :param rank: the global rank to simulate.
    :param dims: the keyword arguments of :func:`~gangmesh.create_gangs`.
    :raises ValueError: bad sizes or ranks.
    :raises RuntimeError: torch.distributed is already initialised in this process.
    """
    world_size = check_positive("world_size", world_size)
    rank = check_index("rank", rank, world_size)
    if dist.is_initialized():
        raise RuntimeError("simulate_gangs: torch.distributed is already initialised here")
    _c10d.ensure_fake_backend()
    store = dist.HashStore()  # type: ignore[attr-defined]
    root = ProcessGroupGang.create_default_process_group(
        torch.device("cpu"), backend="fake", store=store, rank=rank, world_size=world_size
    )
    try:
        gangs = create_gangs(root, **dims)
    except BaseException:
        root.close()
        raise
    try:
        with gangs:
            yield gangs
    finally:
        gangs.close()
        root.close()
