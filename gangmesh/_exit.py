"""A clean exit: shut process groups down while the interpreter can still join their threads."""

from __future__ import annotations

import atexit
import gc
import logging
import weakref
from typing import TYPE_CHECKING

import torch.distributed as dist

from gangmesh.communicators import forget_all

if TYPE_CHECKING:
    from gangmesh.process_group_gang import ProcessGroupGang

log = logging.getLogger("gangmesh")

live_gangs: weakref.WeakSet[ProcessGroupGang] = weakref.WeakSet()
"""Every ProcessGroupGang not yet collected."""
_exit_teardown_installed = False


def install_exit_teardown() -> None:
    """Shut every process group down at interpreter exit, once per process.

    A gloo worker thread may still hold the last reference to a finished
    collective's tensors when the main thread returns. Freeing them needs the
    GIL; during interpreter finalisation taking the GIL ends the thread, the
    forced unwind meets a noexcept frame and the process aborts (SIGABRT,
    "terminate called without an active exception"). Shutting the groups down
    from an atexit hook is not enough while Python objects still reference
    the groups: the backends, and their threads, live on. So the hook also
    releases every gang's references, which destroys the backends and joins
    their threads while the interpreter still runs.
    """
    global _exit_teardown_installed
    if not _exit_teardown_installed:
        atexit.register(_teardown_at_exit)
        _exit_teardown_installed = True


def _teardown_at_exit() -> None:
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except (RuntimeError, ValueError) as ex:
            log.debug("shutting process groups down at exit failed: %s", ex)
    for gang in list(live_gangs):
        gang._release()
    forget_all()
    gc.collect()
