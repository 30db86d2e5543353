"""Who outside the job hears of this process's end: another job joined to it, whose
processes then name this one. And what such a job broke, for this process's stop line.

A listener (the join's) is told, in a few words, that this process raised an error of its own
(``"raised ValueError: ..."``) or that its launcher stops it; each is called once, bounded
by the listener itself, and what it raises is logged and dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("gangmesh")

STOPPED_BY_LAUNCHER = "was stopped (SIGTERM) by its launcher"
"""What a listener is told where the launcher stops this process (no fault of its own)."""

Listener = Callable[[str], None]
"""Told what ended this process, in words that follow its name."""

_listeners: list[Listener] = []
_finding = ""
"""What the last failure felt across a join named (``str`` of its GangError); "" where none."""


def listen(listener: Listener) -> None:
    """Tell ``listener`` what ends this process, from now on."""
    _listeners.append(listener)


def forget(listener: Listener) -> None:
    """Stop telling ``listener``; nothing where it was not listening."""
    if listener in _listeners:
        _listeners.remove(listener)


def tell(what: str) -> None:
    """Tell every listener that ``what`` ends this process."""
    for listener in list(_listeners):
        try:
            listener(what)
        except Exception as ex:  # the process is ending: its own duties come first
            log.debug("telling a joined job failed: %s", ex)


def note(finding: str) -> None:
    """Remember what a failure across a join named, for a stop line that follows it."""
    global _finding
    _finding = finding


def finding() -> str:
    """What the last failure across a join named; "" where none did."""
    return _finding
