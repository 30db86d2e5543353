"""fairseq2's gang names, served by gangmesh.

Code written for fairseq2 0.8.1's ``fairseq2.gang`` runs on gangmesh when it imports these
names from here instead::

    from gangmesh.compat.fairseq2 import ProcessGroupGang, ReduceOperation, create_parallel_gangs

Every public name of fairseq2 0.8.1's gang module is here, so this module can also answer
for ``fairseq2.gang`` itself, under fairseq2's own library. The names are gangmesh's own
classes and functions, so the behaviour is gangmesh's: a ``source_rank`` is a rank inside
the gang on every gang, ``create_gang`` works on any gang, and ``create_fsdp_gangs`` splits
data parallelism for HSDP with any tensor parallel size, on gloo too. The current gangs of
``get_current_gangs`` and ``set_gangs`` are those of gangmesh's ``with gangs:`` (one stack).
``Device`` is ``torch.device``. The names of older fairseq2 releases (``setup_root_gang``,
``setup_parallel_gangs``, ``setup_hybrid_fsdp_gangs``, ``setup_default_gang``, ``get_rank``,
``get_world_size``, ``get_local_rank``, ``get_local_world_size``,
``ProcessGroupGang.init_default_process_group`` and ``from_default_process_group``) are
here as well. docs/migration.rst lists the differences.
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
from gangmesh.compat.fairseq2.context import (
    GangContext,
    StandardGangContext,
    get_current_gangs,
    get_default_gangs,
    set_default_gangs,
    set_gangs,
)
from gangmesh.compat.fairseq2.errors import OperationalError, raise_operational_gang_error
from gangmesh.compat.fairseq2.launch import (
    get_local_rank,
    get_local_world_size,
    get_rank,
    get_world_size,
)
from gangmesh.runtime.fake_gang import FakeGang
from gangmesh.runtime.gang import Gang, GangError, ReduceOperation
from gangmesh.runtime.ops import all_sum, broadcast_flag
from gangmesh.runtime.process_group_gang import ProcessGroupGang

# fairseq2 0.8.1's composition root registers the standard context under these two names,
# where this module answers for fairseq2.gang.
_StandardGangContext = _GangManager = StandardGangContext

__all__ = [
    "Device",
    "FakeGang",
    "Gang",
    "GangContext",
    "GangError",
    "Gangs",
    "OperationalError",
    "ProcessGroupGang",
    "ReduceOperation",
    "StandardGangContext",
    "all_sum",
    "broadcast_flag",
    "create_fake_gangs",
    "create_fsdp_gangs",
    "create_parallel_gangs",
    "get_current_gangs",
    "get_default_gangs",
    "get_local_rank",
    "get_local_world_size",
    "get_rank",
    "get_world_size",
    "maybe_get_current_gangs",
    "raise_operational_gang_error",
    "set_default_gangs",
    "set_gangs",
    "setup_default_gang",
    "setup_hybrid_fsdp_gangs",
    "setup_parallel_gangs",
    "setup_root_gang",
]
