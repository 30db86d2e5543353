"""gangmesh: typed collective-communication gangs over PyTorch DeviceMesh dimensions.

Names load on first use, so that ``import gangmesh.plan.topology`` and ``gangmesh plan``
never import torch.

PYTEST_DONT_REWRITE: this module holds no asserts for pytest to rewrite; the ranks of a
test world find it imported before pytest's import hook, where pytest would warn.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

from gangmesh import _moved

_moved.install()

# The public names, each where it is defined. Type checkers read these imports; at run
# time nothing is imported here, and a name loads on first use from _EXPORTS below, which
# names the same (a unit test compares the two). The table is plain data, so the package
# imports from a zip or without its source too.
if TYPE_CHECKING:
    from gangmesh import testing as testing
    from gangmesh.assembly.aliases import setup_default_gang as setup_default_gang
    from gangmesh.assembly.aliases import setup_hybrid_fsdp_gangs as setup_hybrid_fsdp_gangs
    from gangmesh.assembly.aliases import setup_parallel_gangs as setup_parallel_gangs
    from gangmesh.assembly.current import maybe_get_current_gangs as maybe_get_current_gangs
    from gangmesh.assembly.factories import create_fake_gangs as create_fake_gangs
    from gangmesh.assembly.factories import create_fsdp_gangs as create_fsdp_gangs
    from gangmesh.assembly.factories import create_gangs as create_gangs
    from gangmesh.assembly.factories import create_parallel_gangs as create_parallel_gangs
    from gangmesh.assembly.gangs import Gangs as Gangs
    from gangmesh.assembly.join import join_jobs as join_jobs
    from gangmesh.assembly.join_server import JoinServer as JoinServer
    from gangmesh.assembly.join_server import serve_join as serve_join
    from gangmesh.assembly.joined import JoinedJobs as JoinedJobs
    from gangmesh.assembly.parts import Parts as Parts
    from gangmesh.assembly.parts import create_parts as create_parts
    from gangmesh.assembly.record import read_layout_record as read_layout_record
    from gangmesh.assembly.replicas import Replicas as Replicas
    from gangmesh.assembly.replicas import join_replicas as join_replicas
    from gangmesh.assembly.setup import setup_root_gang as setup_root_gang
    from gangmesh.plan._checks import InvalidTypeError as InvalidTypeError
    from gangmesh.plan.cluster import Cluster as Cluster
    from gangmesh.plan.cluster import Site as Site
    from gangmesh.plan.locality import LocalityFinding as LocalityFinding
    from gangmesh.plan.shards import TensorShards as TensorShards
    from gangmesh.plan.topology import DENSE_DIMS as DENSE_DIMS
    from gangmesh.plan.topology import DIM_NAMES as DIM_NAMES
    from gangmesh.plan.topology import EXPERT_DIMS as EXPERT_DIMS
    from gangmesh.plan.topology import MeshTopology as MeshTopology
    from gangmesh.runtime.communicators import CommunicatorInfo as CommunicatorInfo
    from gangmesh.runtime.fake_gang import FakeGang as FakeGang
    from gangmesh.runtime.gang import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
    from gangmesh.runtime.gang import Gang as Gang
    from gangmesh.runtime.gang import GangError as GangError
    from gangmesh.runtime.gang import ReduceOperation as ReduceOperation
    from gangmesh.runtime.managed_gang import ManagedGang as ManagedGang
    from gangmesh.runtime.ops import all_gather_objects as all_gather_objects
    from gangmesh.runtime.ops import all_reduce_dict as all_reduce_dict
    from gangmesh.runtime.ops import all_sum as all_sum
    from gangmesh.runtime.ops import broadcast_flag as broadcast_flag
    from gangmesh.runtime.process_group_gang import ProcessGroupGang as ProcessGroupGang
    from gangmesh.tools.lighthouse import Lighthouse as Lighthouse
    from gangmesh.tools.lighthouse import start_lighthouse as start_lighthouse


_EXPORTS: dict[str, tuple[str, ...]] = {
    "gangmesh": ("testing",),
    "gangmesh.plan._checks": ("InvalidTypeError",),
    "gangmesh.assembly.aliases": (
        "setup_default_gang",
        "setup_hybrid_fsdp_gangs",
        "setup_parallel_gangs",
    ),
    "gangmesh.plan.cluster": ("Cluster", "Site"),
    "gangmesh.runtime.communicators": ("CommunicatorInfo",),
    "gangmesh.assembly.current": ("maybe_get_current_gangs",),
    "gangmesh.assembly.factories": (
        "create_fake_gangs",
        "create_fsdp_gangs",
        "create_gangs",
        "create_parallel_gangs",
    ),
    "gangmesh.runtime.fake_gang": ("FakeGang",),
    "gangmesh.runtime.gang": ("DEFAULT_TIMEOUT", "Gang", "GangError", "ReduceOperation"),
    "gangmesh.assembly.gangs": ("Gangs",),
    "gangmesh.assembly.join": ("join_jobs",),
    "gangmesh.assembly.join_server": ("JoinServer", "serve_join"),
    "gangmesh.assembly.joined": ("JoinedJobs",),
    "gangmesh.assembly.parts": ("Parts", "create_parts"),
    "gangmesh.plan.locality": ("LocalityFinding",),
    "gangmesh.plan.shards": ("TensorShards",),
    "gangmesh.runtime.ops": ("all_gather_objects", "all_reduce_dict", "all_sum", "broadcast_flag"),
    "gangmesh.runtime.process_group_gang": ("ProcessGroupGang",),
    "gangmesh.assembly.record": ("read_layout_record",),
    "gangmesh.assembly.replicas": ("Replicas", "join_replicas"),
    "gangmesh.runtime.managed_gang": ("ManagedGang",),
    "gangmesh.tools.lighthouse": ("Lighthouse", "start_lighthouse"),
    "gangmesh.assembly.setup": ("setup_root_gang",),
    "gangmesh.plan.topology": ("DENSE_DIMS", "DIM_NAMES", "EXPERT_DIMS", "MeshTopology"),
}


@functools.cache
def _exports() -> dict[str, str]:
    """Public name -> the module it is imported from."""
    return {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    if name == "__all__":  # read on first use too: ``import gangmesh`` stays cheap
        return sorted(_exports())
    module = _exports().get(name)
    if module is None and name in _moved.MOVED:  # a module by its old path: gm.topology
        return importlib.import_module(f"{__name__}.{name}")
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
