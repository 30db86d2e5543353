"""One reading of the job's failure reports in its store, as a survivor makes it.

Keys (under the reports' prefix): ``host/<host>`` (where each process runs, appended),
``rank/<rank>``, ``reports`` (culprits' own words, appended), and per survivor of a failure
``failed/<rank>`` (it felt the failure), ``named/<rank>`` (the culprits it named),
``absent/<rank>`` (the ranks it waited for in vain), ``explained/<rank>`` (it is done) and
``stopped/<rank>`` (its launcher stopped it). Entries older than this process belong to an
earlier attempt of the job and are passed over.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import gangmesh.runtime.faults.error_files as error_files
import gangmesh.runtime.faults.peer_state as peer_state
from gangmesh.runtime.faults.culprits import Call, Culprit


@dataclass(frozen=True)
class Reading:
    """The reports as ``rank`` on ``host``, started at ``since``, reads them in ``store``."""

    store: Any
    rank: int
    host: str
    since: float

    def absent_for(self, peers: list[int]) -> tuple[int | None, tuple[int, ...]]:
        """The first of ``peers`` that found ranks absent in this attempt, and those ranks."""
        for peer in peers:
            key = f"absent/{peer}"
            if self.store.check([key]):
                said = json.loads(bytes(self.store.get(key)))
                if float(said["seconds"]) >= self.since:
                    return peer, tuple(int(r) for r in said["ranks"])
        return None, ()

    def current(self, key: str) -> bool:
        """Whether ``key`` holds a time of this attempt of the job."""
        return bool(self.store.check([key])) and float(bytes(self.store.get(key))) >= self.since

    def all_current(self, keys: list[str]) -> bool:
        return bool(self.store.check(keys)) and all(self.current(key) for key in keys)

    def entries(self, key: str) -> list[dict[str, Any]]:
        """The entries of this attempt appended under ``key``."""
        if not self.store.check([key]):
            return []
        entries = [json.loads(line) for line in bytes(self.store.get(key)).decode().splitlines()]
        return [entry for entry in entries if float(entry["seconds"]) >= self.since]

    def reported(self) -> list[Culprit]:
        """The culprits that reported themselves, earliest first."""
        found: dict[int, Culprit] = {}
        for entry in self.entries("reports"):
            culprit = Culprit(
                int(entry["rank"]),
                str(entry["host"]),
                int(entry["pid"]),
                str(entry["what"]),
                float(entry["seconds"]),
                started=entry.get("started"),
            )
            found.setdefault(culprit.rank, culprit)
        return sorted(found.values(), key=lambda c: c.seconds)

    def named_by(self, ranks: list[int]) -> list[Culprit]:
        """The culprits that the survivors among ``ranks`` named in this attempt."""
        keys = [f"named/{r}" for r in ranks]
        found: dict[int, Culprit] = {}
        for key in keys:
            if not self.store.check([key]):
                continue
            record = json.loads(bytes(self.store.get(key)))
            if float(record["seconds"]) < self.since:
                continue
            for text in record["found"]:
                culprit = Culprit(**json.loads(text))
                found.setdefault(culprit.rank, culprit)
        return sorted(found.values(), key=lambda c: c.rank)

    def local_fates(self) -> list[Culprit]:
        """The processes of this job on this host that are gone, ended or stopped; one that a
        survivor on this host named earlier is as that survivor saw it (a stopped culprit
        that a survivor killed on its way out was named before it was killed). Under
        torchrun, one that SIGTERM ended is not among them: torchrun stopped it."""
        culprits: dict[int, Culprit] = {}
        entries = self.entries(f"host/{self.host}")
        watched = error_files.own_path() != ""
        for entry in reversed(entries):
            rank, pid = int(entry["rank"]), int(entry["pid"])
            if rank == self.rank or rank in culprits:
                continue
            fate = peer_state.fate(pid, entry.get("started"))
            survivor = self.current(f"failed/{rank}") or self.current(f"stopped/{rank}")
            survivor |= watched and fate in peer_state.TERMINATED  # torchrun stopped it
            if fate is not None and not survivor:
                path = str(entry.get("error_file", ""))
                started = entry.get("started")
                culprits[rank] = Culprit(rank, self.host, pid, fate, time.time(), path, started)
        if culprits:  # read after /proc: a naming that preceded what /proc showed is seen
            survivors = sorted({int(e["rank"]) for e in entries} - {self.rank, *culprits})
            for named in self.named_by(survivors):
                if named.rank in culprits and named.pid == culprits[named.rank].pid:
                    culprits[named.rank] = named
        return sorted(culprits.values(), key=lambda c: c.rank)

    def call(self, rank: int) -> Call | None:
        """The collective global rank ``rank`` failed in during this attempt; None where it
        has not said (it is in none, or has not failed yet)."""
        key = f"call/{rank}"
        if not self.store.check([key]):
            return None
        record = json.loads(bytes(self.store.get(key)))
        if float(record.pop("seconds")) < self.since:
            return None
        shape = record.pop("shape")
        members = tuple(record.pop("members"))
        return Call(**record, members=members, shape=None if shape is None else tuple(shape))

    def mismatched(
        self, me: int, mine: Call
    ) -> tuple[tuple[tuple[int, Call], ...], tuple[int, ...]] | None:
        """The ranks whose collectives do not match, seen from ``mine`` (of global rank
        ``me``), where that is why it failed: the waits that start here (a rank waits for the
        members of its gang in another call) meet two members of one gang in different calls
        of it, or come back here. Named are the ranks of those calls of one gang that differ,
        wherever the waits meet them; else, where one rank waits for more members than any
        other (a call of its own on a gang nobody else is in), that rank (``me`` itself: then
        the members it waits for are named beside it); else the members ``me`` waits for.
        With them, the ranks the waits single out (none where they name only the members
        ``me`` waits for). None where the waits lead to a rank in no collective or that has
        not said, or to one whose collective every member entered."""
        calls: dict[int, Call | None] = {me: mine}

        def waited_for(rank: int, call: Call) -> list[int]:
            for member in call.members:
                if member not in calls:
                    calls[member] = self.call(member)
            return [m for m in call.members if m != rank and calls[m] != call]

        direct = waited_for(me, mine)
        waits_of: dict[int, list[int]] = {}
        todo, conclusive = [me], False
        while todo:
            rank = todo.pop()
            conclusive |= rank == me and rank in waits_of
            if rank in waits_of:
                continue
            call = calls[rank]
            waits = waits_of[rank] = [] if call is None else waited_for(rank, call)
            if call is None or not waits:
                return None
            conclusive |= any(_same_gang(call, calls[m]) for m in waits)
            todo.extend(waits)
        if not conclusive or not direct:
            return None
        root = _root_of(me, waits_of, calls)
        named = [me, *direct] if root == [me] else root or direct
        return tuple((r, c) for r in named if (c := calls[r]) is not None), tuple(root)

    def unregistered(self, world_size: int) -> list[int]:
        """The ranks of the job that have not said where they run in this attempt: they
        never reached the job's store (ended before, or not started yet)."""

        def here(key: str) -> bool:
            record = json.loads(bytes(self.store.get(key)))
            return float(record["seconds"]) >= self.since

        keys = [f"rank/{rank}" for rank in range(world_size)]
        return [r for r, key in enumerate(keys) if not (self.store.check([key]) and here(key))]

    def hosts(self, ranks: list[int]) -> dict[int, str]:
        """The hosts this attempt recorded for ``ranks``; {} where one is missing."""
        keys = [f"rank/{r}" for r in ranks]
        if not self.store.check(keys):
            return {}
        records = [json.loads(bytes(text)) for text in self.store.multi_get(keys)]
        if any(float(record["seconds"]) < self.since for record in records):
            return {}
        return {r: str(record["host"]) for r, record in zip(ranks, records, strict=True)}


def _root_of(me: int, waits_of: dict[int, list[int]], calls: dict[int, Call | None]) -> list[int]:
    """Where the waits from ``me`` lead (see :meth:`Reading.mismatched`): the ranks in calls
    of one gang that differ (``me`` left out), else the one rank that waits for the most
    members (``me`` among them); [] where neither singles any out."""
    differ = {
        r
        for rank, waits in waits_of.items()
        for member in waits
        if (call := calls[rank]) is not None and _same_gang(call, calls[member])
        for r in (rank, member)
    }
    if differ - {me}:
        return sorted(differ - {me})
    counts = sorted(((len(waits), rank) for rank, waits in waits_of.items()), reverse=True)
    if len(counts) > 1 and counts[0][0] > counts[1][0]:
        return [counts[0][1]]
    return []


def _same_gang(call: Call, other: Call | None) -> bool:
    """Whether ``other`` is a call of ``call``'s gang."""
    return other is not None and (other.gang, other.members) == (call.gang, call.members)
