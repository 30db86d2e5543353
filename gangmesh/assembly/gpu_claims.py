"""One GPU per process of a host: each process says in the job's store which GPU it took, and
setup refuses, before NCCL starts, where two processes of one host took the same.

A process cannot tell from its own environment alone whether the one GPU it sees is its own
(``srun --gpus-per-task=1``, a container's device plugin) or the one GPU every process of the
node sees (``torchrun --nproc-per-node 4`` on a one-GPU machine): the GPU's UUID, compared
between the processes of a host, tells. ``NCCL_HOSTID`` counts as the host where it is set, as
NCCL itself counts it (several ranks on one GPU, each its own NCCL host, are allowed).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import torch

_PREFIX = "gpus"


def gpu_identity(device: torch.device) -> str | None:
    """The UUID of the GPU ``device`` is; None for a cpu device or where torch does not tell."""
    if device.type != "cuda":
        return None
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    return None if uuid is None else str(uuid)


def claim(store: Any, device: torch.device, rank: int) -> str | None:
    """Say in ``store`` that global rank ``rank`` takes ``device``; the claim's key, to check
    once every process has claimed its own (None where there is nothing to claim)."""
    identity = gpu_identity(device)
    if identity is None:
        return None
    host = os.environ.get("NCCL_HOSTID") or socket.gethostname()
    key = f"{_PREFIX}/{host}/{identity}"
    store.append(key, f"{rank},")
    return key


def check(store: Any, key: str | None, device: torch.device) -> None:
    """Refuse a GPU that another process of this host claimed too (see :func:`claim`).

    :raises ValueError: two or more processes of this host took the GPU of ``device``.
    """
    if key is None:
        return
    ranks = [int(r) for r in bytes(store.get(key)).decode().split(",") if r]
    if len(ranks) < 2:
        return
    host, identity = key.split("/")[1:3]
    raise ValueError(
        f"device: {device} is GPU {identity} of host {host} for global ranks {sorted(ranks)}, "
        "and NCCL needs a GPU of its own for each process: start one process per GPU, show "
        "each process its own GPU (CUDA_VISIBLE_DEVICES per process, as srun "
        "--gpus-per-task=1 does), or pass device=torch.device('cpu') to run on gloo"
    )
