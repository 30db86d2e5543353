"""Hypothesis strategies for parallel layouts."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from gangmesh.topology import DIM_NAMES


@st.composite
def layouts(draw: st.DrawFn, max_world: int = 2**16) -> tuple[int, dict[str, int]]:
    """(world_size, sizes) with a valid factorisation; one size may be given as -1."""
    sizes = {}
    for name in DIM_NAMES:
        room = max_world // math.prod(sizes.values() or [1])
        sizes[name] = draw(st.integers(1, max(1, min(room, 64))))
    world_size = math.prod(sizes.values())
    if draw(st.booleans()):
        sizes[draw(st.sampled_from(DIM_NAMES))] = -1
    return world_size, sizes


def resolved(world_size: int, sizes: dict[str, int]) -> dict[str, int]:
    """The sizes with the -1 replaced by its inferred value."""
    known = math.prod(v for v in sizes.values() if v != -1)
    return {k: (world_size // known if v == -1 else v) for k, v in sizes.items()}
