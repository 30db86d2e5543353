"""fairseq2's gang names, served by gangmesh.

Code written for fairseq2 0.8.1's ``fairseq2.gang`` runs on gangmesh when it imports these
names from here instead::

    from gangmesh.compat.fairseq2 import ProcessGroupGang, ReduceOperation, create_parallel_gangs

The names are gangmesh's own classes and functions, so the behaviour is gangmesh's: a
``source_rank`` is a rank inside the gang on every gang, ``create_gang`` works on any gang,
and ``create_fsdp_gangs`` splits data parallelism for HSDP with any tensor parallel size,
on gloo too. ``Device`` is ``torch.device``. The names of older fairseq2 releases
(``setup_root_gang``, ``setup_parallel_gangs``, ``setup_hybrid_fsdp_gangs``,
``setup_default_gang``) are here as well.
"""

from torch import device as Device

from gangmesh.aliases import setup_default_gang, setup_hybrid_fsdp_gangs, setup_parallel_gangs
from gangmesh.current import maybe_get_current_gangs
from gangmesh.factories import create_fake_gangs, create_fsdp_gangs, create_parallel_gangs
from gangmesh.fake_gang import FakeGang
from gangmesh.gang import Gang, GangError, ReduceOperation
from gangmesh.gangs import Gangs
from gangmesh.ops import all_sum, broadcast_flag
from gangmesh.process_group_gang import ProcessGroupGang
from gangmesh.setup import setup_root_gang

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
    "maybe_get_current_gangs",
    "setup_default_gang",
    "setup_hybrid_fsdp_gangs",
    "setup_parallel_gangs",
    "setup_root_gang",
]
