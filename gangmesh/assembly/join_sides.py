"""The two sides of a join in its store: what each job says of itself as it arrives, and the
epochs the two meet in.

Keys, under the join's prefix:

- ``incarnations/<job>``: a counter; each arrival of a job takes the next number (a job
  arrives as it joins, again once a push across the join failed, and anew once restarted);
- ``side/<job>/<n>``: what arrival ``n`` says (:class:`Side`: its plan, its tensors' shards,
  each rank's host, pid and start), and ``latest/<job>``: the last arrival's number; a job's
  arrival before last is deleted as it arrives;
- ``ready/<a>.<b>/<job>``: the job is in the epoch of arrivals ``a`` and ``b`` (the two jobs
  by name): an epoch is used once both are in it;
- ``joined/<job>/<n>``: what rank 0 of arrival ``n`` found as it met the other job (the
  epoch and the other job's arrival in it, or the error), read by the job's other ranks, and
  ``joined/<job>/<n>/read``: how many read it (the last takes both out);
- ``reports/<job>``: what ended each process of the job, in its own words, or that its
  launcher stopped it (one JSON line per process, with its rank and pid);
  ``at/<job>/<rank>``: the epoch and number of the last transfer it entered;
- ``finding/<a>.<b>/<job>``: the GangError a rank of the job found as a transfer of the epoch
  failed, for its other ranks.

An epoch is named by the arrivals it pairs, so two jobs that read each other's arrivals at
different moments never take one epoch for another; its number, ``a + b - 1``, grows with
every arrival of either job.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any, NamedTuple

from gangmesh.assembly.store_calls import peek
from gangmesh.plan.join_plan import plan_from_record, plan_record
from gangmesh.plan.shards import TensorShards
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime import faults


class Member(NamedTuple):
    """A process of a joined job: its rank, host, pid, when it started (clock ticks), and where
    a process of its host asks where it stands (its stack dump's descriptor and main thread;
    None where it has none)."""

    rank: int
    """Its rank in its job."""
    host: str
    """The host it runs on."""
    pid: int
    """Its process id."""
    started: int | None
    """When it started (clock ticks since its host booted), which tells it from a later
    process of the same pid."""
    dump: int | None
    """The descriptor of its stack dumps."""
    main: int | None
    """Its main thread's id."""

    @classmethod
    def this_process(cls, rank: int) -> Member:
        """This process, as rank ``rank`` of its job."""
        pid = os.getpid()
        dump, main = faults.stack_dumps() or (None, None)
        return cls(rank, socket.gethostname(), pid, faults.process_start(pid), dump, main)


class Epoch(NamedTuple):
    """The arrivals of the two jobs (by name, sorted) that an epoch pairs."""

    first: int
    """The arrival of the job whose name sorts first."""
    second: int
    """The other job's arrival."""

    @property
    def key(self) -> str:
        """The epoch's name in the store."""
        return f"{self.first}.{self.second}"

    def of(self, job: str, other: str) -> int:
        """The arrival of ``job`` (joined with ``other``) that the epoch pairs.

        :param job: a job's name.
        :param other: the other job's name.
        """
        return self.first if job < other else self.second

    @property
    def number(self) -> int:
        """The epoch's number: higher for every arrival of either job."""
        return self.first + self.second - 1


@dataclass(frozen=True)
class Side:
    """What one arrival of a job says of itself."""

    job: str
    """The job's name."""
    incarnation: int
    """The arrival's number."""
    plan: MeshTopology
    """The job's plan."""
    shards: dict[str, TensorShards]
    """How it holds each tensor it pushes or receives."""
    members: tuple[Member, ...]
    """Its processes, by rank."""

    def text(self) -> str:
        """The side as the store keeps it."""
        return json.dumps({
            "job": self.job, "incarnation": self.incarnation, "plan": plan_record(self.plan),
            "shards": {name: s.record() for name, s in self.shards.items()},
            "members": [list(m) for m in self.members],
        })  # fmt: skip

    @classmethod
    def read(cls, text: bytes | str) -> Side:
        """The side :meth:`text` wrote.

        :param text: what the store keeps.
        :raises ValueError: text that is no side's.
        """
        said: dict[str, Any] = json.loads(text)
        return cls(
            str(said["job"]),
            int(said["incarnation"]),
            plan_from_record(said["plan"]),
            {name: TensorShards.from_record(r) for name, r in said["shards"].items()},
            tuple(Member(*m) for m in said["members"]),
        )


def arrive(calls: Any, side: Side) -> Side:
    """Write ``side`` as the job's next arrival; the arrival with its number."""
    number = int(calls.add(f"incarnations/{side.job}", 1))
    arrived = Side(side.job, number, side.plan, side.shards, side.members)
    calls.set(f"side/{side.job}/{number}", arrived.text())
    calls.set(f"latest/{side.job}", str(number))
    calls.delete_key(f"side/{side.job}/{number - 2}")
    return arrived


def latest(calls: Any, job: str) -> Side | None:
    """The last arrival of ``job``; None where it never arrived."""
    number = peek(calls, f"latest/{job}")
    text = None if number is None else peek(calls, f"side/{job}/{number}")
    return None if text is None else Side.read(text)


def epoch_of(mine: Side, other: Side) -> Epoch:
    """The epoch that pairs two arrivals."""
    first, second = sorted([mine, other], key=lambda side: side.job)
    return Epoch(first.incarnation, second.incarnation)


def say_ready(calls: Any, epoch: Epoch, job: str) -> None:
    """Say that ``job`` is in ``epoch``."""
    calls.set(f"ready/{epoch.key}/{job}", "1")


def is_ready(calls: Any, epoch: Epoch, job: str) -> bool:
    """Whether ``job`` said it is in ``epoch``."""
    return bool(calls.check([f"ready/{epoch.key}/{job}"]))


def epoch_keys(epoch: Epoch, jobs: tuple[str, ...]) -> list[str]:
    """The keys an epoch leaves, besides its bridges'."""
    return [f"ready/{epoch.key}/{job}" for job in jobs] + [f"finding/{epoch.key}/{j}" for j in jobs]
