"""A process's link to the job's failure reports: what it says, and what it reads, and when.

What the reports are for, and how a survivor reads them, is told in
:mod:`gangmesh.runtime.faults.failure_reports`.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import gangmesh.runtime.faults.error_files as error_files
import gangmesh.runtime.faults.peer_state as peer_state
import gangmesh.runtime.faults.report_reading as report_reading
import gangmesh.runtime.faults.stacks as stacks
from gangmesh.runtime.faults.culprits import Call, Culprit, Explanation
from gangmesh.runtime.faults.report_reading import (
    JOB,
    ONCE_AT_MOST,
    Reading,
    absent_for,
    append_line,
    count_in,
    gang_of,
    set_state,
)
from gangmesh.runtime.faults.store_line import Line

log = logging.getLogger("gangmesh")

WAIT_FOR_PEERS = 3.0
"""Seconds a survivor waits for the other members of its gang to report the same failure,
where nothing else tells which rank broke."""
_POLL = 0.02
"""Seconds between the first two looks at the reports and at /proc during that wait; each
pause is twice the last, up to :data:`_POLL_MOST`."""
_POLL_MOST = 0.25
"""The longest pause between two looks: a survivor's requests to the store stay a few dozen
per failure, whatever the size of the world."""
PEERS_FINDINGS = 0.5
"""Seconds a survivor that found no culprit, once every member of its gang has reported the
failure too, still looks for what they found (a culprit they are naming, or one whose end
it saw midway: neither stopped nor ended yet)."""
READING_BOUND = WAIT_FOR_PEERS + PEERS_FINDINGS + 1.0
"""Seconds a survivor spends on the reports in all, the wait for its peers included."""
REPORT_BOUND = 2.0
"""Seconds a dying process spends on its report."""
PREFIX = "gangmesh/failures"
_MARGIN = 0.3
"""Seconds of a reading's bound kept for what follows a stuck rank's answer."""
HUNG = "took no part in the collective, alive (hung), and was ended by a survivor"
"""What a survivor under torchrun says of a hung rank on its host that it ends."""


class Channel:
    """This process's link to the job's failure reports.

    :param line: the store connection of the reports.
    :param rank: this process's global rank.
    :param world_size: the number of processes of the job.
    """

    def __init__(self, line: Line, rank: int, world_size: int, serves_store: bool = False) -> None:
        self._line = line
        self.rank = rank
        self.world_size = world_size
        self.serves_store = serves_store
        """Whether the store lives in this process (rank 0 where no launcher's agent serves
        it): then it ends with this process, and the reports with it."""
        self.took_part = False
        """Whether this process reported a failure of its own or read the reports."""
        self._state: dict[str, Any] = {}
        """This process's own document in the reports (see :mod:`.report_reading`)."""
        self._rank_0: dict[str, Any] | None = None
        self.host = socket.gethostname()
        self._since = peer_state.started_at(os.getpid())
        pid = os.getpid()
        record = {
            "rank": rank,
            "pid": pid,
            "started": peer_state.start_time(pid),
            "seconds": time.time(),
            "error_file": error_files.own_path(),
        }
        dump = stacks.install()  # where it stands, should it be named as taking no part
        if dump is not None:
            record["stacks"], record["main"] = dump

        def tell(store: Any) -> None:
            report_reading.register(store, rank, self.host, record)

        def learn_rank_0(store: Any) -> None:
            deadline = time.monotonic() + REPORT_BOUND  # no store wait: its timeout is loud
            while not store.check(["rank/0"]) and time.monotonic() < deadline:
                time.sleep(_POLL)
            if store.check(["rank/0"]):
                self._rank_0 = json.loads(bytes(store.get("rank/0")))

        try:  # connected now, while the job is still setting up, not at its first failure
            line.call(tell, REPORT_BOUND)
            if not serves_store:
                line.send(learn_rank_0)  # the reports end with rank 0 where it serves them
        except (RuntimeError, OSError, TimeoutError) as ex:
            log.debug("the job's failure reports cannot be reached yet: %s", ex)

    def report(self, what: str) -> Culprit:
        """Tell the job that this process breaks: ``what`` happened to it (bounded).

        :raises TimeoutError: the store did not take it in time.
        :raises RuntimeError: the store cannot be reached.
        """
        self.took_part = True
        pid = os.getpid()
        started = peer_state.start_time(pid)
        culprit = Culprit(self.rank, self.host, pid, what, time.time(), started=started)
        entry = {"rank": self.rank, "host": self.host, "pid": pid, "what": what,
                 "seconds": culprit.seconds, "started": started}  # fmt: skip
        self._line.call(lambda store: append_line(store, "reports", entry), REPORT_BOUND)
        return culprit

    def explain(
        self,
        global_ranks: list[int],
        gang_rank: int,
        timeout: timedelta,
        call: Call | None = None,
        known: bool = True,
    ) -> Explanation:
        """Who broke the collective that a gang of ``global_ranks`` just failed, as far as
        known within a few seconds (see :data:`READING_BOUND`); ``known``: whether
        ``global_ranks`` are the collective's group (else the job's).

        :raises TimeoutError: the store did not answer in time.
        :raises RuntimeError: the store cannot be reached.
        """
        self.took_part = True
        wait = min(WAIT_FOR_PEERS, timeout.total_seconds())

        bound = wait + READING_BOUND - WAIT_FOR_PEERS
        ends = time.monotonic() + bound - _MARGIN  # a stuck rank's answer must fit in too

        def explain_and_say_so(store: Any) -> Explanation:
            found = self._explain(store, global_ranks, gang_rank, wait, call, ends, known)
            self._say(store, explained=time.time())
            gang = gang_of(global_ranks)
            count_in(store, gang, "explained", self.rank)
            count_in(store, JOB, "explained", self.rank)
            return found

        return self._line.call(explain_and_say_so, bound)

    def who_broke(self, bound: float) -> str:
        """This process is being stopped: say so, and what it knows, in words that follow
        "stopped": "after" who broke the job as far as the reports, the other survivors and
        /proc tell, or else which ranks had not reached the job's store ("" where none of
        these tells; bounded by ``bound`` seconds; raises as :meth:`explain`)."""

        def look(store: Any) -> str:
            read = self._reading(store)
            self._say(store, stopped=time.time())
            culprits = read.reported() or read.named_by() or read.local_fates()
            if culprits:
                return "after " + "; ".join(map(str, culprits))
            missing = read.unregistered(self.world_size)
            if not missing:
                return ""
            return f"during setup; global ranks {missing} had not reached the job's store"

        return self._line.call(look, bound)

    def fates(self, ranks: list[int], bound: float) -> dict[int, Culprit]:
        """What became of ``ranks`` (global ranks that did not come to a meeting), as their
        reports, the other survivors and /proc tell (bounded; raises as :meth:`explain`)."""

        def look(store: Any) -> dict[int, Culprit]:
            read = self._reading(store)
            found = {c.rank: c for c in read.local_fates()}
            found.update((c.rank, c) for c in read.named_by())
            found.update((c.rank, c) for c in read.reported())
            return {rank: found[rank] for rank in ranks if rank in found}

        return self._line.call(look, bound)

    def here(
        self,
        ranks: tuple[int, ...],
        bound: float,
        hung: bool = True,
        where: dict[int, str] | None = None,
    ) -> list[Culprit]:
        """Those of ``ranks`` that run on this host and are alive; with ``hung``, taking no
        part (and, as ``where`` says, where they stand), and named so in the reports, for
        the survivors that see them end (bounded; raises as :meth:`explain`)."""
        at = where or {}

        def what(rank: int) -> str:
            return f"{HUNG}; it was at {at[rank]}" if rank in at else HUNG

        def look(store: Any) -> list[Culprit]:
            read = self._reading(store)
            entries = read.lines(f"host/{self.host}")
            now = time.time()
            alive = [
                Culprit(r, self.host, pid, what(r), now, str(e.get("error_file", "")), started)
                for e in entries
                if (r := int(e["rank"])) in ranks
                and peer_state.fate(pid := int(e["pid"]), started := e.get("started")) is None
            ]
            if alive and hung:
                read.name(self.rank, alive)
            return alive

        return self._line.call(look, bound)

    def first_to_end(self, culprit: Culprit) -> bool:
        """Whether this process is the first survivor to end ``culprit`` (bounded; raises as
        :meth:`explain`): one ends it, and says so."""
        key = f"ending/{culprit.rank}/{culprit.pid}"
        return bool(self._line.call(lambda store: store.add(key, 1) == 1, REPORT_BOUND))

    def keep_store(self, bound: float) -> None:
        """Where the store ends with this process: wait, up to ``bound`` seconds, until every
        other process has read the reports of this failure or has ended on this host."""

        def wait(store: Any) -> None:
            read = self._reading(store)
            local = {int(e["rank"]): e for e in read.lines(f"host/{self.host}")}
            local.pop(self.rank, None)
            deadline = time.monotonic() + bound
            pause = _POLL
            while time.monotonic() < deadline:
                states = read.states(sorted(local))
                ended = [
                    r for r, e in local.items()
                    if "explained" not in states.get(r, {})
                    and peer_state.fate(int(e["pid"]), e.get("started")) is not None
                ]  # fmt: skip
                others = self.world_size - 1 - len(ended)
                counted = others + ("explained" in self._state)  # the count holds this one's
                if read.counted(JOB, "explained", counted) >= counted:
                    return
                time.sleep(pause)  # the others' reading is not signalled to this process
                pause = min(2 * pause, _POLL_MOST)

        self._line.call(wait, bound + REPORT_BOUND)

    def without_store(self, bound: float = REPORT_BOUND) -> Explanation | None:
        """What /proc says where the store no longer answers: rank 0 ended on this host
        without keeping it (it serves the store where no launcher's agent does). Its sockets
        close before /proc shows it ended: it is looked at again for up to ``bound`` seconds."""
        record = self._rank_0
        if record is None or record["host"] != self.host or record["seconds"] < self._since:
            return None
        deadline = time.monotonic() + bound
        while (fate := peer_state.fate(int(record["pid"]), record.get("started"))) is None:
            if time.monotonic() >= deadline:
                return None
            time.sleep(_POLL)  # its end is not signalled to this process
        path = str(record.get("error_file", ""))
        pid, started = int(record["pid"]), record.get("started")
        return Explanation((Culprit(0, self.host, pid, fate, time.time(), path, started),))

    def _explain(
        self,
        store: Any,
        global_ranks: list[int],
        gang_rank: int,
        wait: float,
        call: Call | None,
        ends: float,
        known: bool = True,
    ) -> Explanation:
        """Marks this process as a survivor of the gang's failure first; where neither the
        reports nor /proc name a culprit at once, looks again until the gang's other members
        have all reported the failure too, for at most ``wait`` seconds; asks the ranks that
        took no part where they stand until ``ends`` (``time.monotonic()``) at the latest.
        A rank is found stuck (:attr:`Explanation.stuck`) only on proof: it alone of the
        gang's members (of the whole job, where the group is not ``known``) did not report
        the failure, and its main thread, asked on this host, is in the program's own code,
        not in a collective."""
        read = self._reading(store)
        me = global_ranks[gang_rank]
        gang = gang_of(global_ranks)
        call_said = None if call is None else asdict(call)
        self._say(store, failed=time.time(), call=call_said)  # a peer that sees one sees both
        count_in(store, gang, "failed", me)
        others = [r for r in range(len(global_ranks)) if r != gang_rank]
        peers = [global_ranks[r] for r in others]
        small = len(global_ranks) <= ONCE_AT_MOST
        deadline = time.monotonic() + wait
        pause = _POLL
        while True:
            # whether to stop is read before the look: what the peers said by then is seen
            late = time.monotonic() - deadline
            done = not peers or read.peers_done(gang, peers, late, PEERS_FINDINGS)
            culprits = (  # what a peer saw first says more than what is left to see now
                read.reported() or read.named_by() or read.local_fates()
            )
            if culprits:
                read.name(me, culprits)
                return Explanation(tuple(culprits))
            mismatch = None if call is None or not (small or done) else read.mismatched(me, call)
            if mismatch:
                ranks_in, root = mismatch
                return Explanation((), mine=call, mismatched=ranks_in, root=root, me=me)
            if done:
                break
            time.sleep(pause)  # a peer whose connection just closed may still be ending
            pause = min(2 * pause, _POLL_MOST)
        came = read.pairs(f"failed/{gang}/log")
        elsewhere = read.states([r for r in peers if r not in came])  # in other gangs' calls?
        absent = tuple(
            r for r in others if global_ranks[r] not in came
            and "failed" not in elsewhere.get(global_ranks[r], {})
        )  # fmt: skip
        ranks = tuple(global_ranks[r] for r in absent)
        seen_by = None
        if not ranks:  # every member took part: one may have waited for another gang's
            seen_by, ranks = absent_for(elsewhere)
        hosts = read.hosts(sorted({me, *ranks})) if len(ranks) <= ONCE_AT_MOST else {}
        absent_hosts = tuple(dict.fromkeys(hosts[r] for r in ranks if r in hosts))
        silent = tuple(
            h for h in absent_hosts if h != self.host and read.silent(h, global_ranks, ranks)
        )
        if ranks:
            self._say(store, absent=list(ranks))
        where, outside = self._where(store, read, ranks, ends) if ranks else ({}, set())
        alone = len(ranks) == 1 and seen_by is None  # every other member is in the call
        stuck = tuple(r for r in ranks if alone and r in outside)
        return Explanation(
            (), absent, ranks, absent_hosts, silent, seen_by, where=tuple(where.items()),
            of_the_job=not known, stuck=stuck,
        )  # fmt: skip

    def _say(self, store: Any, **said: Any) -> None:
        """Add ``said`` to this process's own document in the reports."""
        self._state.update(said)
        set_state(store, self.rank, self._state)

    def _where(
        self, store: Any, read: Reading, ranks: tuple[int, ...], ends: float
    ) -> tuple[dict[int, str], set[int]]:
        """Where ``ranks`` (taking no part) stand: asked of those on this host (and left in
        the store for the others), read from the store for the rest, where a survivor on
        their host found it; and those of this host seen in the program's own code."""
        found: dict[int, str] = {}
        outside: set[int] = set()
        for entry in read.lines(f"host/{self.host}"):
            rank, pid = int(entry["rank"]), int(entry["pid"])
            if rank not in ranks or "stacks" not in entry:
                continue
            left = min(stacks.ANSWER_BOUND, ends - time.monotonic())
            if left > 0 and peer_state.fate(pid, entry.get("started")) is None:
                answer = stacks.ask(pid, int(entry["stacks"]), int(entry["main"]), left)
                if answer is not None:
                    found[rank] = answer.where
                    if not answer.in_collective:
                        outside.add(rank)
                    entry = {"seconds": time.time(), "rank": rank, "where": answer.where}
                    append_line(store, "where", entry)
        if set(ranks) - set(found):
            for said in read.lines("where"):
                found.setdefault(int(said["rank"]), str(said["where"]))
        return {r: found[r] for r in ranks if r in found}, outside

    def _reading(self, store: Any) -> Reading:
        return Reading(store, self.rank, self.host, self._since)
