"""The job's failure reports in its store: what each process writes there, and one reading of
them as a survivor makes it.

Keys (under the reports' prefix):

- ``host/<host>`` (where each process runs, appended as it sets up), ``rank/<rank>`` (the
  same, per rank), ``registered`` (``rank:seconds,``, appended);
- ``state/<rank>``: one JSON document per process, written by that process alone: when it
  felt a failure (``failed``), the collective it was in (``call``), what it found absent
  (``absent``), when it was done (``explained``) and when its launcher stopped it
  (``stopped``); made empty as it sets up, so that one ``multi_get`` reads any of them;
  a log is read with ``compare_set`` (no wait where nothing was written yet);
- per gang of a failed collective (its members' hash ``<gang>``): ``failed/<gang>`` and
  ``explained/<gang>``, counters its members add to, and the same as logs
  (``<key>/log``, ``rank:seconds,``); ``explained/job`` counts every survivor done;
- ``reports`` (culprits' own words), ``named`` (the culprits survivors named), ``where``
  (where ranks that took no part stand): JSON lines, appended.

A survivor's look while it waits costs a handful of requests whatever the size of the world:
the counters say how many members are in, the short logs who broke, one ``multi_get`` the
processes of its own host; the long logs are read once, at the end. Entries older than the
reading process belong to an earlier attempt of the job (torchrun keeps its store across
restarts) and are passed over; a counter that an earlier attempt left high is corrected by its
log, read where the counter says everyone is in.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import gangmesh.runtime.faults.error_files as error_files
import gangmesh.runtime.faults.peer_state as peer_state
from gangmesh.runtime.faults.culprits import Call, Culprit

ONCE_AT_MOST = 64
"""The largest gang whose members' calls and hosts a survivor reads at every look (larger
ones: once, after the wait), so that the bytes a look reads do not grow with the world."""
JOB = "job"
"""The gang of every survivor, for :func:`done` counts of the whole job."""


def gang_of(members: list[int] | tuple[int, ...]) -> str:
    """The key of the gang of global ranks ``members`` (its members agree on it)."""
    text = ",".join(map(str, members))
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:16]


def register(store: Any, rank: int, host: str, record: dict[str, Any]) -> None:
    """Say where global rank ``rank`` runs (``record``: pid, start time, error file, now)."""
    store.append(f"host/{host}", json.dumps(record) + "\n")
    store.set(f"rank/{rank}", json.dumps({**record, "host": host}))
    store.set(f"state/{rank}", "{}")
    store.append("registered", f"{rank}:{record['seconds']},")


def count_in(store: Any, gang: str, what: str, rank: int) -> None:
    """Count global rank ``rank`` in ``what`` (``failed`` or ``explained``) of ``gang``."""
    store.add(f"{what}/{gang}", 1)
    store.append(f"{what}/{gang}/log", f"{rank}:{time.time()},")


def set_state(store: Any, rank: int, state: dict[str, Any]) -> None:
    """Write global rank ``rank``'s own document (see the module docstring)."""
    store.set(f"state/{rank}", json.dumps(state))


def append_line(store: Any, log: str, entry: dict[str, Any]) -> None:
    store.append(log, json.dumps(entry) + "\n")


