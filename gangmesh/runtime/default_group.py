"""torch's default process group: start it, find it, and the device and backend that go with it."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

from gangmesh.runtime import _c10d, torch_errors
from gangmesh.runtime.gang import GangError

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

log = logging.getLogger("gangmesh")


def default_device(local_rank: int = 0) -> torch.device:
    """cuda:LOCAL_RANK when CUDA is available, else cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def backend_for(device: torch.device) -> str:
    """The torch.distributed backend for a device: gloo for cpu, nccl for cuda.

    :raises ValueError: any other device type.
    """
    if device.type == "cpu":
        return "gloo"
    if device.type == "cuda":
        return "nccl"
    raise ValueError(f"device: expected a cpu or cuda device, got {device}")


def start(
    device: torch.device,
    *,
    backend: str | None,
    timeout: timedelta,
    high_priority: bool,
    init_method: str | None,
    rank: int,
    world_size: int,
    store: Store | None,
) -> ProcessGroup:
    """Initialise torch's default process group (see ProcessGroupGang.create_default_process_group).

    :raises ValueError: a device type without a backend.
    :raises RuntimeError: torch.distributed is already initialised.
    :raises GangError: initialisation fails.
    """
    if dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is already initialised; use setup_root_gang() to wrap it"
        )
    backend = backend or backend_for(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        dist.init_process_group(
            backend,
            init_method=None if store is not None else init_method,
            store=store,
            timeout=timeout,
            rank=rank,
            world_size=world_size,
            pg_options=_c10d.backend_options(leading_backend(backend), timeout, high_priority),
            # bound to this process's device (torch 2.15's "nccl" binds one itself otherwise)
            device_id=device if device.type == "cuda" else None,
        )
    except (RuntimeError, ValueError) as ex:
        why = torch_errors.summary(ex, timeout.total_seconds())
        raise GangError(f"the default process group ({backend}) failed to start: {why}") from ex
    log.info("Root gang up: %s, rank %d of %d", backend, dist.get_rank(), dist.get_world_size())
    return running()


def running() -> ProcessGroup:
    """The default process group.

    :raises RuntimeError: torch.distributed is not initialised.
    """
    world = dist.group.WORLD if dist.is_available() and dist.is_initialized() else None
    if not isinstance(world, ProcessGroup):
        raise RuntimeError("torch.distributed is not initialised; start it with setup_root_gang()")
    return world


def device_backends(backend: str) -> dict[str, str]:
    """Device type -> backend, for a torch backend string.

    A mixed string is read as written (``"cpu:gloo,cuda:nccl"``); a plain name serves the
    device type gangmesh gives it (nccl: cuda, any other: cpu).
    """
    if ":" not in backend:
        return {"cuda" if backend == "nccl" else "cpu": backend}
    legs = (leg.partition(":") for leg in backend.split(","))
    return {device.strip(): name.strip() for device, _, name in legs}


def leading_backend(backend: str) -> str:
    """The backend whose options a group of ``backend`` takes: its CUDA leg where it has one."""
    legs = device_backends(backend)
    return legs.get("cuda", legs.get("cpu", backend))


def device_of(group: ProcessGroup) -> torch.device:
    """The device a group's collectives take: where its backend serves CUDA (NCCL, or the
    CUDA leg of a mixed backend) the device torch bound the group or the default group to,
    else the current CUDA device; cpu elsewhere."""
    if "cuda" not in device_backends(dist.get_backend(group)):
        return torch.device("cpu")
    for holder in (group, dist.group.WORLD):
        bound = getattr(holder, "bound_device_id", None)
        if isinstance(bound, torch.device) and bound.type == "cuda" and bound.index is not None:
            return bound
    return torch.device("cuda", torch.cuda.current_device())
