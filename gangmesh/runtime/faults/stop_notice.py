"""One line from a process that its launcher stops (SIGTERM) after a peer broke the job.

torchrun stops every worker once one has failed, often before a survivor's own collective fails
and names the culprit; such a process would end without a word. With this installed, a SIGTERM
makes a thread of this process let go of what other jobs wait on (:mod:`.leaving`), ask the
job's failure reports who broke the job (a couple of seconds at most) and log it at ERROR
level, then end the process as SIGTERM does. The thread learns of the signal at once, even
while the main thread waits in a collective: Python's own handler writes it to a wakeup file
descriptor. Nothing is installed where the process already handles SIGTERM or uses a wakeup
descriptor, or off the main thread; a handler the program installs later takes over. A process
already ending of an error of its own (its last words told the job) says nothing more and ends
as that error ends it, with 1; one whose exit handlers run, or that felt the failure itself (it
raises a GangError, and may end with ``sys.exit(n)`` after catching it), is left to end by
itself with its own status for a few seconds, then said of and ended as any other.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from types import FrameType

import gangmesh.runtime.faults.failure_reports as failure_reports
import gangmesh.runtime.faults.last_words as last_words
import gangmesh.runtime.faults.leaving as leaving
import gangmesh.runtime.faults.outside as outside

log = logging.getLogger("gangmesh")

_BOUND = 2.0
"""Seconds the process spends asking who broke the job before it ends."""
_LEAVING_BOUND = 0.5
"""Seconds the process waits for what other jobs wait on to be let go of."""
_EXITING_BOUND = 5.0
"""Seconds a process stopped while it ends by itself has to end with its own status."""
_EXIT_CODE = 128 + signal.SIGTERM
"""How the process ends where the thread, not the main thread, ends it: as a shell reports
a process that SIGTERM ended."""
_said = threading.Event()
_installed: tuple[int, threading.Thread] | None = None
"""The write end of the wakeup pipe and the thread that reads the other, while installed."""


def install() -> None:
    """Say who broke the job when this process is stopped by SIGTERM (until
    :func:`uninstall`; installing twice does nothing)."""
    global _installed
    if _installed is not None or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    if previous != -1:  # someone else's (an event loop's): leave it to them
        signal.set_wakeup_fd(previous)
        os.close(read_end)
        os.close(write_end)
        return
    signal.signal(signal.SIGTERM, _in_main_thread)
    watcher = threading.Thread(target=_watch, args=(read_end,), name="gangmesh-stop-notice")
    watcher.daemon = True
    watcher.start()
    _installed = (write_end, watcher)


def uninstall() -> None:
    """Give SIGTERM back and end the thread (the process's groups are shut down); off the
    main thread, only the thread ends."""
    global _installed
    if _installed is None:
        return
    write_end, watcher = _installed
    _installed = None
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) is _in_main_thread:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if signal.set_wakeup_fd(-1) not in (write_end, -1):  # someone else's since
            log.debug("a wakeup descriptor set after gangmesh's was reset")
    os.close(write_end)  # the thread reads the end of the pipe and returns
    watcher.join(_BOUND)


def _watch(read_end: int) -> None:
    """Wait for SIGTERM; say who broke the job; end the process."""
    while True:
        signals = os.read(read_end, 64)
        if not signals:
            os.close(read_end)
            return
        if signal.SIGTERM in signals and signal.getsignal(signal.SIGTERM) is _in_main_thread:
            leaving.leave_within(_LEAVING_BOUND)  # first: other jobs wait while it speaks
            if last_words.dying_of_own_error():  # it said what broke it: it ends as it would
                _said.set()
                os._exit(1)
            outside.tell(outside.STOPPED_BY_LAUNCHER)
            if _ending_by_itself():  # with its own status, if soon
                time.sleep(_EXITING_BOUND)
            _say_who()
            _said.set()
            os._exit(_EXIT_CODE)  # the main thread may be held in a collective for long


def _in_main_thread(signum: int, frame: FrameType | None) -> None:
    """Python's handler, where the main thread gets to run it: let the thread speak, then
    end as SIGTERM does; nothing where the process is ending by itself."""
    if _ending_by_itself() and not last_words.dying_of_own_error():
        return
    _said.wait(_BOUND + 1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _ending_by_itself() -> bool:
    """Whether this process ends by itself: its exit handlers run, or it raised (or is
    raising) a GangError of a failure whose culprits it looked for, which ends it or which it
    handles."""
    channel = failure_reports.channel()
    return last_words.exiting() or (channel is not None and channel.took_part)


def _say_who() -> None:
    channel = failure_reports.channel()
    if channel is None:
        rank = os.environ.get("RANK", "?")
        log.error("global rank %s stopped (SIGTERM) before it reached the job's store", rank)
        return
    text = failure_reports.who_broke(_BOUND) or _across_a_join()
    if text:
        log.error("global rank %d stopped (SIGTERM) %s", channel.rank, text)


def _across_a_join() -> str:
    """What a failure felt across a join named, in words that follow "stopped"; ""."""
    found = outside.finding()
    return f"after a joined job broke: {found}" if found else ""
