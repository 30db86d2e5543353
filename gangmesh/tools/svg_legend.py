"""The legend of a plan's picture: what a cell, a row and each mark mean."""

from __future__ import annotations

from collections.abc import Sequence

from gangmesh.plan.topology import MeshTopology
from gangmesh.tools.svg_shapes import MARKS, Grid, colour_of, dashed, rect


def legend_lines(
    plan: MeshTopology, grid: Grid, marks: Sequence[set[bool]], rank: int | None
) -> list[tuple[str, str]]:
    """(swatch, text) lines that explain exactly what the panels draw: ``marks`` are the
    crossings each panel marks (to fix: True, unavoidable: False)."""
    cell = rect(0, 0, 16, 16, 3, f'fill="{colour_of(2)}"')
    text = "a cell is a rank, its number on top; its colour and label gN name its group along "
    lines = [(cell, text + "the panel's dimension")]
    if grid.per_node:
        wraps = " (wrapped)" if grid.per_node > grid.cols else ""
        lines.append(("", f"rows: one node of {grid.per_node} ranks each{wraps}"))
    else:
        rows = f"rows: up to {grid.cols} consecutive ranks; --ranks-per-node draws nodes"
        lines.append(("", rows))
    used = {mark for marked in marks for mark in marked}
    for avoidable in (True, False):
        if avoidable in used:
            colour, label = MARKS[avoidable]
            swatch = rect(1, 1, 14, 14, 3, dashed(colour))
            lines.append((swatch, f"a group that crosses nodes ({label}; see under the panel)"))
    if rank is not None:
        swatch = rect(1, 1, 14, 14, 3, 'fill="#ffffff" stroke="#111111" stroke-width="3"')
        swatch += '<circle cx="6" cy="6" r="2.5"/>'
        lines.append((swatch, f"the groups of rank {rank}; a dot marks rank {rank} itself"))
    single = [d for d, s in plan.sizes().items() if s == 1]
    if single:
        lines.append(("", f"size 1, no panel: {', '.join(single)}"))
    lo, hi = int(grid.ranks[0]), int(grid.ranks[-1])
    if hi - lo + 1 < plan.world_size:
        lines.append(
            (
                "",
                f"ranks {lo}-{hi} of {plan.world_size} drawn; the pattern repeats, and each "
                "header counts all groups",
            )
        )
    return lines
