"""gangmesh: typed collective-communication gangs over PyTorch DeviceMesh dimensions.

Names load on first use, so that ``import gangmesh.topology`` and ``gangmesh plan``
never import torch.

PYTEST_DONT_REWRITE: this module holds no asserts for pytest to rewrite; the ranks of a
test world find it imported before pytest's import hook, where pytest would warn.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# The public names, each where it is defined. Type checkers read these imports; at run
# time nothing is imported here, and a name loads on first use from _EXPORTS below, which
# names the same (a unit test compares the two). The table is plain data, so the package
# imports from a zip or without its source too.
if TYPE_CHECKING:
    from gangmesh import testing as testing
    from gangmesh._checks import InvalidTypeError as InvalidTypeError
    from gangmesh.aliases import setup_default_gang as setup_default_gang
    from gangmesh.aliases import setup_hybrid_fsdp_gangs as setup_hybrid_fsdp_gangs
    from gangmesh.aliases import setup_parallel_gangs as setup_parallel_gangs
    from gangmesh.cluster import Cluster as Cluster
    from gangmesh.cluster import Site as Site
    from gangmesh.communicators import CommunicatorInfo as CommunicatorInfo
    from gangmesh.current import maybe_get_current_gangs as maybe_get_current_gangs
    from gangmesh.factories import create_fake_gangs as create_fake_gangs
    from gangmesh.factories import create_fsdp_gangs as create_fsdp_gangs
    from gangmesh.factories import create_gangs as create_gangs
    from gangmesh.factories import create_parallel_gangs as create_parallel_gangs
    from gangmesh.fake_gang import FakeGang as FakeGang
    from gangmesh.gang import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
    from gangmesh.gang import Gang as Gang
    from gangmesh.gang import GangError as GangError
    from gangmesh.gang import ReduceOperation as ReduceOperation
    from gangmesh.gangs import Gangs as Gangs
    from gangmesh.locality import LocalityFinding as LocalityFinding
    from gangmesh.ops import all_gather_objects as all_gather_objects
    from gangmesh.ops import all_reduce_dict as all_reduce_dict
    from gangmesh.ops import all_sum as all_sum
    from gangmesh.ops import broadcast_flag as broadcast_flag
    from gangmesh.process_group_gang import ProcessGroupGang as ProcessGroupGang
    from gangmesh.record import read_layout_record as read_layout_record
    from gangmesh.setup import setup_root_gang as setup_root_gang
    from gangmesh.topology import DENSE_DIMS as DENSE_DIMS
    from gangmesh.topology import DIM_NAMES as DIM_NAMES
    from gangmesh.topology import EXPERT_DIMS as EXPERT_DIMS
    from gangmesh.topology import MeshTopology as MeshTopology


_EXPORTS: dict[str, tuple[str, ...]] = {
    "gangmesh": ("testing",),
    "gangmesh._checks": ("InvalidTypeError",),
    "gangmesh.aliases": ("setup_default_gang", "setup_hybrid_fsdp_gangs", "setup_parallel_gangs"),
    "gangmesh.cluster": ("Cluster", "Site"),
    "gangmesh.communicators": ("CommunicatorInfo",),
    "gangmesh.current": ("maybe_get_current_gangs",),
    "gangmesh.factories": (
        "create_fake_gangs",
        "create_fsdp_gangs",
        "create_gangs",
        "create_parallel_gangs",
    ),
    "gangmesh.fake_gang": ("FakeGang",),
    "gangmesh.gang": ("DEFAULT_TIMEOUT", "Gang", "GangError", "ReduceOperation"),
    "gangmesh.gangs": ("Gangs",),
    "gangmesh.locality": ("LocalityFinding",),
    "gangmesh.ops": ("all_gather_objects", "all_reduce_dict", "all_sum", "broadcast_flag"),
    "gangmesh.process_group_gang": ("ProcessGroupGang",),
    "gangmesh.record": ("read_layout_record",),
    "gangmesh.setup": ("setup_root_gang",),
    "gangmesh.topology": ("DENSE_DIMS", "DIM_NAMES", "EXPERT_DIMS", "MeshTopology"),
}


@functools.cache
def _exports() -> dict[str, str]:
    """Public name -> the module it is imported from."""
    return {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    if name == "__all__":  # read on first use too: ``import gangmesh`` stays cheap
        return sorted(_exports())
    module = _exports().get(name)
    if module is None:
        raise AttributeError(f"module 'gangmesh' has no attribute {name!r}")
    if module == __name__:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_exports()})
