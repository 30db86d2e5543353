"""gangmesh: typed collective-communication gangs over PyTorch DeviceMesh dimensions.

Names load on first use, so that ``import gangmesh.topology`` and ``gangmesh plan``
never import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_EXPORTS: dict[str, str] = {
    "DEFAULT_TIMEOUT": "gangmesh.gang",
    "Gang": "gangmesh.gang",
    "GangError": "gangmesh.gang",
    "ReduceOperation": "gangmesh.gang",
    "FakeGang": "gangmesh.fake_gang",
    "ProcessGroupGang": "gangmesh.process_group_gang",
    "InvalidTypeError": "gangmesh._checks",
    "CommunicatorInfo": "gangmesh.communicators",
    "Gangs": "gangmesh.gangs",
    "create_fake_gangs": "gangmesh.gangs",
    "create_fsdp_gangs": "gangmesh.gangs",
    "create_gangs": "gangmesh.gangs",
    "create_parallel_gangs": "gangmesh.gangs",
    "maybe_get_current_gangs": "gangmesh.gangs",
    "setup_hybrid_fsdp_gangs": "gangmesh.gangs",
    "setup_parallel_gangs": "gangmesh.gangs",
    "all_gather_objects": "gangmesh.ops",
    "all_reduce_dict": "gangmesh.ops",
    "all_sum": "gangmesh.ops",
    "broadcast_flag": "gangmesh.ops",
    "setup_default_gang": "gangmesh.setup",
    "setup_root_gang": "gangmesh.setup",
    "DENSE_DIMS": "gangmesh.topology",
    "DIM_NAMES": "gangmesh.topology",
    "EXPERT_DIMS": "gangmesh.topology",
    "MeshTopology": "gangmesh.topology",
    "LocalityFinding": "gangmesh.locality",
}

__all__ = [
    "DEFAULT_TIMEOUT",
    "DENSE_DIMS",
    "DIM_NAMES",
    "EXPERT_DIMS",
    "CommunicatorInfo",
    "FakeGang",
    "Gang",
    "GangError",
    "Gangs",
    "InvalidTypeError",
    "LocalityFinding",
    "MeshTopology",
    "ProcessGroupGang",
    "ReduceOperation",
    "all_gather_objects",
    "all_reduce_dict",
    "all_sum",
    "broadcast_flag",
    "create_fake_gangs",
    "create_fsdp_gangs",
    "create_gangs",
    "create_parallel_gangs",
    "maybe_get_current_gangs",
    "setup_default_gang",
    "setup_hybrid_fsdp_gangs",
    "setup_parallel_gangs",
    "setup_root_gang",
    "testing",
]

if TYPE_CHECKING:
    from gangmesh import testing
    from gangmesh._checks import InvalidTypeError
    from gangmesh.communicators import CommunicatorInfo
    from gangmesh.fake_gang import FakeGang
    from gangmesh.gang import DEFAULT_TIMEOUT, Gang, GangError, ReduceOperation
    from gangmesh.gangs import (
        Gangs,
        create_fake_gangs,
        create_fsdp_gangs,
        create_gangs,
        create_parallel_gangs,
        maybe_get_current_gangs,
        setup_hybrid_fsdp_gangs,
        setup_parallel_gangs,
    )
    from gangmesh.locality import LocalityFinding
    from gangmesh.ops import all_gather_objects, all_reduce_dict, all_sum, broadcast_flag
    from gangmesh.process_group_gang import ProcessGroupGang
    from gangmesh.setup import setup_default_gang, setup_root_gang
    from gangmesh.topology import DENSE_DIMS, DIM_NAMES, EXPERT_DIMS, MeshTopology


def __getattr__(name: str) -> Any:
    if name == "testing":
        return importlib.import_module("gangmesh.testing")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gangmesh' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
