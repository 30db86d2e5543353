"""fairseq2's gang names, served by gangmesh.

Code written for fairseq2 0.8.1's ``fairseq2.gang`` runs on gangmesh when it imports these
names from here instead::

    from gangmesh.compat.fairseq2 import ProcessGroupGang, ReduceOperation, create_parallel_gangs

The names are gangmesh's own classes and functions, so the behaviour is gangmesh's: a
``source_rank`` is a rank inside the gang on every gang, ``create_gang`` works on any gang,
and ``create_fsdp_gangs`` splits data parallelism for HSDP with any tensor parallel size,
on gloo too. ``Device`` is ``torch.device``. The names of older fairseq2 releases
(``setup_root_gang``, ``setup_parallel_gangs``, ``setup_hybrid_fsdp_gangs``,
``setup_default_gang``, ``get_rank``, ``get_world_size``, ``get_local_rank``,
``get_local_world_size``, ``ProcessGroupGang.init_default_process_group`` and
``from_default_process_group``) are here as well. docs/migration.rst lists the names
of fairseq2 0.8.1 that are not.
"""

from torch import device as Device

from gangmesh.assembly.aliases import (
    setup_default_gang,
    setup_hybrid_fsdp_gangs,
    setup_parallel_gangs,
)
from gangmesh.assembly.current import maybe_get_current_gangs
from gangmesh.assembly.factories import create_fake_gangs, create_fsdp_gangs, create_parallel_gangs
from gangmesh.assembly.gangs import Gangs
from gangmesh.assembly.setup import setup_root_gang
from gangmesh.runtime.environment import read_launch_environment
from gangmesh.runtime.fake_gang import FakeGang
from gangmesh.runtime.gang import Gang, GangError, ReduceOperation
from gangmesh.runtime.ops import all_sum, broadcast_flag
from gangmesh.runtime.process_group_gang import ProcessGroupGang

__all__ = [
    "Device",
    "FakeGang",
    "Gang",
    "GangError",
    "Gangs",
    "ProcessGroupGang",
    "ReduceOperation",
    "all_sum",
    "broadcast_flag",
    "create_fake_gangs",
    "create_fsdp_gangs",
    "create_parallel_gangs",
    "get_local_rank",
    "get_local_world_size",
    "get_rank",
    "get_world_size",
    "maybe_get_current_gangs",
    "setup_default_gang",
    "setup_hybrid_fsdp_gangs",
    "setup_parallel_gangs",
    "setup_root_gang",
]


def get_rank() -> int:
    """This process's rank in the job; 0 without a launcher.

    :raises ValueError: the launcher's variables are inconsistent.
    """
    return _launched("rank", 0)


def get_world_size() -> int:
    """The number of processes in the job; 1 without a launcher.

    :raises ValueError: the launcher's variables are inconsistent.
    """
    return _launched("world_size", 1)


def get_local_rank() -> int:
    """This process's rank on its node; 0 without a launcher.

    :raises ValueError: the launcher's variables are inconsistent.
    """
    return _launched("local_rank", 0)


def get_local_world_size() -> int:
    """The number of processes on this node; 1 without a launcher.

    :raises ValueError: the launcher's variables are inconsistent.
    """
    return _launched("local_world_size", 1)


def _launched(field: str, alone: int) -> int:
    """``field`` of the launcher's description of this process (torchrun's, else SLURM's),
    or ``alone`` where no launcher started it."""
    env = read_launch_environment()
    return alone if env is None else int(getattr(env, field))
