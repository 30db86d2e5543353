"""Draw the parts of a job as one SVG picture: each part's plan as :mod:`gangmesh.tools.svg`
draws a plan, in global ranks, one part under the other, each headed by its name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gangmesh.plan.locality import LocalityFinding
from gangmesh.plan.multipart import MultiPartPlan
from gangmesh.plan.parts import span_text
from gangmesh.tools.svg import plan_drawing, svg_document

_RULE = "#9ca3af"
"""The colour of the line between two parts."""


def parts_svg(
    plan: MultiPartPlan,
    *,
    ranks_per_node: int | None = None,
    rank: int | None = None,
    findings: Mapping[str, Sequence[LocalityFinding]] | None = None,
) -> str:
    """The picture of every part, in rank order; each part a ``<g class="part">`` element.

    :param plan: the parts and their plans.
    :param ranks_per_node: how many consecutive global ranks share a node, to draw nodes.
    :param rank: a global rank whose groups to outline (in the part that holds it).
    :param findings: each part's locality findings (default: :meth:`MultiPartPlan.check_locality`
        where ``ranks_per_node`` is given).
    :raises ValueError: ``ranks_per_node`` does not divide the world, or ``rank`` is not a
        rank of it.
    """
    parts = plan.parts
    holder = None if rank is None else parts.part_of(rank)
    if ranks_per_node is not None and findings is None:
        findings = plan.check_locality(ranks_per_node)
    body: list[str] = []
    width, y = 0, 0
    for name in parts.names:
        title = f"part {name}: {span_text(parts.span(name))} of {parts.world_size}"
        drawing, w, h = plan_drawing(
            plan.plan(name),
            ranks_per_node=ranks_per_node,
            rank=rank if name == holder else None,
            offset=parts.offset(name),
            findings=None if findings is None else findings.get(name, []),
            title=title,
        )
        if y:
            body.append(f'<line x1="0" y1="{y}" x2="100%" y2="{y}" stroke="{_RULE}"/>')
        body.append(f'<g class="part" data-part="{name}" transform="translate(0,{y})">')
        body.extend([*drawing, "</g>"])
        width, y = max(width, w), y + h
    listed = ", ".join(f"{name} ({span_text(parts.span(name))})" for name in parts.names)
    caption = f"gangmesh plan: {parts.world_size} ranks in parts {listed}"
    return svg_document(body, width, y, caption=caption)
