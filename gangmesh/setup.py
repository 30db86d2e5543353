"""Turn the launcher's environment (torchrun, SLURM, none) into the root gang."""

from __future__ import annotations

import logging
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

from gangmesh.environment import read_launch_environment
from gangmesh.fake_gang import FakeGang
from gangmesh.gang import Gang
from gangmesh.process_group_gang import ProcessGroupGang, backend_for

log = logging.getLogger("gangmesh")


def default_device(local_rank: int = 0) -> torch.device:
    """cuda:LOCAL_RANK when CUDA is available, else cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def setup_root_gang(
    device: torch.device | None = None,
    *,
    timeout: timedelta | None = None,
    monitored: bool = False,
    high_priority: bool = False,
) -> Gang:
    """The gang of every process of the job.

    Wraps torch's default process group when it is already initialised;
    otherwise starts it from torchrun's or SLURM's environment (gloo on CPU,
    NCCL on CUDA). Without a distributed environment, or in a world of one,
    returns a FakeGang. ``timeout`` (default 15 minutes) reaches every group
    gangmesh creates later from this gang. ``monitored`` makes ``barrier()``
    name the ranks that did not arrive.

    Raises ValueError for an inconsistent environment or an unsupported device,
    GangError if the process group cannot start.
    """
    if device is not None and not isinstance(device, torch.device):
        raise TypeError(f"device: expected a torch.device or None, got {device!r}")
    if timeout is not None and not (isinstance(timeout, timedelta) and timeout > timedelta(0)):
        raise ValueError(f"timeout: expected a positive datetime.timedelta, got {timeout!r}")
    if dist.is_available() and dist.is_initialized():
        return _wrap_default_group(device, timeout, monitored, high_priority)
    env = read_launch_environment()
    device = device or default_device(env.local_rank if env else 0)
    backend_for(device)  # validates the device type before anything starts
    if env is None or env.world_size == 1:
        log.info("No distributed environment: using a FakeGang on %s", device)
        return FakeGang(device)
    log.info("Starting rank %d of %d (%s)", env.rank, env.world_size, env.launcher)
    return ProcessGroupGang.create_default_process_group(
        device,
        timeout=timeout,
        high_priority=high_priority,
        monitored=monitored,
        init_method=env.init_method,
        rank=env.rank,
        world_size=env.world_size,
    )


def _wrap_default_group(
    device: torch.device | None, timeout: timedelta | None, monitored: bool, high_priority: bool
) -> ProcessGroupGang:
    world = dist.group.WORLD
    assert isinstance(world, ProcessGroup)
    if device is None:
        if dist.get_backend(world) == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        else:
            device = torch.device("cpu")
    return ProcessGroupGang(
        world,
        device,
        name="root",
        timeout=timeout,
        monitored=monitored,
        high_priority=high_priority,
    )


setup_default_gang = setup_root_gang
