"""The calling thread's current gangs: the innermost entered with ``with gangs:``."""

from __future__ import annotations

from gangmesh.assembly.gangs import Gangs, entered_gangs


def maybe_get_current_gangs() -> Gangs | None:
    """The innermost Gangs entered with ``with gangs:`` in this thread, or None."""
    entered = entered_gangs()
    return entered[-1] if entered else None
