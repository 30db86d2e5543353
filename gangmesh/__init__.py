"""gangmesh: typed collective-communication gangs over PyTorch DeviceMesh dimensions.

Names load on first use, so that ``import gangmesh.topology`` and ``gangmesh plan``
never import torch.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# The public names, each where it is defined: the one list of them. Type checkers read
# these imports; at run time nothing is imported here, and __all__ and the table that
# loads a name on first use are read from this block when first needed (as
# scientific-python's lazy_loader reads a stub).
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


@functools.cache
def _exports() -> dict[str, str]:
    """Public name -> the module it is imported from, read from the block above."""
    import ast  # only here: reading the names costs nothing until they are used

    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    (block,) = (
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
        if node.test.id == "TYPE_CHECKING"
    )
    return {
        alias.asname or alias.name: str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


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
