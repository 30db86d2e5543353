"""Who broke the job: reports in the job's store, read only after a collective failed.

Each process writes where it runs (host, pid) as it sets up, and a process about to die of
an uncaught exception reports what it raised (:mod:`gangmesh.runtime.faults.last_words`). A
survivor whose collective failed reads the reports, then asks /proc what became of the
processes on its host (:mod:`gangmesh.runtime.faults.peer_state`): gone, killed, or stopped. Where
that tells nothing, it waits a bounded time for the gang's other members to report the
failure too (still looking: a peer whose connection just closed may be exiting); it names
the members that failed in another collective than its own (another gang, call, op or
shape), else those that did not report, with their hosts, else the ranks one of them
waited for. Each survivor leaves what it found for the others
(:mod:`gangmesh.runtime.faults.report_reading` says what is kept where); rank 0, where it serves
the store, keeps it at exit until the others have read it. Collectives that succeed read
and write nothing here.

The reports go through a connection of their own to the job's store (MASTER_ADDR and
MASTER_PORT), used by one thread (:mod:`gangmesh.runtime.faults.store_line`), every wait bounded:
where the store cannot be reached (this host was cut off), a report or a reading gives up
in seconds. Entries older than this process belong to an earlier attempt and are passed over.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import timedelta

import gangmesh.runtime.faults.error_files as error_files
import gangmesh.runtime.faults.stacks as stacks
from gangmesh.runtime.faults.culprits import Call, Culprit, Explanation
from gangmesh.runtime.faults.report_channel import PREFIX, READING_BOUND, REPORT_BOUND, Channel
from gangmesh.runtime.faults.store_line import end_all, line_to

log = logging.getLogger("gangmesh")

_channel: Channel | None = None
_opened_for: int | None = None
"""The id of the default group the channel was opened for: wrapping it again opens nothing
new. Not the group itself: a reference would keep its backend and threads alive at exit."""


def open_channel(
    group: object | None,
    store: tuple[str, int],
    rank: int,
    world_size: int,
    timeout: timedelta,
    serves_store: bool = False,
) -> None:
    """Make this process's reports go to the job's store at ``store`` (address, port), for
    default group ``group``; a job of one process has no one to tell, nothing is opened.
    ``group`` None: the default group is about to start, and takes the channel over once
    it has. ``serves_store``: the store lives in this process."""
    global _channel, _opened_for, _timeout
    if world_size < 2:
        return
    if _channel is not None and _opened_for in (None, id(group)):
        _opened_for = None if group is None else id(group)
        return
    _channel = Channel(line_to(*store, timeout, PREFIX), rank, world_size, serves_store)
    _opened_for = None if group is None else id(group)
    _timeout = timeout


_timeout = timedelta(0)
"""The timeout of the job whose reports the channel holds."""


def job_timeout() -> timedelta:
    """The timeout of the job whose reports the channel holds (zero where none is open)."""
    return _timeout


def who_broke(bound: float) -> str:
    """Who broke the job, in words that follow "stopped", as far as known within ``bound``
    seconds, for a process being stopped (see :mod:`gangmesh.runtime.faults.stop_notice`); ""
    where nothing is known."""
    current = _channel
    if current is None:
        return ""
    try:
        return current.who_broke(bound)
    except (RuntimeError, ValueError, OSError, TimeoutError) as ex:
        log.debug("the job's failure reports cannot be read: %s", ex)
        return ""


def fates(ranks: list[int]) -> dict[int, Culprit]:
    """What became of global ranks ``ranks``, which did not come to a meeting, where known
    within a couple of seconds: rank -> culprit; {} where nothing is known."""
    current = _channel
    if current is None:
        return {}
    failed_at = time.time()
    try:
        found = current.fates(ranks, REPORT_BOUND)
    except (RuntimeError, ValueError, OSError, TimeoutError) as ex:
        log.debug("the job's failure reports cannot be read: %s", ex)
        return {}
    error_files.for_culprits(list(found.values()), current.host, failed_at)
    for rank in set(ranks) - set(found):  # never said where it runs: on this host, maybe
        error_files.write_for_unseen(rank, f"global rank {rank} did not arrive", failed_at)
    return found


def store_keeper() -> Culprit | None:
    """Rank 0, where it served the job's store on this host and ended (as /proc tells);
    None where that is not known."""
    current = _channel
    gone = None if current is None else current.without_store()
    if current is None or gone is None:
        return None
    error_files.for_culprits(list(gone.culprits), current.host, time.time())
    return gone.culprits[0]


def keep_store_for_survivors() -> None:
    """At exit, or as the root gang closes, after a failure, where the store ends with this
    process: let the others read the reports first (bounded by the job's timeout and the
    reading's bound)."""
    current = _channel
    if current is None or not current.serves_store or not current.took_part:
        return
    try:
        current.keep_store(_timeout.total_seconds() + READING_BOUND)
    except (RuntimeError, ValueError, OSError, TimeoutError) as ex:
        log.debug("keeping the store for the others failed: %s", ex)


def close_channel() -> None:
    """Stop reporting: the job's groups are shut down."""
    global _channel, _opened_for
    _channel = None
    _opened_for = None
    stacks.uninstall()


def shut_down() -> None:
    """Close the channel and end every line's thread (at exit, and between two tests that
    share processes); a thread that a store which does not answer holds ends with the
    process."""
    close_channel()
    end_all(REPORT_BOUND)


def channel() -> Channel | None:
    """This process's channel to the job's failure reports; None where there is none."""
    return _channel


def explain(
    global_ranks: list[int],
    gang_rank: int,
    timeout: timedelta,
    failed_at: float,
    call: Call | None = None,
    known: bool = True,
) -> Explanation | None:
    """Who broke a collective of a gang of ``global_ranks`` that failed at ``failed_at``
    (seconds since the epoch); None where nothing is known. ``known``: whether
    ``global_ranks`` are the collective's group (else the job's). The culprits named on this
    host get torchelastic error files in their name where they left none, and this process
    waits for them to end before it ends itself (:mod:`gangmesh.runtime.faults.error_files`);
    under torchrun, a rank proven stuck outside the collective is ended."""
    current = _channel
    if current is None:
        return None
    try:
        found = current.explain(global_ranks, gang_rank, timeout, call, known)
    except (RuntimeError, ValueError, OSError, TimeoutError) as ex:
        log.debug("the job's failure reports cannot be read: %s", ex)
        gone = current.without_store()
        if gone is None:
            return None
        found = gone
    error_files.for_culprits(list(found.culprits), current.host, failed_at)
    if not found.culprits and found.stuck and error_files.own_path():
        _end_hung(current, found.stuck, dict(found.where), failed_at)
    singled = tuple((r, c) for r, c in found.mismatched if r in found.root and r != found.me)
    if singled and error_files.own_path():
        _name_mismatched(current, singled, failed_at)
    return found


def _name_mismatched(
    current: Channel, mismatched: tuple[tuple[int, Call], ...], failed_at: float
) -> None:
    """Under torchrun, write the error files of the ranks in calls that do not match on this
    host in their name, and let them end first (each ends of its own GangError at its
    timeout): torchrun then names them, not the ranks that waited for them."""
    try:
        here = {c.rank: c for c in current.here(tuple(r for r, _ in mismatched), REPORT_BOUND,
                                                  hung=False)}  # fmt: skip
    except (RuntimeError, ValueError, OSError, TimeoutError) as ex:
        log.debug("the job's failure reports cannot be read: %s", ex)
        return
    culprits = [
        replace(here[rank], what=f"is in {call.text()}, which its peers are not in")
        for rank, call in mismatched
        if rank in here
    ]
    error_files.for_culprits(culprits, current.host, failed_at)


def _end_hung(
    current: Channel, ranks: tuple[int, ...], where: dict[int, str], failed_at: float
) -> None:
    """Under torchrun, end the ranks proven stuck outside the collective on this host, their
    error files written in their name: torchrun counts only a process that ended as the
    failure's root cause, and would stop them next anyway. One survivor ends each (and says
    so); the others wait for its end."""
    try:
        hung = current.here(ranks, REPORT_BOUND, where=where)
        mine = [c for c in hung if current.first_to_end(c)]
    except (RuntimeError, ValueError, OSError, TimeoutError) as ex:
        log.debug("the job's failure reports cannot be read: %s", ex)
        return
    for culprit in mine:
        log.warning("global rank %d (pid %d) takes no part: ending it", culprit.rank, culprit.pid)
        error_files.end_hung(culprit, failed_at)
    error_files.remember(hung)
