"""A job meeting the other job of a join: its first epoch, waited for with a bound, and at each
push, receive or meet, the epoch it is in from then on.

Rank 0 of a job (its leader) reads and writes the join's store; the others learn what it
found over their own job's root gang (a few integers, at a point every rank reaches together),
or, while a job waits for the other to come, from the store (a wait there holds no collective
of the job's).
"""

from __future__ import annotations

import json
import socket
import time
from datetime import timedelta
from typing import Any

from gangmesh.assembly.join_sides import Epoch, Side, epoch_of, is_ready, latest, say_ready
from gangmesh.assembly.store_calls import peek
from gangmesh.runtime import faults
from gangmesh.runtime.gang import GangError

_POLL, _POLL_MOST = 0.01, 0.1
"""Seconds between two looks at the other job's arrival, doubling up to the longest: a job
that comes is met within a tenth of a second."""


def first_epoch(
    calls: Any, mine: Side, other: str, wait: timedelta, address: str
) -> tuple[Epoch, Side]:
    """The leader: the epoch of ``mine`` (this job's arrival) and the other job's last
    arrival, once both are in it, and that arrival.

    :raises GangError: the other job did not come within ``wait``, naming it and, where it
        arrived, its rank 0 and how it stands (or that it left the join, and did not come back).
    """
    deadline = time.monotonic() + wait.total_seconds()
    pause, said, seen = _POLL, None, None
    while True:
        found = latest(calls, other)
        if found is not None:
            seen = found
            epoch = epoch_of(mine, found)
            if epoch != said:
                say_ready(calls, epoch, mine.job)
                said = epoch
            if is_ready(calls, epoch, other):
                return epoch, found
        if time.monotonic() >= deadline:
            raise late(other, found, seen, wait, address)
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))  # the other job's arrival
        pause = min(2 * pause, _POLL_MOST)  # is not signalled to this process


def late(
    other: str, found: Side | None, seen: Side | None, wait: timedelta, address: str
) -> GangError:
    """The error of a job that waited ``wait`` for ``other`` at ``address``: ``found``, its
    last arrival now; ``seen``, the last one seen (where it left the join since)."""
    seconds = wait.total_seconds()
    if seen is None:
        error = GangError(f"job {other} did not come to the join at {address} within {seconds:g} s")
    else:
        leader = seen.members[0]
        if found is None:
            how = " and left it since"
        else:
            here = leader.host == socket.gethostname()
            fate = faults.process_fate(leader.pid, leader.started) if here else None
            how = f" and {fate}" if fate else ", not since"
        error = GangError(
            f"job {other} came to the join at {address} (its rank 0 on host {leader.host}, pid "
            f"{leader.pid}){how}: it did not meet this job within {seconds:g} s (its next "
            "push or receive meets it)"
        )
        error.culprits = (0,)
    error.job = other
    return error


def publish(calls: Any, mine: Side, size: int, outcome: tuple[Epoch, Side] | GangError) -> None:
    """The leader: tell the other ``size - 1`` ranks of its job how the meeting of ``mine``
    ended: the epoch and the other job's arrival in it (which that job may take out of the
    store as soon as it closes), or the error."""
    if size == 1:
        return
    if isinstance(outcome, GangError):
        said: dict[str, Any] = {"error": str(outcome), "culprits": list(outcome.culprits),
                                "job": outcome.job}  # fmt: skip
    else:
        said = {"epoch": list(outcome[0]), "other": outcome[1].text()}
    calls.set(meeting_key(mine.job, mine.incarnation), json.dumps(said))


def outcome(
    calls: Any, job: str, incarnation: int, size: int, wait: timedelta
) -> tuple[Epoch, Side]:
    """Another rank of a job of ``size`` ranks: the epoch its leader met the other job in, and
    the other job's arrival in it. The last of the ranks to read it takes it out of the store.

    :raises GangError: the leader found none, or said nothing within ``wait`` (it is named).
    """
    key = meeting_key(job, incarnation)
    try:
        calls.wait([key], wait)
    except RuntimeError as ex:
        error = GangError(f"rank 0 of job {job} did not say how the join went within "
                          f"{wait.total_seconds():g} s ({ex})")  # fmt: skip
        error.culprits = (0,)
        raise error from ex
    said = json.loads(calls.get(key))
    if int(calls.add(f"{key}/read", 1)) == size - 1:
        calls.delete_key(key)
        calls.delete_key(f"{key}/read")
    if "epoch" in said:
        return Epoch(*said["epoch"]), Side.read(said["other"])
    error = GangError(said["error"])
    error.culprits, error.job = tuple(said["culprits"]), said["job"]
    raise error


def meeting_key(job: str, incarnation: int) -> str:
    """Where the leader of arrival ``incarnation`` of ``job`` says how its meeting ended; with
    ``/read`` appended, how many of the job's other ranks read it."""
    return f"joined/{job}/{incarnation}"


class Lookout:
    """The leader's look, at each push, receive or meet, for the epoch to be in from the next
    one on: that of this job's and the other job's last arrivals (the other job's read again
    only where its number changed), and whether the other job is in it (asked until it is).
    The epoch is said to be this job's only once the job agreed that nothing of it failed
    (:meth:`say`): a job that is breaking never draws the other into an epoch with it."""

    def __init__(self, calls: Any, other: Side, epoch: Epoch) -> None:
        self._calls, self._other = calls, other
        self._said = self._ready = epoch

    def look(self, mine: Side, now: Epoch) -> tuple[Epoch, bool]:
        """The epoch, and whether the other job is in it; ``now``, not ready, where the other
        job left the join."""
        number = peek(self._calls, f"latest/{self._other.job}")
        if number is None:
            return now, False
        if int(number) != self._other.incarnation:
            found = latest(self._calls, self._other.job)
            self._other = found if found is not None else self._other
        epoch = epoch_of(mine, self._other)
        if epoch == self._ready:
            return epoch, True
        if is_ready(self._calls, epoch, self._other.job):
            self._ready = epoch
            return epoch, True
        return epoch, False

    def say(self, epoch: Epoch, job: str) -> None:
        """Say that ``job`` is in ``epoch`` (once): its ranks agreed that their last transfer
        went through, so that it goes on."""
        if epoch != self._said:
            say_ready(self._calls, epoch, job)
            self._said = epoch
