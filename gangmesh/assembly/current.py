"""The calling thread's current gangs: the innermost it entered and has not left."""

from __future__ import annotations

from gangmesh.assembly.gangs import ENTERED, Gangs


def maybe_get_current_gangs() -> Gangs | None:
    """The innermost Gangs entered in this thread (``with gangs:``, or fairseq2's
    ``set_gangs`` from :mod:`gangmesh.compat.fairseq2`) and not yet left, or None."""
    return ENTERED.innermost()
