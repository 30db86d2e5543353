"""The dimensions of a layout, declared once: their names and every fact about each.

:class:`Dim` names every dimension a plan has: the dense ones (pp, dp_replicate,
dp_shard, cp, tp), the expert ones (efsdp, ep, etp) and the flattened ones (dp,
dp_shard_cp, dp_cp, edp). It is a ``str`` enum: each member equals, hashes and prints
as its name, so plain strings stay accepted wherever a dimension is asked for.
:data:`FACTS` holds what the planner, the locality check, the pictures, the command
line and the gangs know about each one; the tuples below it are derived from it.

This module imports nothing of gangmesh, numpy or torch.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from typing_extensions import override


class Dim(str, enum.Enum):
    """A dimension name; equal to (and printed as) the plain string it stands for."""

    PP = "pp"
    DP_REPLICATE = "dp_replicate"
    DP_SHARD = "dp_shard"
    CP = "cp"
    TP = "tp"
    EFSDP = "efsdp"
    EP = "ep"
    ETP = "etp"
    DP = "dp"
    DP_SHARD_CP = "dp_shard_cp"
    DP_CP = "dp_cp"
    EDP = "edp"

    @override
    def __str__(self) -> str:
        return str(self.value)

    @override
    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @override
    def __repr__(self) -> str:
        return repr(self.value)


ViewKind = Literal["dense", "expert", "shared"]
"""Where a dimension lives: the dense view, the expert view, or both (the same ranks)."""

NodeCheck = Literal["always", "with_replicas", "meant_to_cross", "never"]
"""How the locality check treats a dimension's groups: checked whenever the size is
above 1, checked only with HSDP replicas (dp_replicate > 1; otherwise reported as meant
to cross), reported as meant to cross nodes, or not reported at all."""


@dataclass(frozen=True)
class DimFacts:
    """What gangmesh knows about one dimension."""

    view: ViewKind
    """The view the dimension's groups are laid out in."""
    description: str
    """One line for people (the panels of the picture, the docs)."""
    member: str = "rank"
    """What one member of a group is called ("stage" for a pipeline)."""
    members: tuple[Dim, ...] = ()
    """The mesh dimensions a flattened dimension takes together, outermost first; empty
    for a dimension of the mesh itself."""
    traffic: str = ""
    """What its groups carry, for the locality advice ("... strides across nodes")."""
    locality: int | None = None
    """Priority to stay on one node (0 first); None: no claim on a node."""
    node_check: NodeCheck = "never"
    """How the locality check treats its groups."""
    spreads: bool = False
    """May span nodes when larger than the room a node leaves it."""
    relief: Dim | None = None
    """The dimension to raise when this one is lowered to fit a node (keeping the world)."""
    default: int | None = None
    """Default of the size a layout asks for; None: not a size a layout asks for."""
    help: str = ""
    """Help of its command-line option (sizes asked for only)."""
    fairseq2: str | None = None
    """fairseq2's name of the gang (the Gangs field), where it differs."""
    torchtitan: str | None = None
    """torchtitan's name of the mesh that merges a flattened dimension, where it has one, and
    of that dimension in it."""
    megatron: str | None = None
    """How Megatron-Core's order strings name it (dense dimensions only)."""
    listed: tuple[Dim, ...] | None = None
    """Whether the table and JSON of a plan list it: None never; else when each of these
    dimensions has a size above 1 (empty: always)."""

    @property
    def short(self) -> str:
        """What it is in a few words: its description up to a colon or a parenthesis."""
        return self.description.split(" (", 1)[0].split(": ", 1)[0]

    @property
    def expert(self) -> bool:
        """Whether its groups live in the expert view only."""
        return self.view == "expert"


