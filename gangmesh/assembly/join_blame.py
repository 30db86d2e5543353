"""Who broke a collective across a join: the GangError that names a process of either job by
job, rank, host and pid.

What a process says as it ends (its own error; its launcher stopping it) is in the join's
store (``reports/<job>``: JSON lines with its pid), said before it ends; what /proc says of the
processes on this host, after. A survivor looks, for a couple of seconds at most, for a process
that raised, or that is gone, killed, exited or stopped without its launcher stopping it; that
is the culprit (a process its launcher stopped is a consequence: its job stops every process
once one broke). Where none is found, a member of the collective that is alive but never
entered it is named as hung; then those whose launcher stopped them; then the members that
did not finish it.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from typing_extensions import override

from gangmesh.assembly.join_sides import Epoch, Member, Side
from gangmesh.assembly.store_calls import peek
from gangmesh.runtime import faults
from gangmesh.runtime.gang import GangError

log = logging.getLogger("gangmesh")

LOOKING = 2.0
"""Seconds a survivor looks for the culprit, within the 3 s it may take beyond the timeout,
where the peers' connections closed (they may be ending still)."""
LOOKING_AFTER_TIMEOUT = 0.3
"""The same where the collective timed out: a process that ended or stopped shows at once."""
_POLL, _POLL_MOST = 0.02, 0.25


@dataclass(frozen=True)
class Fate:
    """What became of a process of a joined job."""

    job: str
    member: Member
    what: str

    @override
    def __str__(self) -> str:
        m = self.member
        return f"rank {m.rank} of job {self.job} on host {m.host} (pid {m.pid}) {self.what}"


@dataclass(frozen=True)
class Transfer:
    """A collective across the join: the epoch, its number there, and its members."""

    epoch: Epoch
    number: int
    members: tuple[tuple[str, int], ...]
    """(job, rank) of each member."""


def report(calls: Any, job: str, member: Member, what: str) -> None:
    """Say in the join's store that ``member`` of ``job`` ends: ``what`` ends it."""
    entry = {"rank": member.rank, "pid": member.pid, "what": what, "seconds": time.time()}
    calls.append(f"reports/{job}", json.dumps(entry) + "\n")


def mark(calls: Any, job: str, rank: int, transfer: Transfer) -> None:
    """Say that rank ``rank`` of ``job`` enters ``transfer`` (not waited for: it is read only
    after a collective of the transfer failed, by then long written)."""
    calls.send("set", f"at/{job}/{rank}", f"{transfer.epoch.key}:{transfer.number}")


def blame(
    calls: Any,
    what: str,
    cause: BaseException,
    sides: dict[str, Side],
    me: tuple[str, int],
    transfer: Transfer,
    timeout: timedelta,
) -> GangError:
    """The GangError of ``what`` (a collective of ``transfer`` that ``cause`` ended on rank
    ``me``), naming who broke it (see the module docstring); recorded in this process's error
    file, and for its stop line."""
    failed_at = time.time()
    detail = faults.summary(cause, timeout.total_seconds())
    looking = LOOKING_AFTER_TIMEOUT if detail.startswith("timed out") else LOOKING
    try:
        fates = _look(calls, sides, me, transfer, looking)
    except (RuntimeError, ValueError, ConnectionError) as ex:  # the join's store is gone
        log.debug("the join's reports cannot be read: %s", ex)
        fates = []
    if fates:
        detail = f"{'; '.join(map(str, fates))} ({detail})"
    error = GangError(f"{what}: {detail}")
    error.culprits = tuple(f.member.rank for f in fates if f.job == fates[0].job)
    error.job = fates[0].job if fates else None
    faults.record_named(error, failed_at)
    faults.note_outside(str(error))
    return error


