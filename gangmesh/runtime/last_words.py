"""A rank's last words: what an uncaught exception tells the job and torchrun before it dies.

Installed once per process with the failure reports (:mod:`gangmesh.runtime.failure_reports`),
chained to the hook that was there. A rank that dies of its own exception reports it to the
job's store, so that every survivor's GangError names it, and writes torchelastic's error
file (``TORCHELASTIC_ERROR_FILE``) dated when it died. A survivor that dies of the GangError
this caused writes its error file dated one second later: torchelastic keeps whole seconds,
names the earliest failure as the root cause and breaks ties by local rank, so without this
a survivor of lower rank that failed in the same second would be named instead. Before it
goes, such a survivor also lets the culprits it named on its host end first (a few seconds
at most): torchrun counts only the processes that ended before it stops the others.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from types import TracebackType

from gangmesh.runtime import failure_reports
from gangmesh.runtime.gang import GangError

log = logging.getLogger("gangmesh")

_installed = False
_CULPRIT_EXIT_BOUND = 3.0
"""Seconds a survivor dying of a GangError waits for the culprits it named on its host to end."""


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
    _installed = True


def first_line(value: BaseException) -> str:
    """The exception's type and the first line of its message."""
    lines = str(value).strip().splitlines()
    return f"{type(value).__name__}: {lines[0]}" if lines else type(value).__name__


def last_words(value: BaseException, tb: TracebackType | None) -> None:
    """Tell the job and torchrun what ended this process: ``value``, uncaught."""
    channel = failure_reports.channel()
    if channel is None:
        return
    consequence = isinstance(value, GangError)
    if consequence:
        failure_reports.let_culprits_end(_CULPRIT_EXIT_BOUND)
    else:
        channel.report(f"raised {first_line(value)}")
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        _write_error_file(path, value, tb, time.time() + (1 if consequence else 0))


def _write_error_file(
    path: str, value: BaseException, tb: TracebackType | None, seconds: float
) -> None:
    """Write torchelastic's error file as its ErrorHandler does, dated ``seconds``."""
    data = {
        "message": {
            "message": f"{type(value).__name__}: {value}",
            "extraInfo": {
                "py_callstack": "".join(traceback.format_exception(type(value), value, tb)),
                "timestamp": str(int(seconds)),
            },
        }
    }
    with open(path, "w") as fp:
        json.dump(data, fp)
