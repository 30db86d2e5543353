"""Draw a MeshTopology as an SVG picture: one panel per dimension, every group labelled.

A panel shows one dimension of size > 1 (the dense ones in mesh order, then those of the
expert view): a cell per rank, one row per node (or per run of ranks without nodes). A
cell's colour and its label ``gN`` name its group along that dimension, and each group is
one ``<g class="group">`` element with a tooltip. Groups that cross a node where the
locality check objects are outlined, with the finding's text under the panel; ``rank``
outlines that rank's group in every panel. Worlds above SVG_FULL_RANKS ranks are drawn
through a window of whole nodes, with each dimension's totals in its panel's header.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

from gangmesh.plan.dims import DENSE_DIMS, FACTS, Dim
from gangmesh.plan.locality import LocalityFinding, check_ranks_per_node
from gangmesh.plan.topology import MeshTopology
from gangmesh.tools.render import (
    finding_label,
    footer_lines,
    replica_title,
    same_groups,
    shared_header,
    shown_dims,
    shown_sizes,
)
from gangmesh.tools.svg_legend import legend_lines
from gangmesh.tools.svg_overview import OVERVIEW_WIDTH, overview
from gangmesh.tools.svg_shapes import (
    CELL_H,
    MARKS,
    Grid,
    colour_of,
    dashed,
    rect,
    row_length,
    text_at,
    text_width,
    wrap_text,
)

SVG_FULL_RANKS = 256
"""Worlds up to this size are drawn whole; larger ones through a window of ranks."""

SVG_WINDOW_RANKS = 64
"""About how many ranks (whole nodes where they fit) the window of a large world shows."""

_LISTED = 1 << 16  # groups up to this size are listed whole to find the nodes they touch
_MARGIN, _PANEL_GAP, _MAX_WIDTH = 16, 24, 680
_MIN_HEADER = 320
"""The width a panel's header wraps at where the panel is narrower."""


def plan_svg(
    plan: MeshTopology,
    *,
    ranks_per_node: int | None = None,
    rank: int | None = None,
    replica_groups: int | None = None,
) -> str:
    """The picture of a plan: a title, a legend, one panel per dimension of size > 1;
    with ``replica_groups``, the plan is that of one of them.

    Raises ValueError if ``ranks_per_node`` does not divide the world size or ``rank``
    is not a rank of the plan.
    """
    if ranks_per_node is not None:
        check_ranks_per_node(plan.world_size, ranks_per_node)
    if rank is not None:
        plan.coordinate(rank)
    title = None if replica_groups is None else replica_title(plan, replica_groups)
    body, width, height = plan_drawing(plan, ranks_per_node=ranks_per_node, rank=rank, title=title)
    caption = f"gangmesh plan: {_heading(plan, ranks_per_node, title=title)}; {_sizes_text(plan)}"
    return svg_document(body, width, height, caption=caption)


def plan_drawing(
    plan: MeshTopology,
    *,
    ranks_per_node: int | None = None,
    rank: int | None = None,
    offset: int = 0,
    findings: Sequence[LocalityFinding] | None = None,
    title: str | None = None,
) -> tuple[list[str], int, int]:
    """The elements of :func:`plan_svg`'s picture, its width and height (arguments checked).

    ``offset`` draws the plan's ranks shifted by it (a part of a job at that global rank,
    nodes counted in global ranks; ``rank`` is global then too), ``findings`` replaces the
    plan's own locality check, ``title`` the first line.
    """
    per_node = ranks_per_node
    local = None if rank is None else rank - offset
    lo, hi = _window(plan.world_size, per_node, local)
    cols = row_length(per_node) if per_node else (8 if plan.world_size <= 64 else 16)
    digits = max(len(str(offset + hi - 1)), len(str(offset + plan.world_size)) + 1)
    grid = Grid.build(offset + lo, offset + hi, per_node, cols, max(36, 7 * digits + 10))
    if per_node and findings is None:
        findings = plan.check_locality(per_node)
    by_dim = {f.dim: f for f in findings or ()}
    shown = [d for d in shown_dims(plan) if plan.size_of(d) > 1]
    meshed = [d for d in shown if not FACTS[d].members]  # each may have a panel
    dims = [*meshed, *(d for d in shown if FACTS[d].members)]
    twins = same_groups(plan, dims)  # drawn once, in the panel of the dimension they follow
    drawn = [d for d in meshed if d not in twins]
    also = {d: [twin for twin, first in twins.items() if first == d] for d in drawn}
    panels = [_Panel.draw(plan, d, grid, by_dim.get(d), rank, offset, also[d]) for d in drawn]

    heading = _heading(plan, per_node, offset, title)
    legend = legend_lines(plan, grid, [panel.marks for panel in panels], rank)
    footer = footer_lines(plan, per_node, list(findings or ()), meshed)
    large = plan.world_size > SVG_FULL_RANKS
    structure = overview(plan, per_node, drawn, offset) if large else None
    return _page(heading, _sizes_text(plan), legend, panels, footer, structure)


