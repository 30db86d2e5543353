"""torch's default process group: start it, find it, and the device and backend that go with it."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

from gangmesh.runtime import _c10d, faults
from gangmesh.runtime.backends import device_backends, leading_backend
from gangmesh.runtime.environment import DEVICE_VARIABLE, wanted_device_type
from gangmesh.runtime.gang import GangError

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

log = logging.getLogger("gangmesh")


GPU_CHOOSERS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
"""Variables through which a launcher shows each process the GPUs it chose for it (SLURM's
GPU binding, a wrapper per rank, a container's device plugin)."""
_EVERY_GPU = ("", "all", "none", "void")
"""Values of those variables that choose nothing per process."""


def default_device(
    local_rank: int = 0, local_world_size: int = 1, env: Mapping[str, str] | None = None
) -> torch.device:
    """cuda:LOCAL_RANK where torch sees a GPU for each process of the node; cuda:0 where a
    launcher chose each process's GPUs (``CUDA_VISIBLE_DEVICES``, ``NVIDIA_VISIBLE_DEVICES``:
    SLURM's ``--gpus-per-task``, a container's device plugin), setup then checking that no two
    processes of a host took the same GPU; else cpu. ``GANGMESH_DEVICE`` (cpu or cuda) chooses
    instead (a test suite's gloo worlds on a GPU machine say cpu).

    :raises ValueError: more processes on this node than GPUs, all of them visible to every
        process (NCCL refuses two ranks on one GPU), GANGMESH_DEVICE=cuda where torch sees no
        GPU, or another GANGMESH_DEVICE; before anything starts.
    """
    variables = os.environ if env is None else env
    wanted = wanted_device_type(variables)
    if wanted == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0 and wanted == "cuda":
        raise ValueError(f"{DEVICE_VARIABLE}: cuda, but torch sees no GPU on this machine")
    if count == 0:
        return torch.device("cpu")
    if local_world_size <= count and local_rank < count:
        return torch.device("cuda", local_rank)
    if any(variables.get(name, "").strip().lower() not in _EVERY_GPU for name in GPU_CHOOSERS):
        return torch.device("cuda", 0)
    gpus = "GPU" if count == 1 else "GPUs"
    raise ValueError(
        f"device: LOCAL_WORLD_SIZE={local_world_size} processes on this node "
        f"(this one LOCAL_RANK={local_rank}), but torch sees {count} {gpus}, and NCCL "
        f"needs a GPU of its own for each: start one process per GPU (--nproc-per-node "
        f"{count}), show each process its own GPU (CUDA_VISIBLE_DEVICES per process, as "
        f"srun --gpus-per-task=1 does), or pass device=torch.device('cpu') to run on gloo"
    )


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
    options = _c10d.backend_options(leading_backend(backend), timeout, high_priority)
    init = partial(
        dist.init_process_group,
        backend,
        init_method=None if store is not None else init_method,
        store=store,
        timeout=timeout,
        rank=rank,
        world_size=world_size,
        pg_options=options,
        # bound to this process's device (torch 2.15's "nccl" binds one itself otherwise)
        device_id=device if device.type == "cuda" else None,
    )
    try:
        if device.type == "cuda":
            init()  # on this thread: the device set above is this thread's
        else:
            _within(timeout.total_seconds(), init)
    except (RuntimeError, ValueError, TimeoutError) as ex:
        what = f"the default process group ({backend}) failed to start"
        channel = faults.channel()
        if channel is None:
            why = faults.summary(ex, timeout.total_seconds())
            raise GangError(f"{what}: {why}") from ex
        everyone = list(range(channel.world_size))
        raise faults.gang_error(what, everyone, channel.rank, timeout, ex) from ex
    log.info("Root gang up: %s, rank %d of %d", backend, dist.get_rank(), dist.get_world_size())
    return running()


def _within(bound: float, init: Callable[[], None]) -> None:
    """Run ``init`` on a thread of its own and wait for it ``bound`` seconds at most: gloo's
    connect was seen to take several times its timeout where a peer died midway through it.
    Past the bound the thread is left behind, blocked in torch (the process is failing).

    :raises TimeoutError: ``init`` did not end within ``bound`` seconds.
    """
    failed: list[BaseException] = []

    def run() -> None:
        try:
            init()
        except BaseException as ex:  # handed to the caller's thread
            failed.append(ex)

    thread = threading.Thread(target=run, name="gangmesh-start", daemon=True)
    thread.start()
    thread.join(bound)
    if thread.is_alive():
        raise TimeoutError(f"the group did not start within its timeout, {bound:g} s")
    if failed:
        raise failed[0]


def running() -> ProcessGroup:
    """The default process group.

    :raises RuntimeError: torch.distributed is not initialised.
    """
    world = dist.group.WORLD if dist.is_available() and dist.is_initialized() else None
    if not isinstance(world, ProcessGroup):
        raise RuntimeError("torch.distributed is not initialised; start it with setup_root_gang()")
    return world


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