@dataclass(frozen=True)
class Reading:
    """The reports as ``rank`` on ``host``, started at ``since``, reads them in ``store``."""

    store: Any
    rank: int
    host: str
    since: float
    _stale: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    """Per counter, how much of it an earlier attempt left (read from its log)."""

    def text(self, key: str) -> str:
        """What ``key`` holds; "" where nothing was written there (one request, no wait: it
        is made empty where missing)."""
        return bytes(self.store.compare_set(key, "", "")).decode()

    def lines(self, log: str) -> list[dict[str, Any]]:
        """The JSON lines of log ``log`` written in this attempt."""
        entries = [json.loads(line) for line in self.text(log).splitlines() if line]
        return [e for e in entries if float(e["seconds"]) >= self.since]

    def pairs(self, key: str) -> dict[int, float]:
        """Rank -> time of the ``rank:seconds,`` log ``key`` of this attempt."""
        found: dict[int, float] = {}
        for pair in self.text(key).split(","):
            if pair:
                rank, seconds = pair.split(":")
                if float(seconds) >= self.since:
                    found.setdefault(int(rank), float(seconds))
        return found

    def counted(self, gang: str, what: str, needed: int) -> int:
        """How many ranks of ``gang`` are counted in ``what`` in this attempt, as far as it
        matters that ``needed`` are: the counter alone while it is below that (one request),
        corrected by the log once it is not."""
        key = f"{what}/{gang}"
        count = int(self.store.add(key, 0)) - self._stale.get(key, 0)
        if count < needed:
            return count
        current = len(self.pairs(f"{key}/log"))
        self._stale[key] = self._stale.get(key, 0) + count - current
        return current

    def states(self, ranks: list[int]) -> dict[int, dict[str, Any]]:
        """The documents of ``ranks`` of this attempt (one request); {} for a rank that has
        none yet, or one of an earlier attempt."""
        if not ranks:
            return {}
        keys = [f"state/{r}" for r in ranks]
        if not self.store.check(keys):  # some never set up: one by one
            texts = [self.store.get(k) if self.store.check([k]) else b"{}" for k in keys]
        else:
            texts = self.store.multi_get(keys)
        found = {}
        for rank, text in zip(ranks, texts, strict=True):
            state = json.loads(bytes(text) or b"{}")
            fresh = [float(v) for k, v in state.items() if k in _TIMES]
            found[rank] = state if fresh and min(fresh) >= self.since else {}
        return found

    def reported(self) -> list[Culprit]:
        """The culprits that reported themselves, earliest first."""
        found: dict[int, Culprit] = {}
        for entry in self.lines("reports"):
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

    def named_by(self, ranks: list[int] | None = None) -> list[Culprit]:
        """The culprits that survivors (those among ``ranks``, where given) named in this
        attempt."""
        found: dict[int, Culprit] = {}
        for entry in self.lines("named"):
            if ranks is None or int(entry["by"]) in ranks:
                for text in entry["found"]:
                    culprit = Culprit(**json.loads(text))
                    found.setdefault(culprit.rank, culprit)
        return sorted(found.values(), key=lambda c: c.rank)

    def name(self, by: int, culprits: list[Culprit]) -> None:
        """Say that global rank ``by`` named ``culprits``, unless every one is named already."""
        known = {(c.rank, c.pid) for c in self.named_by()}
        if all((c.rank, c.pid) in known for c in culprits):
            return
        found = [json.dumps(asdict(c)) for c in culprits]
        append_line(self.store, "named", {"seconds": time.time(), "by": by, "found": found})

    def local_fates(self) -> list[Culprit]:
        """The processes of this job on this host that are gone, ended or stopped; one that a
        survivor on this host named earlier is as that survivor saw it (a stopped culprit
        that a survivor killed on its way out was named before it was killed). Under
        torchrun, one that SIGTERM ended is not among them: torchrun stopped it."""
        culprits: dict[int, Culprit] = {}
        entries = self.lines(f"host/{self.host}")
        watched = error_files.own_path() != ""
        states = self.states(sorted({int(e["rank"]) for e in entries} - {self.rank}))
        for entry in reversed(entries):
            rank, pid = int(entry["rank"]), int(entry["pid"])
            if rank == self.rank or rank in culprits:
                continue
            fate = peer_state.fate(pid, entry.get("started"))
            state = states.get(rank, {})
            survivor = "failed" in state or "stopped" in state
            survivor |= watched and fate in peer_state.TERMINATED  # torchrun stopped it
            if fate is not None and not survivor:
                path, started = str(entry.get("error_file", "")), entry.get("started")
                culprits[rank] = Culprit(rank, self.host, pid, fate, time.time(), path, started)
        if culprits:  # read after /proc: a naming that preceded what /proc showed is seen
            survivors = sorted({int(e["rank"]) for e in entries} - {self.rank, *culprits})
            for named in self.named_by(survivors):
                if named.rank in culprits and named.pid == culprits[named.rank].pid:
                    culprits[named.rank] = named
        return sorted(culprits.values(), key=lambda c: c.rank)

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
        not said, or to one whose collective every member entered. Each step of the waits
        reads the calls it meets in one request."""
        calls: dict[int, Call | None] = {me: mine}

        def waited_for(rank: int, call: Call) -> list[int]:
            unknown = [m for m in call.members if m not in calls]
            for member, state in self.states(unknown).items():
                calls[member] = _call(state)
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

    def peers_done(self, gang: str, peers: list[int], late: float, findings: float) -> bool:
        """Whether to stop looking, ``late`` seconds after the wait's deadline: at it where
        some of the gang's ``peers`` have not felt a failure (in this gang's call or another);
        otherwise once every peer has said what it found, or ``findings`` seconds later. A
        large gang's are counted, not read one by one: only those in this gang's call are
        seen then."""
        if len(peers) < ONCE_AT_MOST:
            states = self.states(peers).values()
            failed = all("failed" in state for state in states)
            explained = failed and all("explained" in state for state in states)
        else:  # this process counts too
            failed = self.counted(gang, "failed", len(peers) + 1) >= len(peers) + 1
            explained = failed and self.counted(gang, "explained", len(peers)) >= len(peers)
        if not failed:
            return late >= 0
        return explained or late >= findings

    def silent(self, host: str, members: list[int], ranks: tuple[int, ...]) -> bool:
        """Whether every one of ``members`` (a gang's) that runs on ``host`` is among
        ``ranks`` (absent)."""
        here = {int(e["rank"]) for e in self.lines(f"host/{host}")} & set(members)
        return bool(here) and here <= set(ranks)

    def unregistered(self, world_size: int) -> list[int]:
        """The ranks of the job that have not said where they run in this attempt: they
        never reached the job's store (ended before, or not started yet)."""
        here = self.pairs("registered")
        return [rank for rank in range(world_size) if rank not in here]

    def hosts(self, ranks: list[int]) -> dict[int, str]:
        """The hosts this attempt recorded for ``ranks``; {} where one is missing."""
        keys = [f"rank/{r}" for r in ranks]
        if not keys or not self.store.check(keys):
            return {}
        records = [json.loads(bytes(text)) for text in self.store.multi_get(keys)]
        if any(float(record["seconds"]) < self.since for record in records):
            return {}
        return {r: str(record["host"]) for r, record in zip(ranks, records, strict=True)}


def absent_for(states: dict[int, dict[str, Any]]) -> tuple[int | None, tuple[int, ...]]:
    """The first peer (of ``states``, its document by rank) that found ranks absent in this
    attempt, and those ranks."""
    for peer, state in states.items():
        if state.get("absent"):
            return peer, tuple(int(r) for r in state["absent"])
    return None, ()


_TIMES = ("failed", "explained", "stopped")
"""The fields of a state document that date it."""


def _call(state: dict[str, Any]) -> Call | None:
    """The collective a state document says its process failed in; None where none."""
    record = state.get("call")
    if not record:
        return None
    shape = record.get("shape")
    return Call(**{**record, "members": tuple(record["members"]),
                   "shape": None if shape is None else tuple(shape)})  # fmt: skip


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
