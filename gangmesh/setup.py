"""Turn the launcher's environment (torchrun, SLURM, none) into the root gang."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

from gangmesh.fake_gang import FakeGang
from gangmesh.gang import Gang
from gangmesh.process_group_gang import ProcessGroupGang, backend_for

log = logging.getLogger("gangmesh")


@dataclass(frozen=True)
class LaunchEnvironment:
    """Where this process stands in the job, as its launcher described it."""

    launcher: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int

    @property
    def init_method(self) -> str:
        """The TCP rendezvous address of rank 0."""
        return f"tcp://{self.master_addr}:{self.master_port}"


def read_launch_environment(env: Mapping[str, str] | None = None) -> LaunchEnvironment | None:
    """Read torchrun's or SLURM's variables; None when neither describes a job.

    torchrun's variables (WORLD_SIZE, RANK, ...) win over SLURM's. Raises
    ValueError naming the variable when they are inconsistent: RANK without
    WORLD_SIZE, a rank outside the world, a value that is not an integer.
    """
    env = os.environ if env is None else env
    if "RANK" in env or "WORLD_SIZE" in env:
        return _read_torchrun(env)
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return _read_slurm(env)
    return None


def _read_torchrun(env: Mapping[str, str]) -> LaunchEnvironment:
    for name in ("RANK", "WORLD_SIZE"):
        if name not in env:
            other = "WORLD_SIZE" if name == "RANK" else "RANK"
            raise ValueError(f"{name}: not set, but {other} is; set both or neither")
    world_size = _int_var(env, "WORLD_SIZE", minimum=1)
    rank = _rank_var(env, "RANK", world_size)
    local_world_size = _int_var(env, "LOCAL_WORLD_SIZE", minimum=1, default=world_size)
    local_rank = _rank_var(env, "LOCAL_RANK", local_world_size, default=rank % local_world_size)
    master_addr = env.get("MASTER_ADDR", "")
    if world_size > 1 and not master_addr:
        raise ValueError("MASTER_ADDR: not set; expected the address of rank 0 for WORLD_SIZE > 1")
    master_port = _int_var(env, "MASTER_PORT", minimum=1, default=29500)
    return LaunchEnvironment(
        "torchrun", rank, world_size, local_rank, local_world_size, master_addr, master_port
    )


def _read_slurm(env: Mapping[str, str]) -> LaunchEnvironment:
    world_size = _int_var(env, "SLURM_NTASKS", minimum=1)
    rank = _rank_var(env, "SLURM_PROCID", world_size)
    per_node = env.get("SLURM_NTASKS_PER_NODE", "")
    local_world_size = _tasks_per_node(per_node) if per_node else world_size
    local_rank = _rank_var(env, "SLURM_LOCALID", local_world_size, default=rank % local_world_size)
    nodes = (
        env.get("SLURM_STEP_NODELIST")
        or env.get("SLURM_JOB_NODELIST")
        or env.get("SLURM_NODELIST", "")
    )
    master_addr = env.get("MASTER_ADDR") or (first_host(nodes) if nodes else "127.0.0.1")
    job_id = _int_var(env, "SLURM_JOB_ID", minimum=0, default=0)
    master_port = _int_var(env, "MASTER_PORT", minimum=1, default=20000 + job_id % 10000)
    return LaunchEnvironment(
        "slurm", rank, world_size, local_rank, local_world_size, master_addr, master_port
    )


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``"gpu[007-009,012],cpu1"`` -> ``"gpu007"``."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if match is None:
        raise ValueError(f"SLURM_JOB_NODELIST: expected a SLURM node list, got {nodelist!r}")
    prefix, ranges = match.groups()
    if ranges is None:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _tasks_per_node(value: str) -> int:
    """SLURM_NTASKS_PER_NODE of the first node: ``"4(x2),3"`` -> 4."""
    first = value.split(",")[0].split("(")[0]
    if not first.isdigit() or int(first) < 1:
        raise ValueError(
            f"SLURM_NTASKS_PER_NODE: expected a task count such as 4 or 4(x2), got {value!r}"
        )
    return int(first)


def _int_var(env: Mapping[str, str], name: str, *, minimum: int, default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        if default is None:
            raise ValueError(f"{name}: not set; expected an integer >= {minimum}")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value}")
    return value


def _rank_var(env: Mapping[str, str], name: str, size: int, default: int | None = None) -> int:
    value = _int_var(env, name, minimum=0, default=default)
    if value >= size:
        raise ValueError(f"{name}: expected a rank in [0, {size}), got {value}")
    return value


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
