"""What a survivor learns of a failed collective: the culprits, or who did not take part."""

from __future__ import annotations

from dataclasses import dataclass, field

from typing_extensions import override


@dataclass(frozen=True)
class Culprit:
    """A rank that broke the job, and how."""

    rank: int
    host: str
    pid: int
    what: str
    seconds: float
    """When it broke (seconds since the epoch; the clock of the host that saw it)."""
    error_file: str = field(default="", compare=False)
    """Its torchelastic error file, where a survivor on its host may write in its name."""
    started: int | None = field(default=None, compare=False)
    """When its process started (clock ticks since its host booted), which tells it from a
    later process of the same pid; None where not known."""

    @override
    def __str__(self) -> str:
        return f"global rank {self.rank} on host {self.host} (pid {self.pid}) {self.what}"


@dataclass(frozen=True)
class Call:
    """A collective a process is in: on which gang, the how-many-th there, and on what."""

    gang: str
    members: tuple[int, ...]
    """The gang's global ranks, by gang rank."""
    number: int
    """How many collectives this process entered on the gang, this one included."""
    op: str
    shape: tuple[int, ...] | None = None
    dtype: str = ""

    def text(self, of: Call | None = None) -> str:
        """This call in words; where ``of`` is on the same gang, only what differs."""
        tensor = "" if self.shape is None else f" on {list(self.shape)} {self.dtype}"
        if of is not None and (of.gang, of.members) == (self.gang, self.members):
            return f"{self.op}{tensor}, call {self.number} of the gang"
        return f"{self.op}{tensor}, call {self.number} of gang '{self.gang}'"


_WHERE_SHOWN = 3
"""The most absent ranks whose place a message shows."""


def _ranks(ranks: list[int], limit: int = 8) -> str:
    """``"3"``, or ``"[2, 3]"``; long lists as their first ranks and a count."""
    if len(ranks) == 1:
        return str(ranks[0])
    shown = ", ".join(map(str, ranks[:limit]))
    return f"[{shown}{f', ... ({len(ranks)} in all)' if len(ranks) > limit else ''}]"


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
    seen_by: int | None = None
    """The global rank of the gang's member that found the absent ranks, where another
    gang's members did (this gang's all took part; one of them waited for those ranks)."""
    mine: Call | None = None
    """The call this process failed in, where members are in other calls."""
    mismatched: tuple[tuple[int, Call], ...] = ()
    """The ranks in other calls than ``mine``: global rank, and that call (this process
    first, where it is the one in a call of its own)."""
    root: tuple[int, ...] = ()
    """The global ranks the waits single out as those whose calls do not match; empty where
    they only name the members this process waits for."""
    me: int | None = None
    """This process's global rank, where it is named among ``mismatched``."""
    where: tuple[tuple[int, str], ...] = ()
    """Where the absent ranks that answered stand (global rank, frames of their own code)."""
    of_the_job: bool = False
    """Whether the absent ranks are counted among the whole job's, the collective's group not
    being known: then only their global ranks are said."""
    stuck: tuple[int, ...] = ()
    """The absent ranks proven stuck outside the collective, on this host: each the one member
    of the gang that did not report the failure, its main thread in the program's own code."""

    @override
    def __str__(self) -> str:
        if self.culprits:
            return "; ".join(map(str, self.culprits))
        if self.mine is not None and self.mismatched:
            theirs = "; ".join(
                f"global rank {rank} is in {call.text(self.mine)}"
                for rank, call in self.mismatched
                if rank != self.me
            )
            if self.root == (self.me,):
                return (
                    f"collectives do not match: this process alone is in {self.mine.text()}, "
                    f"which its peers wait beside: {theirs}"
                )
            return f"collectives do not match: {theirs}; this process is in {self.mine.text()}"
        if not self.absent_global:
            return ""
        where = f" on {', '.join(self.absent_hosts)}" if self.absent_hosts else ""
        if self.seen_by is None and not self.of_the_job:
            who = f"gang ranks {list(self.absent)} (global ranks {list(self.absent_global)})"
        else:
            who = f"global ranks {list(self.absent_global)}"
        text = f"{who}{where} did not take part and have not said why"
        if self.seen_by is not None:
            text += f" (global rank {self.seen_by} waited for them)"
        for host in self.silent_hosts:
            text += f"; host {host} is unreachable or down: none of its ranks in the gang answers"
        answered = dict(self.where)
        for rank in [r for r in self.absent_global if r in answered][:_WHERE_SHOWN]:
            text += f"; global rank {rank} is at {answered[rank]}"
        silent = [r for r in self.absent_global if r not in answered]
        if silent and not self.silent_hosts:
            text += (
                f"; global rank{'s' if len(silent) > 1 else ''} {_ranks(silent)} did not say "
                "where it stands (stopped, gone, or its interpreter held)"
            )
        return text
