"""Show a MeshTopology to people (table, locality text) and tools (JSON).

The SVG picture is drawn by :mod:`gangmesh.tools.svg`. Nothing here lists every group unless
asked to: the table and the JSON counts work out the few groups they show, so they stay
cheap at any world size.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypedDict

import numpy as np
from typing_extensions import Unpack

from gangmesh.plan.dims import FACTS, GANG_DIMS, LOCALITY_PRIORITY, Dim
from gangmesh.plan.locality import LocalityFinding, checked_dims, unchecked_dims
from gangmesh.plan.topology import MeshTopology
from gangmesh.plan.view import short_group

JSON_CONTENTS: tuple[str, ...] = ("all", "counts")
"""What ``plan_json`` can write: every group of every dimension, or sizes and counts only."""


def shown_dims(plan: MeshTopology) -> tuple[Dim, ...]:
    """The dimensions the table and JSON list: the mesh's in its order, the flattened dense
    ones the registry lists for this plan (dp, ...), then those of the expert view where the
    job uses experts (a dense job builds none of them)."""
    listed = [
        name
        for name, facts in FACTS.items()
        if facts.listed is not None and all(plan.size_of(other) > 1 for other in facts.listed)
    ]
    dense = [name for name in listed if FACTS[name].members and not FACTS[name].expert]
    expert = [name for name in listed if FACTS[name].expert and plan.uses_experts]
    return (*plan.order, *dense, *expert)


def shown_sizes(plan: MeshTopology) -> dict[str, int]:
    """The plan's sizes, without ep and etp where the job uses no experts (both are 1)."""
    sizes = plan.sizes()
    return sizes if plan.uses_experts else {k: sizes[k] for k in plan.order}


def plan_title(plan: MeshTopology) -> str:
    """The plan as its constructor call, its expert sizes left out where it uses none."""
    if plan.uses_experts:
        return repr(plan)
    return repr(plan).replace(", ep=1, etp=1", "", 1)  # a dense plan's are always these


def shown_coordinate(plan: MeshTopology, rank: int) -> dict[str, int]:
    """A rank's coordinate along the mesh's dimensions, and the expert view's where the job
    uses experts."""
    coordinate = plan.coordinate(rank)
    if plan.uses_experts:
        return coordinate
    return {name: coordinate[name] for name in plan.order}


def megatron_order(plan: MeshTopology) -> str | None:
    """The plan's order as Megatron-Core writes it; None where it cannot."""
    try:
        return plan.megatron_order()
    except ValueError:
        return None


def plan_table(
    plan: MeshTopology,
    *,
    ranks_per_node: int | None = None,
    rank: int | None = None,
    first: int = 4,
    offset: int = 0,
    findings: Sequence[LocalityFinding] | None = None,
) -> str:
    """A readable summary: sizes, group counts, the first groups, locality findings.

    ``offset`` shows the plan's ranks shifted by it (a part of a job at that global rank;
    ``rank`` is global then too), and ``findings`` replaces the plan's own locality check.
    """
    lines = [plan_title(plan) + _node_text(plan, ranks_per_node, offset)]
    megatron = megatron_order(plan)
    spelled = (
        f"; as Megatron-Core's order argument, innermost first: {megatron}" if megatron else ""
    )
    lines.append(f"order {','.join(plan.order)}, outermost first{spelled}")
    lines.append(f"{'dim':<13} {'size':>6} {'groups':>8}  first groups")
    for dim in shown_dims(plan):
        count = plan.group_count(dim)
        groups = plan.first_groups(dim, first)
        shown = " ".join(short_group([r + offset for r in g]) for g in groups)
        more = " ..." if count > first else ""
        lines.append(f"{dim:<13} {plan.size_of(dim):>6} {count:>8}  {shown}{more}")
    lines.extend(_same_groups_text(plan))
    if rank is not None:
        local = rank - offset
        coordinate = " ".join(f"{k}={v}" for k, v in shown_coordinate(plan, local).items())
        lines.append(f"rank {rank}: {coordinate}")
        for dim in shown_dims(plan):
            group = short_group([r + offset for r in plan.group_of(local, dim)])
            lines.append(f"  {dim:<13} rank {plan.rank_in(local, dim)} in {group}")
    if ranks_per_node is not None:
        found = plan.check_locality(ranks_per_node) if findings is None else findings
        lines.extend(findings_text(found, plan=plan, ranks_per_node=ranks_per_node))
    return "\n".join(lines) + "\n"


