"""A clean exit: shut process groups down while the interpreter can still join their threads."""

from __future__ import annotations

import atexit
import gc
import logging
import weakref
from typing import Protocol

import torch.distributed as dist

from gangmesh.runtime import call_thread, faults
from gangmesh.runtime.communicators import forget_all

log = logging.getLogger("gangmesh")


class Releasable(Protocol):
    """An object that holds torch process groups, directly or through a DeviceMesh."""

    def _release(self) -> None:
        """Drop every reference to torch's groups and meshes."""


_holders: weakref.WeakSet[Releasable] = weakref.WeakSet()
"""Every holder of groups not yet collected."""
_exit_teardown_installed = False
_THREAD_BOUND = 2.0
"""Seconds the teardown waits for each store connection's thread to end (a thread that a
store which does not answer holds ends with the process)."""


def release_at_exit(holder: Releasable) -> None:
    """Make ``holder`` drop its groups at interpreter exit (see :func:`install_exit_teardown`)."""
    _holders.add(holder)
    install_exit_teardown()


def install_exit_teardown() -> None:
    """Shut every process group down at interpreter exit, once per process.

    A gloo worker thread may still hold the last reference to a finished
    collective's tensors when the main thread returns. Freeing them needs the
    GIL; during interpreter finalisation taking the GIL ends the thread, the
    forced unwind meets a noexcept frame and the process aborts (SIGABRT,
    "terminate called without an active exception"). Shutting the groups down
    from an atexit hook is not enough while Python objects still reference
    the groups: the backends, and their threads, live on. So the hook also
    releases the references of every gang and of every Gangs (their DeviceMeshes
    hold the groups too), which destroys the backends and joins their threads
    while the interpreter still runs. Groups that user objects still hold (a
    mesh kept in a variable, FSDP2's state) live on to finalisation.
    """
    global _exit_teardown_installed
    if not _exit_teardown_installed:
        atexit.register(_at_interpreter_exit)
        _exit_teardown_installed = True


def _at_interpreter_exit() -> None:
    """A failure's last words first, while the reports they need are open; then the teardown."""
    faults.before_exit()
    shut_everything_down()


def shut_everything_down() -> None:
    """Destroy every process group and make every gang and Gangs drop its own; what runs
    at exit, and between two tests that share processes."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except (RuntimeError, ValueError) as ex:
            log.debug("shutting process groups down at exit failed: %s", ex)
    for holder in list(_holders):
        holder._release()
    forget_all()
    faults.shut_down()
    call_thread.end_all(_THREAD_BOUND)
    gc.collect()
