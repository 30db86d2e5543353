"""torch.distributed backend strings read: which backend serves which device type."""

from __future__ import annotations


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
