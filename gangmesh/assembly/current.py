"""The calling thread's current gangs: a stack that ``with gangs:`` pushes and pops."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gangmesh.assembly.gangs import Gangs

_local = threading.local()


def _stack() -> list[Gangs]:
    stack: list[Gangs] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def push(gangs: Gangs) -> None:
    """Make ``gangs`` the calling thread's current gangs."""
    _stack().append(gangs)


def pop(gangs: Gangs) -> None:
    """Undo :func:`push` of ``gangs``; nothing if ``gangs`` is not the current gangs."""
    stack = _stack()
    if stack and stack[-1] is gangs:
        stack.pop()


def maybe_get_current_gangs() -> Gangs | None:
    """The innermost Gangs entered with ``with gangs:`` in this thread, or None."""
    stack = _stack()
    return stack[-1] if stack else None
