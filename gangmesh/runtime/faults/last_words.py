"""A rank's last words: what an uncaught exception tells the job and torchrun before it dies.

Installed once per process with the failure reports (:mod:`.failure_reports`), chained to
the hook that was there. A rank that dies of its own exception reports it to the job's store,
so that every survivor's GangError names it, and writes torchelastic's error file
(``TORCHELASTIC_ERROR_FILE``) dated when it died. A survivor that dies of the GangError this
caused, or of torch's own error of a collective that followed it (FSDP2's, DTensor's, a
pipeline's: :mod:`.torch_calls` names the culprit then), is a consequence, never a cause: it
reports nothing of itself, logs who broke the job, and writes its error file dated one second
later (see :mod:`.error_files`). Whichever way a survivor that named culprits on its host
ends, by this exception or by ``sys.exit`` after catching it, it first lets those culprits
end (a few seconds at most): torchrun counts only the processes that ended before it stops
the others.
"""

from __future__ import annotations

import atexit
import logging
import sys
import time
import traceback
from types import TracebackType

import gangmesh.runtime.faults.error_files as error_files
import gangmesh.runtime.faults.failure_reports as failure_reports
import gangmesh.runtime.faults.leaving as leaving
import gangmesh.runtime.faults.outside as outside
import gangmesh.runtime.faults.torch_calls as torch_calls
import gangmesh.runtime.faults.torch_errors as torch_errors
from gangmesh.runtime.gang import GangError

log = logging.getLogger("gangmesh")

_installed = False
_exited = False
_own_error = False
"""Whether this process is dying of an error of its own (it reported itself)."""
_CULPRIT_EXIT_BOUND = 3.0
"""Seconds a survivor that ends waits for the culprits it named on its host to end."""


def install() -> None:
    """Report uncaught exceptions of this process from now on; once per process."""
    global _installed
    if _installed:
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        try:
            last_words(value, tb)
        except Exception as ex:  # the previous hook must still run
            log.debug("reporting an uncaught exception failed: %s", ex)
        previous(kind, value, tb)

    sys.excepthook = hook
    atexit.register(at_exit)
    _installed = True


def at_exit() -> None:
    """Let the culprits named on this host end first; where this process serves the job's
    store, let the other processes read the reports before it goes; what other jobs wait on
    is let go of before (:mod:`.leaving`). Once per process: the
    exit teardown (:mod:`gangmesh.runtime._exit`) runs it before it closes the reports."""
    global _exited
    leaving.leave()
    if _exited:
        return
    _exited = True
    error_files.let_culprits_end(_CULPRIT_EXIT_BOUND)
    failure_reports.keep_store_for_survivors()


def first_line(value: BaseException) -> str:
    """The exception's type and the first line of its message."""
    lines = str(value).strip().splitlines()
    return f"{type(value).__name__}: {lines[0]}" if lines else type(value).__name__


def exiting() -> bool:
    """Whether this process is ending by itself: its exit handlers run (a ``sys.exit(n)``,
    the end of the program, or an uncaught error), and its status is its own."""
    return _exited


def dying_of_own_error() -> bool:
    """Whether this process is ending of an uncaught error of its own (not a consequence)."""
    return _own_error


def last_words(value: BaseException, tb: TracebackType | None) -> None:
    """Tell the job and torchrun what ended this process: ``value``, uncaught (having let go
    of what other jobs wait on)."""
    global _own_error
    leaving.leave()
    inner = torch_errors.unwrapped(value)  # the program's own error, where torch wrapped it
    named = inner if isinstance(inner, GangError) else torch_calls.consequence(inner)
    if named is None:
        outside.tell(f"raised {first_line(inner)}")
    channel = failure_reports.channel()
    if channel is None:
        return
    if named is None:
        _own_error = True
        channel.report(f"raised {first_line(inner)}")
    elif named is not value:  # torch's error: say who broke the job before the traceback
        log.error("global rank %d: %s", channel.rank, first_line(named))
    path = error_files.own_path()
    if path and (named is None or not error_files.named_by_a_survivor()):
        told = inner if named is None else named
        message = f"{type(told).__name__}: {told}"
        error_files.write(
            path, message, _callstack(value, tb, named), time.time() + (named is not None)
        )


def _callstack(value: BaseException, tb: TracebackType | None, named: GangError | None) -> str:
    """The traceback of ``value`` for torchelastic's error file; where it is a consequence,
    the GangError that names the culprit first (torchrun's summary shows the traceback's
    first lines), and last, after torch's own error where that went uncaught."""
    if named is None:
        return "".join(traceback.format_exception(type(value), value, tb))
    if named is not value:  # torch's error, uncaught: the GangError said after it
        named.__cause__, named.__traceback__ = value, None
        value = named
    said = "".join(traceback.format_exception(type(value), value, value.__traceback__ or tb))
    return f"{type(named).__name__}: {named}\n\n{said}"
