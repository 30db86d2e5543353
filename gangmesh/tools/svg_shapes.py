"""The pieces of the SVG picture: text, shapes, colours, and the grid of rank cells."""

from __future__ import annotations

import colorsys
import textwrap
from dataclasses import dataclass
from html import escape

import numpy as np

CELL_H, GAP, NODE_GAP = 36, 4, 8
"""Height of a rank's cell, the gap between cells, and the extra gap between nodes."""

MARKS = {True: ("#dc2626", "to fix"), False: ("#d97706", "unavoidable")}
"""The colour and label of a group's crossing of nodes: one to fix (True), one that cannot be
avoided (False)."""


def text_width(text: str, size: float, bold: bool = False) -> float:
    """A generous estimate of the drawn width of ``text`` in a sans-serif font."""
    return len(text) * size * (0.68 if bold else 0.61)


def text_at(x: float, y: float, text: str, size: int = 12, **attrs: str) -> str:
    extra = "".join(f' {key.replace("_", "-")}="{value}"' for key, value in attrs.items())
    return f'<text x="{x:g}" y="{y:g}" font-size="{size}"{extra}>{escape(text)}</text>'


def rect(x: float, y: float, w: float, h: float, rx: float, paint: str) -> str:
    return f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" rx="{rx:g}" {paint}/>'


def dashed(colour: str) -> str:
    return f'fill="none" stroke="{colour}" stroke-width="2" stroke-dasharray="5 3"'


PALETTE = (
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
    "#b3de69", "#fccde5", "#bc80bd", "#ccebc5", "#ffed6f",
)  # fmt: skip
"""Light fills that stay distinct side by side (ColorBrewer's Set3 less its grey)."""


def colour_of(group: int) -> str:
    """A light fill of its own for each group: the palette first, then hues a golden angle
    apart at five lightnesses in turn, so that neighbours differ and no two of the first 512
    are the same (a panel draws at most SVG_FULL_RANKS groups)."""
    if 0 <= group < len(PALETTE):
        return PALETTE[group]
    lightness = (0.82, 0.7, 0.9, 0.76, 0.64)[group % 5]
    red, green, blue = colorsys.hls_to_rgb((group * 0.381966) % 1.0, lightness, 0.7)
    return f"#{round(red * 255):02x}{round(green * 255):02x}{round(blue * 255):02x}"


@dataclass(frozen=True)
class Grid:
    """Where each drawn rank sits: rows of at most ``cols`` cells, nodes kept apart."""

    ranks: np.ndarray
    per_node: int | None
    cols: int
    cell_w: int
    labels: list[tuple[float, str]]
    spots: dict[int, tuple[float, float]]
    width: float
    height: float

    @staticmethod
    def build(lo: int, hi: int, per_node: int | None, cols: int, cell_w: int) -> Grid:
        unit = per_node or cols
        labels: list[tuple[float, str]] = []
        spots: dict[int, tuple[float, float]] = {}
        y, last, start = 0.0, None, lo
        while start < hi:
            node = start // unit
            if last is not None:
                y += CELL_H + GAP + (NODE_GAP if per_node and node != last else 0)
            end = min(hi, start + cols, (node + 1) * unit)
            if per_node:
                labels.append((y, f"node {node}" if node != last else ""))
            else:
                labels.append((y, f"ranks {start}-{end - 1}"))
            for r in range(start, end):
                spots[r] = ((r - start) * (cell_w + GAP), y)
            last, start = node, end
        label_w = max(text_width(text, 11) for _, text in labels) + 10
        spots = {r: (x + label_w, y) for r, (x, y) in spots.items()}
        width = label_w + cols * (cell_w + GAP)
        ranks = np.arange(lo, hi, dtype=np.int64)
        return Grid(ranks, per_node, cols, cell_w, labels, spots, width, y + CELL_H)


def row_length(per_node: int) -> int:
    """Cells per row for nodes of ``per_node`` ranks: a whole node, or an even share of one."""
    if per_node <= 16:
        return per_node
    return max([d for d in range(8, 17) if per_node % d == 0], default=16)


def wrap_text(text: str, width: float, size: int) -> list[str]:
    return textwrap.wrap(text, max(20, int(width / (size * 0.61)))) or [""]