def _sizes_text(plan: MeshTopology) -> str:
    """``"pp=1, ..., tp=2; order ..."``: the second line of a picture's heading."""
    sizes = ", ".join(f"{k}={v}" for k, v in shown_sizes(plan).items())
    if plan.order != DENSE_DIMS:
        sizes += f"; order {','.join(plan.order)}"
    return sizes


def _heading(
    plan: MeshTopology, per_node: int | None, offset: int = 0, title: str | None = None
) -> str:
    """``"16 ranks on 2 nodes of 8"``: the first line of a picture's heading."""
    heading = f"{plan.world_size} ranks" if title is None else title
    if per_node:
        nodes = (offset + plan.world_size - 1) // per_node - offset // per_node + 1
        heading += f" on {nodes} node{'s' if nodes > 1 else ''} of {per_node}"
    return heading


def svg_document(body: Sequence[str], width: int, height: int, *, caption: str) -> str:
    """One SVG document of ``body`` (elements), on a white page of that size.

    :param body: the elements, drawn in order.
    :param width: the page width.
    :param height: the page height.
    :param caption: the document's title (its tooltip).
    """
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif">'
    )
    background = f'<rect width="{width}" height="{height}" fill="#ffffff"/>'
    title = f"<title>{escape(caption)}</title>"
    return "\n".join([head, title, background, *body, "</svg>"]) + "\n"


