"""How each rank of a ``gangmesh_world`` test ended, and the test's report from that.

A rank leaves three files per test: the phases its pytest reported (JSON), its output,
and the stacks of its threads written just before the deadline. :func:`outcome_of`
reads them, with the exit code or the reason the rank was killed, into an
:class:`Outcome`; :func:`report_outcomes` fails or skips the test from every rank's.
Imports neither torch nor the rest of gangmesh.
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

__all__ = ["DUMP_AHEAD", "Outcome", "RankEnd", "WorldFailed", "outcome_of", "report_outcomes"]

DUMP_AHEAD = 1.0
"""Seconds before its deadline that a rank writes the stack of every thread, for the report."""
_TAIL_LINES = 30


@dataclass
class RankEnd:
    """Where one rank left its files for a test, and how its part of the test ended."""

    rank: int
    log: Path
    result: Path
    stacks: Path
    code: int | None = None  # exit code (0 also for a pooled rank that finished the test)
    killed_after: str = ""  # why it was killed, if it was


@dataclass
class Outcome:
    """How one rank ended, in the words of the report."""

    rank: int
    status: str  # passed, skipped, failed, unfinished
    line: str
    details: str = ""
    at: float = math.inf  # when it failed (time.monotonic()), to name the first failure first


def phases_of(result: Path) -> list[dict[str, Any]]:
    """The report phases a rank wrote for its test (none if it wrote nothing readable)."""
    with contextlib.suppress(OSError, ValueError):
        phases: list[dict[str, Any]] = json.loads(result.read_text())["phases"]
        return phases
    return []


def outcome_of(end: RankEnd, size: int) -> Outcome:
    """The outcome of one rank of a world of ``size``."""
    name = f"rank {end.rank} of {size}"
    phases = phases_of(end.result)
    tail = _tail(end.log)
    output = f"output of {name} (last lines):\n{tail}" if tail else f"{name} printed nothing"
    if end.killed_after:
        stacks = _test_frames(_tail(end.stacks, lines=400))
        if stacks:
            output += f"\n\nstacks of {name}, {DUMP_AHEAD:g} s before it was killed:\n{stacks}"
        return Outcome(end.rank, "unfinished", f"{name}: {end.killed_after}", output)
    failed = [phase for phase in phases if phase["outcome"] == "failed"]
    if failed:
        phase = failed[0]
        where = "" if phase["when"] == "call" else f" (in {phase['when']})"
        sections = "".join(
            f"\n--- {name}: {title} ---\n{content.rstrip()}" for title, content in phase["sections"]
        )
        line = f"{name}{where}: {phase['message']}"
        return Outcome(end.rank, "failed", line, phase["text"] + sections, phase["at"])
    if not any(phase["when"] == "teardown" for phase in phases):
        reason = f"exited with code {end.code} before the test finished"
        if not phases:
            reason = f"exited with code {end.code} before reporting any result"
        return Outcome(end.rank, "failed", f"{name}: {reason}", output)
    if end.code != 0:
        return Outcome(
            end.rank, "failed", f"{name}: the test ended but pytest exited with code {end.code}"
        )
    skipped = [phase for phase in phases if phase["outcome"] == "skipped"]
    if skipped:
        return Outcome(end.rank, "skipped", skipped[0]["message"])
    return Outcome(end.rank, "passed", f"{name}: passed")


class WorldFailed(Exception):
    """A ``gangmesh_world`` test failed on some rank; the message names each one."""


def report_outcomes(outcomes: list[Outcome], size: int, timeout: float) -> None:
    """Fail the test, naming every rank that did not pass, or skip it if every rank skipped.

    :raises WorldFailed: a rank failed, crashed or did not finish.
    """
    bad = sorted((o for o in outcomes if o.status in ("failed", "unfinished")), key=lambda o: o.at)
    if bad:
        lines = []
        if all(o.status == "unfinished" for o in bad):
            lines.append(
                f"timed out after {timeout:g} s: {_ranks([o.rank for o in bad])} of {size} "
                "did not finish"
            )
        lines += [o.line.splitlines()[0] for o in bad]
        for status in ("passed", "skipped"):
            same = [o.rank for o in outcomes if o.status == status]
            if same:
                lines.append(f"{status}: {_ranks(same)} of {size}")
        for outcome in bad:
            title = f" rank {outcome.rank} of {size} "
            lines += ["", title.center(78, "_"), outcome.details.rstrip()]
        raise WorldFailed("\n".join(lines))
    if all(o.status == "skipped" for o in outcomes):
        reasons = sorted({o.line for o in outcomes})
        pytest.skip(reasons[0] if len(reasons) == 1 else "; ".join(reasons))


def _ranks(ranks: list[int]) -> str:
    """``"rank 3"`` or ``"ranks 0, 2"``."""
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _test_frames(stacks: str) -> str:
    """A faulthandler dump without the frames of pytest itself."""
    machinery = (
        "/_pytest/",
        "/pluggy/",
        "/pytest/__main__.py",
        "<frozen runpy>",
        "/gangmesh/testing/forkserver",  # forkserver.py and forkserver_process.py
        "/gangmesh/testing/rank.py",
    )
    return "\n".join(
        line for line in stacks.splitlines() if not any(part in line for part in machinery)
    )


def _tail(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])
