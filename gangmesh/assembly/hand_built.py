"""The gangs a Gangs is made of, by keyword: declared once, completed and checked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from typing_extensions import NotRequired, TypedDict

from gangmesh.plan.dims import FACTS, GANG_DIMS, GANG_NAMES, ROOT, SIZE_NAMES, Dim, field_name
from gangmesh.plan.layout import LayoutKeywords
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime.fake_gang import FakeGang
from gangmesh.runtime.gang import Gang


class GangKeywords(TypedDict):
    """The gangs of :class:`~gangmesh.Gangs`, by keyword: root and the dense gangs it needs,
    then those it can do without (:data:`TAKEN_FOR`)."""

    root: Gang
    dp: Gang
    rdp: Gang
    sdp: Gang
    tp: Gang
    pp: Gang
    cp: NotRequired[Gang | None]
    ep: NotRequired[Gang | None]
    efsdp: NotRequired[Gang | None]
    etp: NotRequired[Gang | None]
    edp: NotRequired[Gang | None]


TAKEN_FOR: dict[Dim, Dim | None] = {
    Dim.CP: None, Dim.EP: None, Dim.EFSDP: Dim.DP_SHARD, Dim.ETP: Dim.TP, Dim.EDP: Dim.DP
}  # fmt: skip
"""What a Gangs takes for a gang it is not given: the dense gang of the same members, or
(None) a FakeGang of size 1."""

GANG_DEFAULTS: dict[str, object] = {field_name(dim): None for dim in TAKEN_FOR}
"""Keyword of ``GangKeywords`` -> its default, for the gangs a Gangs can do without."""


def keywords_of(root: Gang, gangs: Mapping[str, Gang]) -> GangKeywords:
    """The keywords of ``root`` and the gang of each dimension of GANG_DIMS in ``gangs``."""
    return cast(GangKeywords, {ROOT: root, **{field_name(d): gangs[d] for d in GANG_DIMS}})


def completed(
    gangs: GangKeywords, plan: MeshTopology | None
) -> tuple[dict[Dim, Gang], MeshTopology]:
    """The gang of each dimension of GANG_DIMS, those not given taken as TAKEN_FOR says, and
    the plan (by default that of their sizes).

    :raises ValueError: as :class:`~gangmesh.Gangs` says.
    """
    root = gangs["root"]
    named = cast(Mapping[str, "Gang | None"], gangs)
    given = {name: named.get(name) for name in GANG_NAMES}
    off = {name: gang.rank for name, gang in given.items() if gang is not None and gang.rank}
    if root.rank == 0 and off:
        raise ValueError(
            f"{', '.join(off)}: root rank 0 must be rank 0 of every gang, but its rank "
            f"there is {', '.join(map(str, off.values()))}"
        )
    cp = given["cp"]
    if (given["efsdp"] is None or given["edp"] is None) and cp is not None and cp.size > 1:
        raise ValueError(
            f"efsdp, edp: expected the expert gangs when cp={cp.size} > 1 (efsdp "
            f"spans dp_shard x cp, which no dense gang holds), got none"
        )
    by_dim: dict[Dim, Gang] = {}
    for dim in GANG_DIMS:
        gang, default = given[field_name(dim)], TAKEN_FOR.get(dim)
        if gang is None:
            gang = FakeGang(root.device) if default is None else by_dim[default]
        by_dim[dim] = gang
    sizes = cast(LayoutKeywords, {dim.value: by_dim[dim].size for dim in SIZE_NAMES})
    plan = plan or MeshTopology(root.size, **sizes)
    _check_expert_sizes(plan, by_dim, given)
    return by_dim, plan


def _check_expert_sizes(
    plan: MeshTopology, gangs: Mapping[Dim, Gang], given: Mapping[str, Gang | None]
) -> None:
    """Check that each expert gang, given or taken by default, has the plan's size.

    :raises ValueError: naming the gang, its size and the plan's.
    """
    for dim, default in TAKEN_FOR.items():
        size, expected = gangs[dim].size, plan.size_of(dim)
        if FACTS[dim].expert and size != expected:
            got = f"one of size {size}"
            if given[field_name(dim)] is None:
                taken = "a FakeGang" if default is None else field_name(default)
                got = f"none, and its default ({taken}) has size {size}"
            raise ValueError(
                f"{dim}: expected a gang of size {expected}, as in the plan {plan}, got {got}"
            )