class DocumentOptions(TypedDict, total=False):
    """What :func:`plan_json` and :func:`plan_document` may be told beside the plan."""

    ranks_per_node: int | None
    """Adds the locality findings."""
    rank: int | None
    """Adds that rank's coordinate and groups."""
    content: str
    """``"all"`` (every group, the default) or ``"counts"``."""
    offset: int
    """Shifts every rank shown, ``rank`` included, as :func:`plan_table` does."""
    findings: Sequence[LocalityFinding] | None
    """Replaces the plan's own locality check."""


def plan_json(plan: MeshTopology, **options: Unpack[DocumentOptions]) -> str:
    """The layout as JSON: sizes, group counts and, with ``content="all"``, every group
    (see :class:`DocumentOptions`). Raises ValueError for an unknown ``content``."""
    return json.dumps(plan_document(plan, **options)) + "\n"


def plan_document(
    plan: MeshTopology,
    *,
    ranks_per_node: int | None = None,
    rank: int | None = None,
    content: str = "all",
    offset: int = 0,
    findings: Sequence[LocalityFinding] | None = None,
) -> dict[str, Any]:
    """What :func:`plan_json` writes, as a dict (see :class:`DocumentOptions`)."""
    if content not in JSON_CONTENTS:
        raise ValueError(f"content: expected one of {', '.join(JSON_CONTENTS)}, got {content!r}")
    document: dict[str, Any] = {
        "world_size": plan.world_size,
        "order": list(plan.order),
        "megatron_order": megatron_order(plan),
        "dims": plan.dims,
        **({"expert_dims": plan.expert_dims} if plan.uses_experts else {}),
        "counts": {
            dim: {"size": plan.size_of(dim), "groups": plan.group_count(dim)}
            for dim in shown_dims(plan)
        },
    }
    if content == "all":
        document["groups"] = {dim: (plan.groups(dim) + offset).tolist() for dim in shown_dims(plan)}
    if ranks_per_node is not None:
        document["ranks_per_node"] = ranks_per_node
        document["locality_findings"] = [
            {
                "dim": f.dim,
                "group": f.group,
                "nodes": f.nodes,
                "avoidable": f.avoidable,
                "level": f.level,
                "message": f.message,
            }
            for f in (plan.check_locality(ranks_per_node) if findings is None else findings)
        ]
    if rank is not None:
        local = rank - offset
        document["rank"] = {
            "rank": rank,
            "coordinate": shown_coordinate(plan, local),
            "groups": {
                dim: [r + offset for r in plan.group_of(local, dim)] for dim in shown_dims(plan)
            },
        }
    return document


def findings_text(
    findings: Sequence[LocalityFinding],
    *,
    plan: MeshTopology | None = None,
    ranks_per_node: int | None = None,
) -> list[str]:
    """The locality report as lines: what to fix, what cannot be helped, what was checked.

    With ``plan`` and ``ranks_per_node`` the lines also name the dimensions checked
    and the ones left unchecked because their groups are meant to span nodes.
    """
    to_fix = [f for f in findings if f.avoidable]
    notes = [f for f in findings if not f.avoidable]
    if plan is None or ranks_per_node is None:
        if not findings:
            return [f"locality: no checked gang ({_checked_anywhere()}) crosses a node"]
        return [_count_line(to_fix, notes), *_finding_lines(to_fix, notes)]
    if ranks_per_node >= plan.world_size and not findings:
        held = "the only rank" if plan.world_size == 1 else f"all {plan.world_size} ranks"
        return [f"locality: one node holds {held}, so no gang crosses a node"]
    found = {f.dim for f in findings}
    checked = checked_dims(plan)
    fine = [f"{dim} (size {plan.size_of(dim)})" for dim in checked if dim not in found]
    unchecked = unchecked_dims(plan)
    stay = f"{_join(fine)} groups each stay on one node of {ranks_per_node} ranks"
    cross = f"{_join(unchecked)} groups are meant to cross nodes and were not checked"
    if not findings:
        if not fine:
            return [f"locality: nothing to check on nodes of {ranks_per_node} ranks; {cross}"]
        return [f"locality: {stay}" + (f"; {cross}" if unchecked else "")]
    lines = [_count_line(to_fix, notes), *_finding_lines(to_fix, notes)]
    if fine:
        lines.append(f"  - fine: {stay}")
    if unchecked:
        lines.append(f"  - not checked: {_join(unchecked)} groups, meant to cross nodes")
    return lines


