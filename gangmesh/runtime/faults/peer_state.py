"""What became of a process on this host, read from /proc: gone, exited, killed or stopped.

A survivor whose collective failed asks this of the peers that share its host; a peer
killed by a signal or stopped cannot say so itself. Linux only; elsewhere nothing is known.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

_EXIT_CODE_FIELD = 52
"""Field of /proc/PID/stat holding the exit status of a zombie, as waitpid reports it
(Linux 3.5 on); the fields after the command's closing parenthesis start at field 3."""
_START_TIME_FIELD = 22
STOPPED = "is stopped (SIGSTOP, SIGTSTP or a debugger) and does not answer"
"""What :func:`fate` says of a stopped process."""
TERMINATED = ("was killed by SIGTERM", f"exited with code {128 + signal.SIGTERM}")
"""What :func:`fate` says of a process that SIGTERM ended (by default, or by a handler that
ends the process as a shell reports SIGTERM's end): how a launcher stops its processes."""


def _fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat from field 3 (the state) on; None where the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot; None where /proc does not tell."""
    fields = _fields(pid)
    if fields is None or len(fields) <= _START_TIME_FIELD - 3:
        return None
    return int(fields[_START_TIME_FIELD - 3])


def started_at(pid: int) -> float:
    """When process ``pid`` started, in seconds since the epoch (this host's clock); now
    where /proc does not tell."""
    ticks = start_time(pid)
    try:
        stat = Path("/proc/stat").read_text()
        boot = next(int(line.split()[1]) for line in stat.splitlines() if line.startswith("btime "))
    except (OSError, StopIteration, ValueError):
        return time.time()
    if ticks is None:
        return time.time()
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def fate(pid: int, started: int | None) -> str | None:
    """What happened to process ``pid`` (started at ``started``), in words; None while it runs.

    A process of that pid that started at another time is another process: the one asked
    about is gone.
    """
    fields = _fields(pid)
    if fields is None:
        return "is gone: it exited or was killed, and left no report"
    if started is not None and start_time(pid) != started:
        return "is gone: it exited or was killed, and left no report"
    state = fields[0]
    if state == "Z":
        return _exit_status(fields)
    if state in ("T", "t"):
        return STOPPED
    return None


def is_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (by a signal or a debugger)."""
    fields = _fields(pid)
    return fields is not None and fields[0] in ("T", "t")


def _exit_status(fields: list[str]) -> str:
    """How a zombie ended, from the exit status its stat shows."""
    index = _EXIT_CODE_FIELD - 3
    if len(fields) <= index:
        return "has ended: it exited or was killed, and left no report"
    status = int(fields[index])
    signum = status & 0x7F
    if signum:
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return f"was killed by {name}"
    return f"exited with code {status >> 8}"


def alive_sibling(rank: int) -> tuple[int, bool] | None:
    """The pid of a process of this job on this host with global rank ``rank`` that runs:
    one its launcher started beside this one (same parent, ``RANK`` and this job's
    ``MASTER_PORT`` in its environment), so that a rank not yet in setup is known to be late,
    not gone; with whether it is stopped. None where there is none, or /proc does not tell."""
    parent, me = os.getppid(), os.getpid()
    wanted = {f"RANK={rank}".encode(), f"MASTER_PORT={os.environ.get('MASTER_PORT')}".encode()}
    try:
        entries = [e for e in Path("/proc").iterdir() if e.name.isdigit() and int(e.name) != me]
    except OSError:
        return None
    for entry in entries:
        fields = _fields(int(entry.name))
        if fields is None or len(fields) < 2 or int(fields[1]) != parent or fields[0] in "ZX":
            continue
        try:
            variables = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted <= set(variables):
            return int(entry.name), fields[0] in ("T", "t")
    return None


_JOB_MARKERS = ("MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")
"""Variables that the processes of one job share, where set."""


def sibling(pid: int, started: int | None) -> bool:
    """Whether process ``pid`` is the process of this job that the reports describe: the one
    that started at ``started`` (not a later process of the same pid) and has this job's
    launcher variables (those of :data:`_JOB_MARKERS` this process has). Nothing is acted on
    (signalled, killed) without it: pids in the job's store are not authenticated."""
    if started is None or start_time(pid) != started:
        return False
    markers = {f"{name}={os.environ[name]}".encode() for name in _JOB_MARKERS if name in os.environ}
    try:
        variables = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
    except OSError:
        return False
    return bool(markers) and markers <= variables
