"""gangmesh: typed collective-communication gangs over PyTorch DeviceMesh dimensions."""

from gangmesh import testing
from gangmesh.gang import (
    DEFAULT_TIMEOUT,
    FakeGang,
    Gang,
    GangError,
    ProcessGroupGang,
    ReduceOperation,
)
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
from gangmesh.ops import all_gather_objects, all_reduce_dict, all_sum, broadcast_flag
from gangmesh.setup import setup_default_gang, setup_root_gang
from gangmesh.topology import DIM_NAMES, LocalityFinding, MeshTopology

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TIMEOUT",
    "DIM_NAMES",
    "FakeGang",
    "Gang",
    "GangError",
    "Gangs",
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
