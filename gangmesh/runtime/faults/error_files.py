"""torchelastic's error files, written so that torchrun's summary names the rank that broke.

torchrun (every supported torch) reads the error file (``TORCHELASTIC_ERROR_FILE``) of each
worker that ended with an error before it stopped the others, takes the failure's time from
the file (whole seconds) or, where there is none, the moment it noticed the end, and names
the earliest as the "Root Cause", ties going to the lowest local rank. A killed or exited
rank writes no file, and torchrun may notice its end long after a survivor's (as late as its
``--monitor-interval``), so without help a survivor is named.

So a survivor that names a culprit on its own host writes the culprit's file where the
culprit has none (dated a second before the survivor's collective failed: it broke no later
than that), and its own file, dated a second after; a survivor that ends then first lets
those culprits end, killing a stopped one, so that torchrun counts them. The culprit's path
comes from the failure reports, where each process leaves it as it sets up; for a rank that
never got that far, from torchrun's layout of the files of one host's ranks.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

import gangmesh.runtime.faults.peer_state as peer_state
from gangmesh.runtime.environment import read_launch_environment
from gangmesh.runtime.faults.culprits import Culprit

log = logging.getLogger("gangmesh")

_POLL = 0.02
"""Seconds between two looks at a culprit that is ending."""


def own_path() -> str:
    """This process's error file; empty where no torchelastic agent watches it."""
    return os.environ.get("TORCHELASTIC_ERROR_FILE", "")


def path_of_local(rank: int) -> str:
    """The error file torchrun gave global rank ``rank``, where it runs on this host under
    the same agent and this process's own file is laid out as torchrun's default log
    settings lay them out (``<attempt folder>/<local rank>/error.json``, a folder per local
    rank); empty elsewhere. For a rank that never said where its file is."""
    own = Path(own_path())
    try:
        env = read_launch_environment()
    except ValueError:
        env = None
    if env is None or env.launcher != "torchrun" or own.name != "error.json":
        return ""
    local = rank - (env.rank - env.local_rank)
    if not 0 <= local < env.local_world_size or own.parent.name != str(env.local_rank):
        return ""
    folder = own.parent.parent / str(local)
    return str(folder / own.name) if folder.is_dir() else ""


def write(path: str, message: str, callstack: str, seconds: float) -> None:
    """Write an error file at ``path`` as torchelastic's ErrorHandler does, dated ``seconds``;
    in one step (a file torchrun reads is whole or absent)."""
    data = {
        "message": {
            "message": message,
            "extraInfo": {"py_callstack": callstack, "timestamp": str(int(seconds))},
        }
    }
    partial = f"{path}.{os.getpid()}.partial"
    try:
        with open(partial, "w") as fp:
            json.dump(data, fp)
        os.replace(partial, path)
    except OSError as ex:
        log.debug("writing the error file %s failed: %s", path, ex)


def write_for_unseen(rank: int, description: str, failed_at: float) -> None:
    """Write the file of global rank ``rank``, which never said where its file is, in its
    name, where it runs on this host under the same torchrun (:func:`path_of_local`)."""
    write_for_culprit(path_of_local(rank), description, failed_at)


_SEEN = " (seen by a survivor)"


def ours(path: str) -> bool:
    """Whether ``path`` is an error file of this job's attempt: beside this process's own, in
    the attempt folder torchrun gave this host's workers (``<attempt>/<local rank>/error.json``).
    A path read from the job's store is written to only then."""
    own = own_path()
    if not path or not own:
        return False
    attempt = Path(own).resolve().parent.parent
    candidate = Path(path).resolve()
    return candidate.name == Path(own).name and candidate.parent.parent == attempt


def write_for_culprit(path: str, description: str, failed_at: float) -> None:
    """Write a culprit's file in its name, unless it wrote one of its own error (it raised):
    one of a GangError it got too is replaced. Only in this job's attempt folder."""
    if not ours(path) or (os.path.exists(path) and not _message(path).startswith("GangError: ")):
        return
    what = f"{description}{_SEEN}"
    write(path, what, what, failed_at - 1)


def named_by_a_survivor() -> bool:
    """Whether a survivor wrote this process's own error file in its name: it is a culprit,
    and its consequences (a GangError of its own) leave that file as it is."""
    return _SEEN in _message(own_path())


def _message(path: str) -> str:
    """The message of the error file at ``path``; "" where there is none."""
    try:
        with open(path) as fp:
            return str(json.load(fp)["message"]["message"])
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def for_culprits(culprits: list[Culprit], host: str, failed_at: float) -> None:
    """Write error files in the name of the culprits on ``host`` (this one) that left none,
    and wait for them to end before this process ends."""
    here = [c for c in culprits if c.host == host]
    for culprit in here:
        write_for_culprit(culprit.error_file, str(culprit), failed_at)
    remember(here)


def end_hung(culprit: Culprit, failed_at: float) -> None:
    """Write the error file of ``culprit``, hung on this host, in its name, and end it
    (SIGKILL), so that torchrun counts it first; wait for its end as for other culprits'."""
    write_for_culprit(culprit.error_file, str(culprit), failed_at)
    _kill(culprit.pid, culprit.started)
    remember([culprit])


_pending: dict[int, int | None] = {}
"""The culprits on this host that this process named and has not seen end: pid -> when it
started."""


def remember(culprits: Iterable[Culprit]) -> None:
    """Culprits on this host whose end this process waits for before it ends itself."""
    _pending.update((c.pid, c.started) for c in culprits)


def let_culprits_end(bound: float) -> None:
    """Wait up to ``bound`` seconds for the culprits this process named on its host to end;
    under torchrun, a stopped one is killed first (torchrun would kill it later anyway), so
    that torchrun sees it end before this process."""
    deadline = time.monotonic() + bound
    watched = own_path() != ""
    while _pending and time.monotonic() < deadline:
        for pid, started in list(_pending.items()):
            fate = peer_state.fate(pid, started)
            if fate is None:
                continue
            if watched and peer_state.is_stopped(pid):
                _kill(pid, started)
                continue
            del _pending[pid]
        if _pending:
            time.sleep(_POLL)  # the culprit's exit is not signalled to this process
    _pending.clear()


def _kill(pid: int, started: int | None) -> None:
    """SIGKILL process ``pid``, where it is this job's process that started at ``started``."""
    if not peer_state.sibling(pid, started):
        log.debug("not killing pid %d: not the process of this job the reports describe", pid)
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError as ex:
        log.debug("killing culprit %d failed: %s", pid, ex)