FACTS: dict[Dim, DimFacts] = {
    Dim.PP: DimFacts(
        "shared",
        "pipeline parallel: a group is one pipeline, one rank per stage",
        member="stage",
        traffic="pipeline activations",
        node_check="meant_to_cross",
        default=1,
        help="pipeline parallel size",
        megatron="pp",
        listed=(),
    ),
    Dim.DP_REPLICATE: DimFacts(
        "shared",
        "replicated data parallel (HSDP replicas)",
        traffic="gradient all-reduce traffic",
        node_check="meant_to_cross",
        default=1,
        help="replicated data parallel size",
        fairseq2="rdp",
        megatron="dp",
        listed=(),
    ),
    Dim.DP_SHARD: DimFacts(
        "dense",
        "sharded data parallel (FSDP shards)",
        traffic="FSDP all-gather and reduce-scatter traffic",
        locality=4,
        node_check="with_replicas",
        relief=Dim.DP_REPLICATE,
        default=-1,
        help="sharded data parallel size",
        fairseq2="sdp",
        megatron="dp",
        listed=(),
    ),
    Dim.CP: DimFacts(
        "dense",
        "context parallel",
        traffic="context-parallel traffic",
        locality=2,
        node_check="always",
        spreads=True,
        default=1,
        help="context parallel size",
        megatron="cp",
        listed=(),
    ),
    Dim.TP: DimFacts(
        "dense",
        "tensor parallel",
        traffic="tensor-parallel traffic (every layer)",
        locality=0,
        node_check="always",
        default=1,
        help="tensor parallel size",
        megatron="tp",
        listed=(),
    ),
    Dim.EFSDP: DimFacts(
        "expert",
        "expert weight sharding (expert view)",
        traffic="expert FSDP traffic",
        locality=5,
        node_check="meant_to_cross",
        listed=(),
    ),
    Dim.EP: DimFacts(
        "expert",
        "expert parallel (expert view)",
        traffic="expert all-to-all traffic",
        locality=3,
        node_check="always",
        spreads=True,
        default=1,
        help="expert parallel size",
        listed=(),
    ),
    Dim.ETP: DimFacts(
        "expert",
        "expert tensor parallel (expert view)",
        traffic="expert tensor-parallel traffic",
        locality=1,
        default=1,
        help="expert tensor parallel size: 1 or tp",
        listed=(),
    ),
    Dim.DP: DimFacts(
        "dense",
        "data parallel: dp_replicate x dp_shard",
        members=(Dim.DP_REPLICATE, Dim.DP_SHARD),
        torchtitan="batch",
        listed=(),
    ),
    Dim.DP_SHARD_CP: DimFacts(
        "dense",
        "the ranks FSDP shards over: dp_shard x cp",
        members=(Dim.DP_SHARD, Dim.CP),
        torchtitan="fsdp",
        listed=(Dim.CP,),
    ),
    Dim.DP_CP: DimFacts(
        "dense",
        "every data dimension, for the loss: dp_replicate x dp_shard x cp",
        members=(Dim.DP_REPLICATE, Dim.DP_SHARD, Dim.CP),
        torchtitan="loss",
    ),
    Dim.EDP: DimFacts(
        "expert",
        "expert data parallel: dp_replicate x efsdp",
        members=(Dim.DP_REPLICATE, Dim.EFSDP),
        listed=(),
    ),
}
"""Every dimension and what gangmesh knows about it."""

ROOT = "root"
"""The name of the gang of every process (not a dimension)."""

MESH_DIMS: tuple[Dim, ...] = tuple(d for d, f in FACTS.items() if not f.members)
"""The dimensions of the meshes: the dense ones, then the expert ones."""

DENSE_DIMS: tuple[Dim, ...] = tuple(d for d in MESH_DIMS if FACTS[d].view != "expert")
"""Dense dimension names in the default order, outermost first."""

SHARED_DIMS: tuple[Dim, ...] = tuple(d for d in MESH_DIMS if FACTS[d].view == "shared")
"""Dimensions the expert view shares with the dense view, ranks and all."""

EXPERT_DIMS: tuple[Dim, ...] = tuple(d for d in MESH_DIMS if FACTS[d].expert)
"""Expert dimension names, outermost first; the expert view puts SHARED_DIMS outside them."""

FLATTENED: dict[Dim, tuple[Dim, ...]] = {d: f.members for d, f in FACTS.items() if f.members}
"""Flattened dimensions: a name for several dimensions taken together, in mesh order."""

FAIRSEQ2_NAMES: dict[str, Dim] = {f.fairseq2: d for d, f in FACTS.items() if f.fairseq2}
"""fairseq2's short name of a gang -> the dimension it stands for ("rdp" -> dp_replicate)."""

ALIASES: dict[str, tuple[Dim, ...]] = {d: f.members for d, f in FACTS.items() if f.members}
"""Every name that stands for other dimensions: flattened ones and fairseq2's short names."""
ALIASES.update({name: (d,) for name, d in FAIRSEQ2_NAMES.items()})

SIZE_NAMES: tuple[Dim, ...] = tuple(d for d, f in FACTS.items() if f.default is not None)
"""The sizes a layout asks for (the keywords of MeshTopology and create_gangs), in order."""

MEGATRON_NAMES: dict[Dim, str] = {d: f.megatron for d, f in FACTS.items() if f.megatron}
"""How Megatron-Core names each dense dimension in its order strings."""


def field_name(dim: Dim) -> str:
    """The name of a dimension's gang on Gangs: fairseq2's short name where it has one.

    :param dim: a dimension.
    """
    return FACTS[dim].fairseq2 or dim.value


GANG_DIMS: tuple[Dim, ...] = (
    Dim.DP, Dim.DP_REPLICATE, Dim.DP_SHARD, Dim.TP, Dim.PP, Dim.CP, Dim.EP, Dim.EFSDP, Dim.ETP,
    Dim.EDP,
)  # fmt: skip
"""The dimension of each parallel gang of a job, in the order of the fields of Gangs."""

GANG_NAMES: tuple[str, ...] = tuple(map(field_name, GANG_DIMS))
"""The parallel gangs of a job (the fields of Gangs besides root), each a dimension or alias."""

LOCALITY_PRIORITY: tuple[Dim, ...] = tuple(
    sorted(
        (d for d, f in FACTS.items() if f.locality is not None),
        key=lambda d: FACTS[d].locality or 0,
    )
)
"""Dimensions that want to stay on one node, most important first."""


def option(name: str) -> str:
    """The command-line spelling of a name: ``dp_shard`` -> ``--dp-shard``.

    :param name: a dimension or another argument name.
    """
    return "--" + name.replace("_", "-")
