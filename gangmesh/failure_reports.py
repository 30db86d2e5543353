"""Who broke the job: reports in the job's store, read only after a collective failed.

Each process of a job writes where it runs (host, pid) once, when its root gang is made. A
process about to die of an uncaught exception appends a report (rank, host, what it raised)
before it goes (:mod:`gangmesh.last_words`). A survivor whose collective failed reads the
reports; where none names a culprit it asks /proc what became of the processes on its own
host (:mod:`gangmesh.peer_state`): gone, killed by a signal, or stopped. Where that tells
nothing either, it waits a bounded time for the gang's other members to report the failure
too (looking again at the reports and at /proc meanwhile: a peer whose connection just
closed may still be exiting), and names those that did not. Collectives that succeed read
and write nothing here.

All keys live under ``gangmesh/failures/<restart>/`` of the default group's store, so a
restarted job under torchrun does not read the reports of the run before it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from gangmesh import peer_state

log = logging.getLogger("gangmesh")

_WAIT_FOR_PEERS = 3.0
"""Seconds a survivor waits for the other members of its gang to report the same failure,
where nothing else tells which rank broke."""
_POLL = 0.02
"""Seconds between two looks at the reports and at /proc during that wait."""


@dataclass(frozen=True)
class Culprit:
    """A rank that broke the job, and how."""

    rank: int
    host: str
    pid: int
    what: str
    seconds: float
    """When it broke (seconds since the epoch; the clock of the host that saw it)."""

    def __str__(self) -> str:
        return f"global rank {self.rank} on host {self.host} (pid {self.pid}) {self.what}"


@dataclass(frozen=True)
class Explanation:
    """What a survivor knows about a failed collective."""

    culprits: tuple[Culprit, ...]
    absent: tuple[int, ...] = ()
    """Gang ranks that did not report the failure (where no culprit is known)."""
    absent_global: tuple[int, ...] = ()

    def __str__(self) -> str:
        if self.culprits:
            return "; ".join(map(str, self.culprits))
        if self.absent:
            return (
                f"gang ranks {list(self.absent)} (global ranks {list(self.absent_global)}) "
                "did not take part and have not said why"
            )
        return ""


class Channel:
    """This process's link to the job's failure reports in ``store``.

    :param store: the default group's store.
    :param rank: this process's global rank.
    :param world_size: the number of processes of the job.
    """

    def __init__(self, store: Any, rank: int, world_size: int) -> None:
        self._store = store
        self.rank = rank
        self.world_size = world_size
        self.host = socket.gethostname()
        self._prefix = f"gangmesh/failures/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        pid = os.getpid()
        record = {"rank": rank, "pid": pid, "started": peer_state.start_time(pid)}
        self._store.append(self._key("host", self.host), json.dumps(record) + "\n")

    def _key(self, *parts: object) -> str:
        return self._prefix + "/".join(map(str, parts))

    def report(self, what: str) -> Culprit:
        """Tell the job that this process breaks: ``what`` happened to it.

        :raises RuntimeError: the store cannot be reached.
        """
        culprit = Culprit(self.rank, self.host, os.getpid(), what, time.time())
        entry = {
            "rank": culprit.rank,
            "host": culprit.host,
            "pid": culprit.pid,
            "what": what,
            "seconds": culprit.seconds,
        }
        self._store.append(self._key("reports"), json.dumps(entry) + "\n")
        return culprit

    def explain(self, global_ranks: list[int], gang_rank: int, timeout: timedelta) -> Explanation:
        """Who broke the collective that a gang of ``global_ranks`` just failed, as far as known.

        Marks this process as a survivor of the gang's failure first. Bounded: where neither
        the reports nor /proc name a culprit at once, it looks again until the gang's other
        members have all reported the failure too, for at most :data:`_WAIT_FOR_PEERS`
        seconds (less for a shorter ``timeout``).

        :raises RuntimeError: the store cannot be reached.
        """
        self._store.set(self._key("failed", global_ranks[gang_rank]), "1")
        others = [r for r in range(len(global_ranks)) if r != gang_rank]
        keys = [self._key("failed", global_ranks[r]) for r in others]
        deadline = time.monotonic() + min(_WAIT_FOR_PEERS, timeout.total_seconds())
        while True:
            culprits = self._reported() or self._local_fates()
            if culprits:
                return Explanation(tuple(culprits))
            if not keys or self._store.check(keys) or time.monotonic() >= deadline:
                break
            time.sleep(_POLL)  # a peer whose connection just closed may still be ending
        pairs = zip(others, keys, strict=True)
        absent = tuple(r for r, key in pairs if not self._store.check([key]))
        return Explanation((), absent, tuple(global_ranks[r] for r in absent))

    def _reported(self) -> list[Culprit]:
        """The culprits that reported themselves, earliest first."""
        key = self._key("reports")
        if not self._store.check([key]):
            return []
        found: dict[int, Culprit] = {}
        for line in bytes(self._store.get(key)).decode().splitlines():
            entry = json.loads(line)
            culprit = Culprit(
                int(entry["rank"]),
                str(entry["host"]),
                int(entry["pid"]),
                str(entry["what"]),
                float(entry["seconds"]),
            )
            found.setdefault(culprit.rank, culprit)
        return sorted(found.values(), key=lambda c: c.seconds)

    def _local_fates(self) -> list[Culprit]:
        """The processes of this job on this host that are gone, ended or stopped."""
        key = self._key("host", self.host)
        if not self._store.check([key]):
            return []
        culprits: dict[int, Culprit] = {}
        for line in bytes(self._store.get(key)).decode().splitlines():
            entry = json.loads(line)
            rank, pid = int(entry["rank"]), int(entry["pid"])
            if rank == self.rank or rank in culprits:
                continue
            fate = peer_state.fate(pid, entry.get("started"))
            if fate is not None and not self._store.check([self._key("failed", rank)]):
                culprits[rank] = Culprit(rank, self.host, pid, fate, time.time())
        return sorted(culprits.values(), key=lambda c: c.rank)


_channel: Channel | None = None
_opened_for: int | None = None
"""The id of the default group the channel was opened for: wrapping it again opens nothing
new. Not the group itself: a reference would keep its backend and threads alive at exit."""


def open_channel(group: object, store: Any, rank: int, world_size: int) -> None:
    """Make this process's reports go to ``store``, the store of default group ``group``.

    A job of one process has no one to tell; nothing is opened for it.
    """
    global _channel, _opened_for
    if world_size < 2 or (_channel is not None and _opened_for == id(group)):
        return
    try:
        _channel = Channel(store, rank, world_size)
        _opened_for = id(group)
    except (RuntimeError, ValueError, AttributeError) as ex:
        log.debug("failure reports are off: the store does not take them: %s", ex)
        _channel = None


def close_channel() -> None:
    """Stop reporting: the job's groups are shut down."""
    global _channel, _opened_for
    _channel = None
    _opened_for = None


def channel() -> Channel | None:
    """This process's channel to the job's failure reports; None where there is none."""
    return _channel


def explain(global_ranks: list[int], gang_rank: int, timeout: timedelta) -> Explanation | None:
    """Who broke a failed collective of a gang of ``global_ranks``; None where nothing is known."""
    current = _channel
    if current is None:
        return None
    try:
        return current.explain(global_ranks, gang_rank, timeout)
    except (RuntimeError, ValueError, OSError) as ex:
        log.debug("the job's failure reports cannot be read: %s", ex)
        return None