def _checked_anywhere() -> str:
    """The dimensions the locality check looks at, as the registry says: ``"tp, cp, ep;
    dp_shard with replicas"``."""
    always = [str(dim) for dim in LOCALITY_PRIORITY if FACTS[dim].node_check == "always"]
    replicas = [str(dim) for dim in LOCALITY_PRIORITY if FACTS[dim].node_check == "with_replicas"]
    return "; ".join([", ".join(always), *(f"{dim} with replicas" for dim in replicas)])


def finding_label(finding: LocalityFinding) -> str:
    """``"to fix"`` for a crossing a change of sizes or order avoids, else ``"unavoidable"``."""
    return "to fix" if finding.avoidable else "unavoidable"


def _count_line(to_fix: list[LocalityFinding], notes: list[LocalityFinding]) -> str:
    parts = []
    if to_fix:
        parts.append(f"{len(to_fix)} to fix")
    if notes:
        parts.append(f"{len(notes)} unavoidable at these sizes")
    return f"locality findings: {', '.join(parts)}"


def _finding_lines(to_fix: list[LocalityFinding], notes: list[LocalityFinding]) -> list[str]:
    return [f"  - {finding_label(f)}: {f}" for f in (*to_fix, *notes)]


def _join(words: Sequence[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    if len(words) < 2:
        return "".join(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _node_text(plan: MeshTopology, ranks_per_node: int | None, offset: int = 0) -> str:
    if ranks_per_node is None:
        return ""
    nodes = (offset + plan.world_size - 1) // ranks_per_node - offset // ranks_per_node + 1
    return f", {ranks_per_node} ranks per node ({nodes} node{'s' if nodes > 1 else ''})"


def replica_title(plan: MeshTopology, groups: int) -> str:
    """``"each of 4 replica groups (dp_replicate managed by torchft): 8 ranks"``."""
    managed = "dp_replicate managed by torchft"
    return f"each of {groups} replica groups ({managed}): {plan.world_size} ranks"


def same_groups(plan: MeshTopology, dims: Sequence[str]) -> dict[str, str]:
    """Each of ``dims`` whose groups are those of an earlier one (tp and ep where ep borrows
    the tp ranks, dp_shard and efsdp), with that earlier one: gangmesh builds one
    communicator for both."""
    ranks = np.arange(plan.world_size, dtype=np.int64)
    ids = {dim: plan.group_ids(dim, ranks) for dim in dims}
    twins: dict[str, str] = {}
    for i, dim in enumerate(dims):
        for earlier in dims[:i]:
            pairs = np.unique(np.stack([ids[earlier], ids[dim]]), axis=1).shape[1]
            if earlier not in twins and pairs == plan.group_count(dim) == plan.group_count(earlier):
                twins[dim] = earlier
                break
    return twins


def shared_header(names: Sequence[str]) -> str:
    """The names of dimensions with the same groups and what each is, in the order of the
    gangs of Gangs (flattened ones of no gang last).

    >>> shared_header(["tp", "ep"])
    'tp = ep: tensor parallel; expert parallel'
    """
    ordered = sorted(names, key=lambda name: _GANG_ORDER.get(name, len(_GANG_ORDER)))
    meanings = "; ".join(FACTS[Dim(name)].short for name in ordered)
    return f"{' = '.join(ordered)}: {meanings}"


_GANG_ORDER: dict[str, int] = {name: index for index, name in enumerate(GANG_DIMS)}


def _same_groups_text(plan: MeshTopology) -> list[str]:
    """The line under the table naming the dimensions that share their groups ("same groups:
    dp has the groups of dp_shard (one communicator each)"); none where none do."""
    twins = same_groups(plan, [dim for dim in shown_dims(plan) if plan.size_of(dim) > 1])
    alike: dict[str, list[str]] = {}
    for dim, earlier in twins.items():
        alike.setdefault(earlier, []).append(dim)
    if not alike:
        return []
    parts = [f"{_join(dims)} {'has' if len(dims) == 1 else 'have'} the groups of {earlier}"
             for earlier, dims in alike.items()]  # fmt: skip
    return ["same groups: " + "; ".join(parts) + " (one communicator each)"]


def footer_lines(
    plan: MeshTopology, per_node: int | None, findings: list[LocalityFinding], dims: list[Dim]
) -> list[str]:
    """The locality report's lines, less the findings the panels (of ``dims``) already show."""
    if per_node is None:
        return []
    lines = findings_text(findings, plan=plan, ranks_per_node=per_node)
    beside = {f"  - {finding_label(f)}: {f}" for f in findings if f.dim in dims}
    return [line.strip().removeprefix("- ") for line in lines if line not in beside]