def _page(
    title: str,
    sizes: str,
    legend: list[tuple[str, str]],
    panels: list[_Panel],
    footer: list[str],
    structure: tuple[list[str], float] | None = None,
) -> tuple[list[str], int, int]:
    """The whole picture's elements, width and height: title, legend, the overview of a
    large world, the panels in rows, the locality report."""
    panel_w = max([0.0, *(p.width for p in panels)])
    columns = max(1, min(len(panels), int(_MAX_WIDTH // (panel_w + _PANEL_GAP))))
    heading = [title, *sizes.split("; ")]
    width = max(
        columns * (panel_w + _PANEL_GAP) - _PANEL_GAP,
        0 if structure is None else OVERVIEW_WIDTH,
        text_width(title, 16, bold=True),
        *(text_width(line, 13) for line in heading[1:]),
        480,
    )
    for panel in panels:
        panel.wrap(width if columns == 1 else panel_w)
    body = [text_at(_MARGIN, _MARGIN + 16, title, 16, font_weight="bold")]
    y = _MARGIN + 16.0
    for line in heading[1:]:
        y += 19
        body.append(text_at(_MARGIN, y, line, 13, fill="#333"))
    y += 14
    for swatch, text in legend:
        lines = wrap_text(text, width - 24, 12)
        label = "".join(
            text_at(24 if swatch else 0, 12 + 16 * i, t, 12) for i, t in enumerate(lines)
        )
        body.append(f'<g class="legend" transform="translate({_MARGIN},{y:g})">{swatch}{label}</g>')
        y += 4 + 16 * len(lines)
    y += 10
    if structure is not None and panels:
        parts, height = structure
        body.append(f'<g class="overview" transform="translate({_MARGIN},{y:g})">')
        body.extend([*parts, "</g>"])
        y += height + _PANEL_GAP
    if not panels:
        body.append(text_at(_MARGIN, y + 14, "every dimension has size 1: one rank, no gangs", 13))
        y += 24
    for start in range(0, len(panels), columns):
        row = panels[start : start + columns]
        for i, panel in enumerate(row):
            x = _MARGIN + i * (panel_w + _PANEL_GAP)
            body.append(
                f'<g class="panel" data-dim="{panel.dim}" transform="translate({x:g},{y:g})">'
            )
            body.extend([*panel.parts, "</g>"])
        y += max(p.height for p in row) + _PANEL_GAP
    for line in (wrapped for text in footer for wrapped in wrap_text(text, width, 12)):
        body.append(text_at(_MARGIN, y + 12, line, 12, fill="#333"))
        y += 17
    return body, round(width + 2 * _MARGIN), round(y + _MARGIN)


@dataclass
class _Panel:
    """One dimension's drawing, at its own origin, and the marks it uses."""

    dim: str
    parts: list[str]
    width: float
    height: float
    finding: LocalityFinding | None
    marks: set[bool]

    @staticmethod
    def draw(
        plan: MeshTopology,
        dim: str,
        grid: Grid,
        finding: LocalityFinding | None,
        rank: int | None,
        offset: int = 0,
        twins: Sequence[str] = (),
    ) -> _Panel:
        size, count = plan.size_of(dim), plan.group_count(dim)
        local = grid.ranks - offset
        ids = plan.group_ids(dim, local)
        drawn = np.unique(ids)
        header = f"{dim}: {FACTS[Dim(dim)].description}"
        totals = f"{count} groups of {size} ranks"
        if len(grid.ranks) < plan.world_size:
            totals += f"; {len(drawn)} of them have ranks drawn here"
        if twins:
            header = shared_header((dim, *twins))
            totals += "; the same groups for each name (one communicator each)"
        lines = wrap_text(header, max(grid.width, _MIN_HEADER), 12)
        parts = [
            text_at(0, 14 + 16 * i, line, 12, font_weight="bold") for i, line in enumerate(lines)
        ]
        parts.append(text_at(0, 30 + 16 * (len(lines) - 1), totals, 11, fill="#444"))
        top = 40 + 16 * (len(lines) - 1)
        parts += [text_at(0, top + y + 22, text, 11, fill="#333") for y, text in grid.labels]
        positions = plan.view_of(dim).coordinates(local)[dim]
        scene = _Scene(
            dim=dim,
            size=size,
            grid=grid,
            top=top,
            rank=rank,
            of_rank=-1 if rank is None else int(plan.group_ids(dim, np.array([rank - offset]))[0]),
            positions=dict(zip(grid.ranks.tolist(), positions.tolist(), strict=True)),
        )
        marks: set[bool] = set()
        for group in drawn.tolist():
            shown = grid.ranks[ids == group].tolist()
            listed = [r + offset for r in plan.group_of(shown[0] - offset, dim)]
            members = listed if size <= _LISTED else shown
            nodes = sorted({r // grid.per_node for r in members}) if grid.per_node else []
            crossing = finding is not None and (len(nodes) > 1 or size > (grid.per_node or size))
            if finding is not None and crossing:
                marks.add(finding.avoidable)
            mark = finding if crossing else None
            parts.append(_group(scene, group, shown, members, nodes, mark))
        widest = max(text_width(line, 12, bold=True) for line in lines)
        width = max(grid.width, widest, text_width(totals, 11))
        return _Panel(dim, parts, width, top + grid.height + 8, finding, marks)

    def wrap(self, width: float) -> None:
        """Add the finding's text under the grid, wrapped to ``width``."""
        if self.finding is None:
            return
        colour = MARKS[self.finding.avoidable][0]
        text = f"{finding_label(self.finding)}: {self.finding}"
        for line in wrap_text(text, width, 11):
            self.parts.append(text_at(0, self.height + 10, line, 11, fill=colour))
            self.height += 15
        self.height += 6


@dataclass(frozen=True)
class _Scene:
    """What every group of one panel is drawn with."""

    dim: str
    size: int
    grid: Grid
    top: float
    rank: int | None
    of_rank: int
    positions: dict[int, int]


def _group(
    scene: _Scene,
    group: int,
    shown: list[int],
    members: list[int],
    nodes: list[int],
    finding: LocalityFinding | None,
) -> str:
    """One group: its cells, each with a tooltip, and its marks; one labelled element.

    ``shown`` are the members drawn, ``members`` those the tooltip lists (all of them
    unless the group is too large to list), ``nodes`` the nodes they touch.
    """
    dim, size, grid, top, rank = scene.dim, scene.size, scene.grid, scene.top, scene.rank
    mine = group == scene.of_rank
    listed = ", ".join(map(str, members[:8])) + (", ..." if size > 8 else "")
    title = f"{dim} group {group}: ranks {listed}"
    attrs = f'class="group" data-dim="{dim}" data-group="{group}"'
    if len(shown) < size:
        title += f" ({len(shown)} of {size} drawn)"
    if finding is not None:
        where = ", ".join(map(str, nodes[:8])) + (", ..." if len(nodes) > 8 else "")
        title += f"; crosses nodes {where} ({finding_label(finding)})"
        attrs += f' data-crossing="{finding_label(finding)}"'
    if mine:
        title += f"; a group of rank {rank}"
        attrs += f' data-rank="{rank}"'
    out = [f"<g {attrs}><title>{escape(title)}</title>"]
    w, fill = grid.cell_w, colour_of(group)
    stroke = ' stroke="#111111" stroke-width="3"' if mine else ' stroke="#ffffff"'
    dash = "" if finding is None else MARKS[finding.avoidable][0]
    role = FACTS[Dim(dim)].member
    for r in shown:
        x, y = grid.spots[r]
        y += top
        tip = f"rank {r}: {dim} group {group}, {role} {scene.positions[r]} of {size}"
        out.append(f"<g><title>{escape(tip)}</title>")
        out.append(rect(x, y, w, CELL_H, 3, f'fill="{fill}"{stroke}'))
        if dash:
            out.append(rect(x - 3, y - 3, w + 6, CELL_H + 6, 5, dashed(dash)))
        if r == rank:
            out.append(f'<circle cx="{x + 7:g}" cy="{y + 7:g}" r="3.5" fill="#111111"/>')
        bold = {"font_weight": "bold"} if r == rank else {}
        out.append(text_at(x + w / 2, y + 15, str(r), 11, text_anchor="middle", **bold))
        out.append(text_at(x + w / 2, y + 30, f"g{group}", 10, text_anchor="middle", fill="#222"))
        out.append("</g>")
    for a, b in itertools.pairwise(shown if dash and grid.per_node else []):
        if grid.per_node and a // grid.per_node != b // grid.per_node:
            (xa, ya), (xb, yb) = grid.spots[a], grid.spots[b]
            out.append(
                f'<line x1="{xa + w / 2:g}" y1="{ya + top + CELL_H + 3:g}" x2="{xb + w / 2:g}" '
                f'y2="{yb + top - 3:g}" stroke="{dash}" stroke-width="2"/>'
            )
    out.append("</g>")
    return "".join(out)


def _window(world_size: int, per_node: int | None, rank: int | None) -> tuple[int, int]:
    """The ranks drawn: all of a small world, else whole nodes around ``rank`` (or rank 0)."""
    if world_size <= SVG_FULL_RANKS:
        return 0, world_size
    unit = per_node or 16
    size = min(SVG_FULL_RANKS, max(unit, SVG_WINDOW_RANKS // unit * unit))
    lo = (rank or 0) // size * size
    return lo, min(world_size, lo + size)