def _look(
    calls: Any, sides: dict[str, Side], me: tuple[str, int], transfer: Transfer, looking: float
) -> list[Fate]:
    """The culprits, looking for up to ``looking`` seconds; else the hung, the stopped or the
    members that did not finish."""
    host = socket.gethostname()
    deadline = time.monotonic() + looking
    pause = _POLL
    while True:
        said = _reports(calls, sides)
        culprits = [fate for fate in said.values() if fate.what != faults.STOPPED_BY_LAUNCHER]
        stopped = {key for key, fate in said.items() if fate.what == faults.STOPPED_BY_LAUNCHER}
        culprits += _ended(sides, me, host, set(said), stopped)
        if culprits or time.monotonic() >= deadline:
            break
        time.sleep(pause)  # a peer's end is not signalled to this process
        pause = min(2 * pause, _POLL_MOST)
    if culprits:
        return culprits
    hung = _hung(calls, sides, me, host, transfer, set(said))
    if hung:
        return hung
    if said:
        return list(said.values())
    return [Fate(job, _member(sides, job, rank), "did not finish it and has not said why")
            for job, rank in transfer.members if (job, rank) != me][:8]  # fmt: skip


def _member(sides: dict[str, Side], job: str, rank: int) -> Member:
    return sides[job].members[rank]


def _reports(calls: Any, sides: dict[str, Side]) -> dict[tuple[str, int], Fate]:
    """What the current processes of both jobs said as they ended, by (job, rank)."""
    found: dict[tuple[str, int], Fate] = {}
    for job, side in sides.items():
        text = peek(calls, f"reports/{job}") or ""
        for line in text.splitlines():
            entry = json.loads(line)
            rank = int(entry["rank"])
            if 0 <= rank < len(side.members) and side.members[rank].pid == int(entry["pid"]):
                found.setdefault((job, rank), Fate(job, side.members[rank], str(entry["what"])))
    return found


def _ended(
    sides: dict[str, Side],
    me: tuple[str, int],
    host: str,
    said: set[tuple[str, int]],
    stopped: set[tuple[str, int]],
) -> list[Fate]:
    """The processes on this host that ended or stopped, as /proc tells, without a word and
    not by their launcher."""
    found = []
    for job, side in sides.items():
        for member in side.members:
            key = (job, member.rank)
            if key == me or key in said or key in stopped or member.host != host:
                continue
            fate = faults.process_fate(member.pid, member.started)
            if fate is not None and fate not in faults.TERMINATED:
                found.append(Fate(job, member, fate))
    return found


def _hung(
    calls: Any,
    sides: dict[str, Side],
    me: tuple[str, int],
    host: str,
    transfer: Transfer,
    said: set[tuple[str, int]],
) -> list[Fate]:
    """The processes that never entered ``transfer`` and said nothing: those of this host
    whose main thread stands in the program's own code (not in a collective, where a process
    waits for a hung one of its job); else the transfer's members among them, alive and hung
    where /proc tells, silent elsewhere."""
    wanted = f"{transfer.epoch.key}:{transfer.number}"
    absent = [  # asked of this host's processes and the transfer's members only
        (job, m) for job, side in sides.items() for m in side.members
        if (m.host == host or (job, m.rank) in transfer.members)
        and (job, m.rank) != me and (job, m.rank) not in said
        and _mark(calls, job, m.rank) != wanted
    ]  # fmt: skip
    stuck = []
    for job, m in absent:
        alive = m.host == host and faults.process_fate(m.pid, m.started) is None
        asked = alive and m.dump is not None and m.main is not None
        stands = faults.where_stands(m.pid, m.dump, m.main) if asked else None  # type: ignore[arg-type]
        if stands is not None and not stands.in_collective:
            stuck.append(Fate(job, m, f"is alive but never entered it: it is at {stands.where}"))
    if stuck:
        return stuck
    found = []
    for job, m in absent:
        if (job, m.rank) not in transfer.members:
            continue
        alive = m.host == host and faults.process_fate(m.pid, m.started) is None
        what = "is alive but never entered it (hung, or busy elsewhere)" if alive else (
            "never entered it and has not said why (hung, stopped or gone)")  # fmt: skip
        found.append(Fate(job, m, what))
    return found


def _mark(calls: Any, job: str, rank: int) -> str:
    """The transfer rank ``rank`` of ``job`` last entered (see :func:`mark`); "" where none."""
    return peek(calls, f"at/{job}/{rank}") or ""
