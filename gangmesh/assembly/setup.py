"""Turn the launcher's environment (torchrun, SLURM, none) into the root gang."""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from gangmesh.assembly import gpu_claims
from gangmesh.assembly.agreement import disagreement
from gangmesh.assembly.rendezvous import job_store, meet, started_with, unannounced
from gangmesh.plan._checks import InvalidTypeError, check_flag, check_timeout
from gangmesh.runtime import faults
from gangmesh.runtime._validate import check_cuda_device
from gangmesh.runtime.default_group import backend_for, default_device
from gangmesh.runtime.environment import LaunchEnvironment, read_launch_environment
from gangmesh.runtime.gang import DEFAULT_TIMEOUT, Gang, GangError
from gangmesh.runtime.process_group_gang import ProcessGroupGang

if TYPE_CHECKING:
    from torch._C._distributed_c10d import Store

log = logging.getLogger("gangmesh")


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
    NCCL on CUDA), after every process has arrived (the ones that do not are
    named when ``timeout`` expires). Each setup of the job (a torchrun restart
    attempt, a setup after ``close()``) meets in a namespace of its own, so keys
    an earlier attempt left in torchrun's store are never read. Without a
    distributed environment it starts a world of one process (said once at
    WARNING level), so that meshes, FSDP2 and tensor parallelism run unchanged.
    ``timeout`` (default 15 minutes) bounds every wait, and reaches every group
    gangmesh creates later from this gang. ``monitored`` makes ``barrier()``
    name the ranks that did not arrive.

    :param device: this process's device; default: ``cuda:LOCAL_RANK`` where torch sees a
        GPU for each process of the node, ``cuda:0`` where the launcher showed each process
        its own GPUs (``CUDA_VISIBLE_DEVICES``), else ``cpu`` (for a default group already
        started: its backend's).
    :param timeout: bound of every wait, here and in the groups made later.
    :param monitored: whether barriers name the ranks that did not arrive.
    :param high_priority: whether NCCL uses high-priority streams.
    :raises ValueError: an inconsistent environment, an unsupported device, more processes
        on the node than GPUs where the device is left to the default, two processes of a
        host on one GPU (before NCCL starts), or processes that asked for different timeouts
        or devices.
    :raises GangError: the store or the process group cannot start in time.
    """
    if device is not None and not isinstance(device, torch.device):
        raise InvalidTypeError(f"device: expected a torch.device or None, got {device!r}")
    if device is not None and device.type == "cuda":
        check_cuda_device(device)
    check_flag("monitored", monitored)
    check_flag("high_priority", high_priority)
    timeout = check_timeout(timeout)
    if dist.is_available() and dist.is_initialized():
        return ProcessGroupGang.from_default_process_group(
            device, timeout=timeout, monitored=monitored, high_priority=high_priority
        )
    env = read_launch_environment()
    place = (env.local_rank, env.local_world_size) if env else (0, 1)
    device = device or default_device(*place)
    backend = backend_for(device)  # validates the device type before anything starts
    timeout = timeout or DEFAULT_TIMEOUT
    if env is None or env.world_size == 1:
        _say_alone_once(env)
        store: Store = dist.HashStore()  # type: ignore[attr-defined]
        rank, world_size = 0, 1
    else:
        log.info("Starting rank %d of %d (%s)", env.rank, env.world_size, env.launcher)
        faults.install_stop_notice()  # stopped by the launcher from here on, it says so
        deadline = time.monotonic() + timeout.total_seconds()
        rank, world_size = env.rank, env.world_size
        request = {"backend": backend, "timeout_s": timeout.total_seconds()}
        meeting = partial(meet, topic="setup_root_gang", rank=rank, world_size=world_size,
                          request=request, timeout=timeout)  # fmt: skip

        claimed: list[str | None] = []

        def arrive(store: Store) -> None:
            faults.open_reports(None, timeout)  # a rank that breaks from here on is named
            claimed.append(gpu_claims.claim(store, device, rank))
            meeting(store, wait=False)

        store = job_store(env, timeout, arrive)
        left = timedelta(seconds=max(0.001, deadline - time.monotonic()))
        try:
            differing = meeting(store, arrived=True, left=left)
        except GangError as ex:
            raise unannounced(env, timeout, ex) from ex
        if differing is not None:
            raise ValueError(f"setup_root_gang: {disagreement(differing)}")
        gpu_claims.check(store, claimed[0], device)  # every process has claimed its GPU
    root = ProcessGroupGang.create_default_process_group(
        device,
        timeout=timeout,
        high_priority=high_priority,
        monitored=monitored,
        store=store,
        rank=rank,
        world_size=world_size,
    )
    started_with(store)
    return root


_said_alone = False


def _say_alone_once(env: LaunchEnvironment | None) -> None:
    global _said_alone
    if not _said_alone:
        how = "torchrun started one process" if env else "no torchrun or SLURM environment"
        log.warning(
            "%s: running as a job of one process; run it under torchrun --nproc-per-node N "
            "(or srun) for more",
            how,
        )
        _said_alone = True
