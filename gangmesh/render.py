"""Show a MeshTopology to people (table, SVG) and tools (JSON)."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from gangmesh.locality import LocalityFinding
from gangmesh.topology import EXPERT_DIMS, MeshTopology


def shown_dims(plan: MeshTopology) -> tuple[str, ...]:
    """The dimensions the table and JSON list: the mesh's, dp, and the expert ones if any."""
    flattened = ("dp", "dp_shard_cp") if plan.size_of("cp") > 1 else ("dp",)
    expert = (*EXPERT_DIMS, "edp") if plan.expert_dims is not None else ()
    return (*plan.order, *flattened, *expert)


SVG_MAX_RANKS = 1024
"""Largest world an SVG picture is drawn for."""


def plan_table(
    plan: MeshTopology,
    *,
    ranks_per_node: int | None = None,
    rank: int | None = None,
    first: int = 4,
) -> str:
    """A readable summary: sizes, group counts, the first groups, locality findings."""
    lines = [f"{plan!r}" + _node_text(plan, ranks_per_node)]
    lines.append(f"{'dim':<13} {'size':>6} {'groups':>8}  first groups")
    for dim in shown_dims(plan):
        groups = plan.groups(dim)
        shown = " ".join(_short(g) for g in groups[:first].tolist())
        more = " ..." if len(groups) > first else ""
        lines.append(f"{dim:<13} {plan.size_of(dim):>6} {len(groups):>8}  {shown}{more}")
    if rank is not None:
        coordinate = " ".join(f"{k}={v}" for k, v in plan.coordinate(rank).items())
        lines.append(f"rank {rank}: {coordinate}")
        for dim in shown_dims(plan):
            lines.append(
                f"  {dim:<13} rank {plan.rank_in(rank, dim)} in {_short(plan.group_of(rank, dim))}"
            )
    if ranks_per_node is not None:
        lines.extend(findings_text(plan.check_locality(ranks_per_node)))
    return "\n".join(lines) + "\n"


def plan_json(
    plan: MeshTopology, *, ranks_per_node: int | None = None, rank: int | None = None
) -> str:
    """Every group of every dimension, the findings and the given rank, as JSON."""
    document: dict[str, Any] = {
        "world_size": plan.world_size,
        "order": list(plan.order),
        "dims": plan.dims,
        "expert_dims": plan.expert_dims,
        "groups": {dim: plan.groups(dim).tolist() for dim in shown_dims(plan)},
    }
    if ranks_per_node is not None:
        document["ranks_per_node"] = ranks_per_node
        document["locality_findings"] = [
            {"dim": f.dim, "group": f.group, "nodes": f.nodes, "message": f.message}
            for f in plan.check_locality(ranks_per_node)
        ]
    if rank is not None:
        document["rank"] = {
            "rank": rank,
            "coordinate": plan.coordinate(rank),
            "groups": {dim: plan.group_of(rank, dim) for dim in shown_dims(plan)},
        }
    return json.dumps(document) + "\n"


_NODE_FILLS = ("#dbeafe", "#dcfce7", "#fef3c7", "#fce7f3", "#ede9fe", "#ffedd5", "#e0f2fe")
_DP_COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#be185d")


def plan_svg(plan: MeshTopology, *, ranks_per_node: int | None = None) -> str:
    """A picture of the mesh: one cell per rank, one row per node.

    Cells are filled by node, each tp group is framed, and the dot in a cell
    has its dp group's colour. Raises ValueError above SVG_MAX_RANKS ranks.
    """
    if plan.world_size > SVG_MAX_RANKS:
        raise ValueError(
            f"world_size: an SVG picture is drawn for at most {SVG_MAX_RANKS} ranks, "
            f"got {plan.world_size}; use --format table or json"
        )
    per_row = ranks_per_node or min(plan.world_size, 8)
    cell, gap, left, top = 56, 6, 70, 64
    rows = -(-plan.world_size // per_row)
    width = left + per_row * (cell + gap) + 20
    height = top + rows * (cell + gap) + 40

    def origin(rank: int) -> tuple[int, int]:
        return left + (rank % per_row) * (cell + gap), top + (rank // per_row) * (cell + gap)

    sizes = ", ".join(f"{k}={v}" for k, v in plan.dims.items())
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<text x="10" y="20" font-size="15">world size {plan.world_size}: {escape(sizes)}</text>',
        '<text x="10" y="40" fill="#555">cell fill: node; frame: tp group; '
        "dot colour: dp group</text>",
    ]
    label = "node" if ranks_per_node else "row"
    for row in range(rows):
        y = top + row * (cell + gap) + cell // 2 + 4
        parts.append(f'<text x="10" y="{y}">{label} {row}</text>')
    dp_index = {int(r): i for i, group in enumerate(plan.groups("dp").tolist()) for r in group}
    for rank in range(plan.world_size):
        x, y = origin(rank)
        fill = _NODE_FILLS[(rank // per_row) % len(_NODE_FILLS)]
        dot = _DP_COLOURS[dp_index[rank] % len(_DP_COLOURS)]
        parts.append(
            f"<g><title>rank {rank}: dp group {dp_index[rank]}</title>"
            f'<rect x="{x}" y="{y}" width="{cell}" height="{cell}" rx="4" fill="{fill}"/>'
            f'<text x="{x + cell // 2}" y="{y + cell // 2}" text-anchor="middle">{rank}</text>'
            f'<circle cx="{x + cell // 2}" cy="{y + cell - 12}" r="5" fill="{dot}"/></g>'
        )
    if plan.dims["tp"] > 1:
        for group in plan.groups("tp").tolist():
            parts.extend(_frame(group, origin, cell, per_row))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _frame(group: list[int], origin: Any, cell: int, per_row: int) -> list[str]:
    """Outline a run of consecutive ranks, one rectangle per row it covers."""
    frames = []
    start = group[0]
    while start <= group[-1]:
        end = min(group[-1], (start // per_row + 1) * per_row - 1)
        (x0, y0), (x1, _) = origin(start), origin(end)
        frames.append(
            f'<rect x="{x0 - 3}" y="{y0 - 3}" width="{x1 - x0 + cell + 6}" '
            f'height="{cell + 6}" rx="6" fill="none" stroke="#111" stroke-width="2"/>'
        )
        start = end + 1
    return frames


def _node_text(plan: MeshTopology, ranks_per_node: int | None) -> str:
    if ranks_per_node is None:
        return ""
    nodes = -(-plan.world_size // ranks_per_node)
    return f", {ranks_per_node} ranks per node ({nodes} nodes)"


def findings_text(findings: list[LocalityFinding]) -> list[str]:
    if not findings:
        return ["locality: every gang is node-local as intended"]
    return ["locality findings:"] + [f"  - {finding}" for finding in findings]


def _short(group: list[int], limit: int = 8) -> str:
    if len(group) <= limit:
        return "[" + ",".join(map(str, group)) + "]"
    return "[" + ",".join(map(str, group[: limit - 1])) + f",...,{group[-1]}]"
