"""The overview of a large world in the SVG picture: which nodes each stage and group spans.

Above SVG_FULL_RANKS ranks the panels draw a window of ranks only; the overview draws
every node (or block of nodes) once per dimension, coloured by the ranks' coordinate along
that dimension, and says which nodes each coordinate and the first group occupy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gangmesh.plan.dims import FACTS, Dim
from gangmesh.plan.topology import MeshTopology
from gangmesh.tools.svg_shapes import colour_of, rect, text_at, text_width, wrap_text

MAX_CELLS = 256
"""At most this many cells per strip: above it, a cell is a block of whole nodes."""

_STRIP_W, _STRIP_H, _MIXED = 560.0, 14.0, "#9ca3af"

OVERVIEW_WIDTH = 680.0
"""The overview's width: the strips, their labels and the text beside them."""


def overview(
    plan: MeshTopology, per_node: int | None, dims: Sequence[str], offset: int = 0
) -> tuple[list[str], float]:
    """SVG parts (at their own origin) and their height: one strip per dimension.

    ``offset``: the plan is a part of a job that starts at that global rank; its cells are
    nodes where it starts on a node's first rank, else blocks of a node's size.
    """
    unit = per_node or 16
    nodes = -(-plan.world_size // unit)
    per_cell = -(-nodes // MAX_CELLS)
    cells = -(-nodes // per_cell)
    aligned = per_node is not None and offset % per_node == 0
    what = "node" if aligned else "block"
    unit_text = "one node" if aligned else f"one block of {unit} ranks"
    cell_what = unit_text if per_cell == 1 else f"{per_cell} {what}s"
    cell_w = _STRIP_W / cells
    span = f" (global ranks {offset}-{offset + plan.world_size - 1})" if offset else ""
    parts = [
        text_at(0, 14, f"structure: all {plan.world_size} ranks{span}", 12, font_weight="bold"),
        text_at(
            0,
            30,
            f"a cell is {cell_what}; its colour is the ranks' coordinate along the strip's "
            f"dimension, grey where a cell holds several",
            11,
            fill="#444",
        ),
    ]
    starts = np.arange(0, plan.world_size, unit * per_cell, dtype=np.int64)
    ranks = np.arange(plan.world_size, dtype=np.int64)
    y = 40.0
    label_w = max(text_width(d, 11) for d in dims) + 8
    for dim in dims:
        coordinate = plan.view_of(dim).coordinates(ranks)[dim]
        low = np.minimum.reduceat(coordinate, starts)
        high = np.maximum.reduceat(coordinate, starts)
        parts.append(f'<g class="strip" data-dim="{dim}">')
        parts.append(text_at(0, y + 11, dim, 11, font_weight="bold"))
        for i, (a, b) in enumerate(zip(low.tolist(), high.tolist(), strict=True)):
            fill = colour_of(a) if a == b else _MIXED
            first = i * per_cell
            tip = f"{what} {first}" if per_cell == 1 else f"{what}s {first}-{first + per_cell - 1}"
            tip += f": {dim} {a}" if a == b else f": {dim} {a}-{b}"
            parts.append(
                f'<g data-cell="{i}" data-coordinate="{a if a == b else -1}"><title>{tip}</title>'
                + rect(
                    label_w + i * cell_w, y, max(cell_w - 0.5, 0.5), _STRIP_H, 0, f'fill="{fill}"'
                )
                + "</g>"
            )
        parts.append("</g>")
        y += _STRIP_H + 14
        where = _where(plan, dim, unit, what, coordinate)
        for line in wrap_text(where, OVERVIEW_WIDTH - label_w, 11):
            parts.append(text_at(label_w, y, line, 11, fill="#333"))
            y += 14
        y -= 4
    return parts, y


def _where(plan: MeshTopology, dim: str, unit: int, node: str, coordinate: np.ndarray) -> str:
    """Which nodes (or blocks) each coordinate (up to 4) and the first group occupy; a
    coordinate is named by its dimension ("dp_shard 0"), never as a rank, which would read
    as a global one."""
    role = FACTS[Dim(dim)].member
    label = dim if role == "rank" else role  # "dp_shard 0", "stage 0"
    size = plan.size_of(dim)
    first = np.unique(np.asarray(plan.first_groups(dim, 1)[0]) // unit)
    if len(first) == 1:
        return f"every group within one {node} (group 0 on {node} {first[0]})"
    spans = []
    for value in range(min(size, 4)):
        held = np.unique(np.flatnonzero(coordinate == value) // unit)
        spans.append(f"{label} {value}: {node}s {_ranges(held)}")
    if size > 4:
        spans.append("...")
    group = f"group 0 spans {len(first)} {node}{'s' if len(first) > 1 else ''} ({_ranges(first)})"
    return f"{'; '.join(spans)}; {group}"


def _ranges(values: np.ndarray, limit: int = 4) -> str:
    """``"0-31, 64-95"``: runs of consecutive values, the first ``limit`` of them."""
    if len(values) == 0:
        return "none"
    breaks = np.flatnonzero(np.diff(values) != 1) + 1
    runs = np.split(values, breaks)
    text = [f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs[:limit]]
    return ", ".join(text) + (f", ... ({len(runs)} runs)" if len(runs) > limit else "")
