"""Who broke the job: reports in the job's store, read only after a collective failed.

Each process of a job writes where it runs (host, pid) once, when its root gang is made. A
process about to die of an uncaught exception appends a report (rank, host, what it raised)
before it goes (:mod:`gangmesh.runtime.last_words`). A survivor whose collective failed reads the
reports; where none names a culprit it asks /proc what became of the processes on its own
host (:mod:`gangmesh.runtime.peer_state`): gone, killed by a signal, or stopped. Where that tells
nothing either, it waits a bounded time for the gang's other members to report the failure
too (looking again at the reports and at /proc meanwhile: a peer whose connection just
closed may still be exiting), and names those that did not, with their hosts. Collectives
that succeed read and write nothing here.

The reports go through a connection of their own to the job's store (MASTER_ADDR and
MASTER_PORT), made in the background when the root gang is made and used by one thread of
its own, with every wait bounded: where the store's host cannot be reached (this host was
cut off the network), a report or a reading gives up in seconds and the caller goes on
without it; the connection torch's groups use is never held. Entries written before this
process started belong to an earlier attempt of the job and are passed over.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch.distributed as dist
from typing_extensions import override

from gangmesh.runtime import peer_state

log = logging.getLogger("gangmesh")

_WAIT_FOR_PEERS = 3.0
"""Seconds a survivor waits for the other members of its gang to report the same failure,
where nothing else tells which rank broke."""
_POLL = 0.02
"""Seconds between two looks at the reports and at /proc during that wait."""
_READING_BOUND = _WAIT_FOR_PEERS + 1.5
"""Seconds a survivor spends on the reports in all, the wait for its peers included."""
_REPORT_BOUND = 2.0
"""Seconds a dying process spends on its report."""
_PREFIX = "gangmesh/failures"

T = TypeVar("T")


@dataclass(frozen=True)
class Culprit:
    """A rank that broke the job, and how."""

    rank: int
    host: str
    pid: int
    what: str
    seconds: float
    """When it broke (seconds since the epoch; the clock of the host that saw it)."""

    @override
    def __str__(self) -> str:
        return f"global rank {self.rank} on host {self.host} (pid {self.pid}) {self.what}"


@dataclass(frozen=True)
class Explanation:
    """What a survivor knows about a failed collective."""

    culprits: tuple[Culprit, ...]
    absent: tuple[int, ...] = ()
    """Gang ranks that did not report the failure (where no culprit is known)."""
    absent_global: tuple[int, ...] = ()
    absent_hosts: tuple[str, ...] = ()
    """The hosts of the absent ranks, where known."""
    silent_hosts: tuple[str, ...] = ()
    """Other hosts of which no member of the gang took part: unreachable or down."""

    @override
    def __str__(self) -> str:
        if self.culprits:
            return "; ".join(map(str, self.culprits))
        if not self.absent:
            return ""
        where = f" on {', '.join(self.absent_hosts)}" if self.absent_hosts else ""
        text = (
            f"gang ranks {list(self.absent)} (global ranks {list(self.absent_global)})"
            f"{where} did not take part and have not said why"
        )
        for host in self.silent_hosts:
            text += f"; host {host} is unreachable or down: none of its ranks in the gang answers"
        return text


class _Line:
    """A store client of its own, used by one daemon thread; every call bounded.

    A call that does not end in time is left to its thread (which the process does not
    wait for at exit); later calls queue behind it and give up in their turn.
    """

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[Any], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._connect = connect
        self._thread = threading.Thread(
            target=self._serve, name="gangmesh-failure-reports", daemon=True
        )
        self._thread.start()

    def _serve(self) -> None:
        store = None
        while True:
            item = self._calls.get()
            if item is None:
                return
            call, done = item
            try:
                if store is None:
                    store = self._connect()
                done.set_result(call(store))
            except Exception as ex:  # handed to the caller
                done.set_exception(ex)

    def call(self, work: Callable[[Any], T], bound: float) -> T:
        """``work(store)`` on the thread; TimeoutError after ``bound`` seconds."""
        done: Future[T] = Future()
        self._calls.put((work, done))
        return done.result(timeout=bound)

    def send(self, work: Callable[[Any], Any]) -> None:
        """``work(store)`` on the thread, without waiting for it."""
        self._calls.put((work, Future()))

    def end(self, bound: float) -> None:
        """End the thread once its calls are done, waiting up to ``bound`` seconds for it."""
        self._calls.put(None)
        self._thread.join(bound)


_lines: dict[tuple[str, int], _Line] = {}
"""One line per store address, kept across setups (a new connection costs the store a
lookup of this process's address)."""


def _line(address: str, port: int, timeout: timedelta) -> _Line:
    line = _lines.get((address, port))
    if line is None:

        def connect() -> Any:
            client = dist.TCPStore(  # type: ignore[attr-defined]
                address, port, is_master=False, timeout=timeout, wait_for_workers=False
            )
            return dist.PrefixStore(_PREFIX, client)  # type: ignore[attr-defined]

        line = _lines[(address, port)] = _Line(connect)
    return line


class Channel:
    """This process's link to the job's failure reports.

    :param line: the store connection of the reports.
    :param rank: this process's global rank.
    :param world_size: the number of processes of the job.
    """

    def __init__(self, line: _Line, rank: int, world_size: int) -> None:
        self._line = line
        self.rank = rank
        self.world_size = world_size
        self.host = socket.gethostname()
        self._since = peer_state.started_at(os.getpid())
        pid = os.getpid()
        record = {
            "rank": rank,
            "pid": pid,
            "started": peer_state.start_time(pid),
            "seconds": time.time(),
        }

        def tell(store: Any) -> None:
            store.append(f"host/{self.host}", json.dumps(record) + "\n")
            store.set(f"rank/{rank}", json.dumps({"host": self.host, "seconds": time.time()}))

        try:  # connected now, while the job is still setting up, not at its first failure
            line.call(tell, _REPORT_BOUND)
        except (RuntimeError, OSError, TimeoutError) as ex:
            log.debug("the job's failure reports cannot be reached yet: %s", ex)

    def report(self, what: str) -> Culprit:
        """Tell the job that this process breaks: ``what`` happened to it (bounded).

        :raises TimeoutError: the store did not take it in time.
        :raises RuntimeError: the store cannot be reached.
        """
        culprit = Culprit(self.rank, self.host, os.getpid(), what, time.time())
        entry = json.dumps(
            {"rank": self.rank, "host": self.host, "pid": culprit.pid, "what": what,
             "seconds": culprit.seconds}
        )  # fmt: skip
        self._line.call(lambda store: store.append("reports", entry + "\n"), _REPORT_BOUND)
        return culprit

    def explain(self, global_ranks: list[int], gang_rank: int, timeout: timedelta) -> Explanation:
        """Who broke the collective that a gang of ``global_ranks`` just failed, as far as
        known within a few seconds (see :data:`_READING_BOUND`).

        :raises TimeoutError: the store did not answer in time.
        :raises RuntimeError: the store cannot be reached.
        """
        wait = min(_WAIT_FOR_PEERS, timeout.total_seconds())
        return self._line.call(
            lambda store: self._explain(store, global_ranks, gang_rank, wait),
            wait + _READING_BOUND - _WAIT_FOR_PEERS,
        )

    def _explain(
        self, store: Any, global_ranks: list[int], gang_rank: int, wait: float
    ) -> Explanation:
        """Marks this process as a survivor of the gang's failure first; where neither the
        reports nor /proc name a culprit at once, looks again until the gang's other members
        have all reported the failure too, for at most ``wait`` seconds."""
        store.set(f"failed/{global_ranks[gang_rank]}", str(time.time()))
        others = [r for r in range(len(global_ranks)) if r != gang_rank]
        keys = [f"failed/{global_ranks[r]}" for r in others]
        deadline = time.monotonic() + wait
        while True:
            culprits = self._reported(store) or self._local_fates(store)
            if culprits:
                return Explanation(tuple(culprits))
            if not keys or self._all_current(store, keys) or time.monotonic() >= deadline:
                break
            time.sleep(_POLL)  # a peer whose connection just closed may still be ending
        pairs = zip(others, keys, strict=True)
        absent = tuple(r for r, key in pairs if not self._current(store, key))
        ranks = tuple(global_ranks[r] for r in absent)
        hosts = self._hosts(store, global_ranks)
        absent_hosts = tuple(dict.fromkeys(hosts[r] for r in ranks if r in hosts))
        silent = tuple(
            host
            for host in absent_hosts
            if host != self.host and all(r in ranks for r, h in hosts.items() if h == host)
        )
        return Explanation((), absent, ranks, absent_hosts, silent)

    def _current(self, store: Any, key: str) -> bool:
        """Whether ``key`` holds a time of this attempt of the job."""
        return bool(store.check([key])) and float(bytes(store.get(key))) >= self._since

    def _all_current(self, store: Any, keys: list[str]) -> bool:
        return bool(store.check(keys)) and all(self._current(store, key) for key in keys)

    def _entries(self, store: Any, key: str) -> list[dict[str, Any]]:
        """The entries of this attempt appended under ``key``."""
        if not store.check([key]):
            return []
        entries = [json.loads(line) for line in bytes(store.get(key)).decode().splitlines()]
        return [entry for entry in entries if float(entry["seconds"]) >= self._since]

    def _reported(self, store: Any) -> list[Culprit]:
        """The culprits that reported themselves, earliest first."""
        found: dict[int, Culprit] = {}
        for entry in self._entries(store, "reports"):
            culprit = Culprit(
                int(entry["rank"]),
                str(entry["host"]),
                int(entry["pid"]),
                str(entry["what"]),
                float(entry["seconds"]),
            )
            found.setdefault(culprit.rank, culprit)
        return sorted(found.values(), key=lambda c: c.seconds)

    def _local_fates(self, store: Any) -> list[Culprit]:
        """The processes of this job on this host that are gone, ended or stopped."""
        culprits: dict[int, Culprit] = {}
        for entry in reversed(self._entries(store, f"host/{self.host}")):
            rank, pid = int(entry["rank"]), int(entry["pid"])
            if rank == self.rank or rank in culprits:
                continue
            fate = peer_state.fate(pid, entry.get("started"))
            if fate is not None and not self._current(store, f"failed/{rank}"):
                culprits[rank] = Culprit(rank, self.host, pid, fate, time.time())
        return sorted(culprits.values(), key=lambda c: c.rank)

    def _hosts(self, store: Any, ranks: list[int]) -> dict[int, str]:
        """The hosts this attempt recorded for ``ranks``; {} where one is missing."""
        keys = [f"rank/{r}" for r in ranks]
        if not store.check(keys):
            return {}
        records = [json.loads(bytes(text)) for text in store.multi_get(keys)]
        if any(float(record["seconds"]) < self._since for record in records):
            return {}
        return {r: str(record["host"]) for r, record in zip(ranks, records, strict=True)}


_channel: Channel | None = None
_opened_for: int | None = None
"""The id of the default group the channel was opened for: wrapping it again opens nothing
new. Not the group itself: a reference would keep its backend and threads alive at exit."""


def open_channel(
    group: object, store: tuple[str, int], rank: int, world_size: int, timeout: timedelta
) -> None:
    """Make this process's reports go to the job's store at ``store`` (address, port), for
    default group ``group``; a job of one process has no one to tell, nothing is opened."""
    global _channel, _opened_for
    if world_size < 2 or (_channel is not None and _opened_for == id(group)):
        return
    _channel = Channel(_line(*store, timeout), rank, world_size)
    _opened_for = id(group)


def close_channel() -> None:
    """Stop reporting: the job's groups are shut down."""
    global _channel, _opened_for
    _channel = None
    _opened_for = None


def shut_down() -> None:
    """Close the channel and end every line's thread (at exit, and between two tests that
    share processes); a thread that a store which does not answer holds ends with the
    process."""
    close_channel()
    for line in _lines.values():
        line.end(_REPORT_BOUND)
    _lines.clear()


def channel() -> Channel | None:
    """This process's channel to the job's failure reports; None where there is none."""
    return _channel


def explain(global_ranks: list[int], gang_rank: int, timeout: timedelta) -> Explanation | None:
    """Who broke a failed collective of a gang of ``global_ranks``; None where nothing is known."""
    current = _channel
    if current is None:
        return None
    global _named_here
    try:
        found = current.explain(global_ranks, gang_rank, timeout)
    except (RuntimeError, ValueError, OSError, TimeoutError) as ex:
        log.debug("the job's failure reports cannot be read: %s", ex)
        return None
    _named_here = tuple(c.pid for c in found.culprits if c.host == current.host)
    return found


_named_here: tuple[int, ...] = ()
"""The pids of the culprits this process last named on its own host."""


def let_culprits_end(bound: float) -> None:
    """Wait up to ``bound`` seconds for the culprits this process named on its own host to
    end (a stopped one is not waited for): a launcher that watches both then sees the
    culprit end first, and names it rather than this process."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline and any(
        peer_state.fate(pid, None) is None for pid in _named_here
    ):
        time.sleep(_POLL)  # the culprit's exit is not signalled to this process
