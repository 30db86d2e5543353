"""Draw two joined jobs and a weight push between them as one SVG picture: each job's plan as
:mod:`gangmesh.tools.svg` draws a plan (its ranks numbered from 0), then the push: the
sending job's ranks in a row, the receiving job's below, a line from each sender to each of
its receivers in the sender's colour, and under each sender the rows it sends."""

from __future__ import annotations

from gangmesh.plan.push_plan import PushPlan
from gangmesh.plan.topology import MeshTopology
from gangmesh.tools.svg import plan_drawing, svg_document
from gangmesh.tools.svg_shapes import colour_of, rect, text_at, text_width

_RULE = "#9ca3af"
"""The colour of the line between two panels."""
_BOX_W, _BOX_H, _GAP, _DROP = 96, 30, 16, 110
"""A rank's box in the push panel, the gap between boxes, and the height the lines cross."""


def push_svg(plans: dict[str, MeshTopology], push: PushPlan) -> str:
    """The picture: each job's plan, then the push from the first job to the second.

    :param plans: the two jobs' plans, by name, the sender first.
    :param push: the routes of the push.
    """
    (sender, _), (receiver, _) = plans.items()
    body: list[str] = []
    width, y = 0, 0
    for name, plan in plans.items():
        title = f"job {name}: {plan.world_size} ranks, numbered from 0"
        drawing, w, h = plan_drawing(plan, title=title)
        if y:
            body.append(f'<line x1="0" y1="{y}" x2="100%" y2="{y}" stroke="{_RULE}"/>')
        body.append(f'<g class="job" data-job="{name}" transform="translate(0,{y})">')
        body.extend([*drawing, "</g>"])
        width, y = max(width, w), y + h
    panel, w, h = _push_panel(sender, receiver, push)
    body.append(f'<line x1="0" y1="{y}" x2="100%" y2="{y}" stroke="{_RULE}"/>')
    body.append(f'<g class="push" transform="translate(0,{y})">')
    body.extend([*panel, "</g>"])
    caption = f"gangmesh plan: jobs {sender} and {receiver} joined, and a push between them"
    return svg_document(body, max(width, w), y + h, caption=caption)


def _push_panel(sender: str, receiver: str, push: PushPlan) -> tuple[list[str], int, int]:
    """The push's elements, width and height."""
    weight = push.shards("weight")
    shape = "x".join(map(str, weight.shape))
    senders, receivers = push.sender_plan.world_size, push.receiver_plan.world_size
    title = f"push of a {shape} {weight.dtype} weight: job {sender} to job {receiver}"
    width = 40 + max(max(senders, receivers) * (_BOX_W + _GAP), text_width(title, 14, True))
    top, bottom = 76, 76 + _BOX_H + _DROP
    out = [
        text_at(20, 28, title, 14, font_weight="bold"),
        text_at(20, 46, "each sender its own rows (tp, then dp_shard); a line per receiver", 11),
    ]

    def x_of(rank: int) -> float:
        return 20 + rank * (_BOX_W + _GAP)

    for route in push.routes:
        colour = colour_of(route.sender)
        for to in route.receivers:
            out.append(
                f'<line x1="{x_of(route.sender) + _BOX_W / 2:g}" y1="{top + _BOX_H}" '
                f'x2="{x_of(to) + _BOX_W / 2:g}" y2="{bottom}" stroke="{colour}" '
                f'stroke-width="3" data-route="{route.sender}-{to}"/>'
            )
    for rank in range(senders):
        rows = [p.box for r in push.routes if r.sender == rank for p in r.pieces]
        said = ", ".join(f"{b.start[0]}-{b.start[0] + b.size[0] - 1}" for b in rows[:2])
        out.append(
            rect(x_of(rank), top, _BOX_W, _BOX_H, 4, f'fill="{colour_of(rank)}" stroke="#374151"')
        )
        out.append(text_at(x_of(rank) + 6, top + 19, f"{sender} {rank}", 11))
        out.append(text_at(x_of(rank) + 6, top - 4, f"rows {said}" if said else "sends nothing", 9))
    for rank in range(receivers):
        out.append(rect(x_of(rank), bottom, _BOX_W, _BOX_H, 4, 'fill="#f3f4f6" stroke="#374151"'))
        out.append(text_at(x_of(rank) + 6, bottom + 19, f"{receiver} {rank}", 11))
    return out, int(width), bottom + _BOX_H + 20
