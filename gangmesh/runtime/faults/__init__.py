"""Who broke the job, found and told: the failure machinery, reached through these names only.

Reports in the job's store (:mod:`.failure_reports`, read by :mod:`.report_reading`), what
/proc says of the peers on this host (:mod:`.peer_state`), torchelastic's error files
(:mod:`.error_files`), a dying rank's last words (:mod:`.last_words`), a stopped rank's one
line (:mod:`.stop_notice`), what a job joined to this one hears of its end (:mod:`.outside`),
and the GangError of a failed collective (:mod:`.blame`), for a gang's call or for torch's
own collectives on the groups gangmesh holds (:mod:`.torch_calls`); what an ending process
lets go of first (:mod:`.leaving`).
The Gang core and setup use what this module exports, nothing deeper.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import torch.distributed as dist
from torch.distributed import ProcessGroup

import gangmesh.runtime.faults.failure_reports as failure_reports
import gangmesh.runtime.faults.last_words as last_words
import gangmesh.runtime.faults.peer_state as peer_state
import gangmesh.runtime.faults.stop_notice as stop_notice
from gangmesh.runtime.environment import read_launch_environment
from gangmesh.runtime.faults.blame import gang_error
from gangmesh.runtime.faults.blame import record as record_named
from gangmesh.runtime.faults.culprits import Call
from gangmesh.runtime.faults.error_files import write_for_unseen
from gangmesh.runtime.faults.failure_reports import channel, fates, store_keeper
from gangmesh.runtime.faults.leaving import forget as forget_leaving
from gangmesh.runtime.faults.leaving import leave, on_leaving
from gangmesh.runtime.faults.outside import STOPPED_BY_LAUNCHER, Listener
from gangmesh.runtime.faults.outside import forget as forget_outside
from gangmesh.runtime.faults.outside import listen as listen_outside
from gangmesh.runtime.faults.outside import note as note_outside
from gangmesh.runtime.faults.peer_state import TERMINATED
from gangmesh.runtime.faults.peer_state import fate as process_fate
from gangmesh.runtime.faults.peer_state import start_time as process_start
from gangmesh.runtime.faults.stacks import Standing
from gangmesh.runtime.faults.stacks import ask as where_stands
from gangmesh.runtime.faults.stacks import install as stack_dumps
from gangmesh.runtime.faults.torch_calls import consequence
from gangmesh.runtime.faults.torch_errors import summary

__all__ = [
    "STOPPED_BY_LAUNCHER",
    "TERMINATED",
    "Call",
    "Listener",
    "Standing",
    "before_exit",
    "channel",
    "close_reports",
    "consequence",
    "fates",
    "forget_leaving",
    "forget_outside",
    "gang_error",
    "install_stop_notice",
    "late",
    "leave",
    "listen_outside",
    "note_outside",
    "on_leaving",
    "open_reports",
    "process_fate",
    "process_start",
    "record_named",
    "shut_down",
    "stack_dumps",
    "store_keeper",
    "summary",
    "where_stands",
    "write_for_unseen",
]

log = logging.getLogger("gangmesh")


def open_reports(world: ProcessGroup | None, timeout: timedelta) -> None:
    """Let this process name the culprit when a collective fails, and be named if it is one
    (not in a simulated world: the fake backend's ranks have no peers). ``world`` None: the
    default group is about to start from the launcher's variables (its start can fail too)."""
    if world is not None and dist.get_backend(world) == "fake":
        return
    try:
        env = read_launch_environment()
    except ValueError:
        env = None
    if env is None or env.master_port == 0:
        log.debug("failure reports are off: no launcher's variables say where the store is")
        return
    serves = env.rank == 0 and not env.agent_store
    failure_reports.open_channel(
        world,
        (env.master_addr, env.master_port),
        env.rank if world is None else dist.get_rank(),
        env.world_size if world is None else dist.get_world_size(),
        timeout,
        serves_store=serves,
    )
    last_words.install()
    stop_notice.install()


def late(rank: int) -> str:
    """`` (alive, pid N: late, not gone)`` where global rank ``rank`` runs on this host
    beside this process but has not come to a meeting (`` (pid N is stopped: ...)`` where it
    is stopped); "" where that is not known."""
    found = peer_state.alive_sibling(rank)
    if found is None:
        return ""
    pid, stopped = found
    if stopped:
        return f" (pid {pid} is stopped: SIGSTOP, SIGTSTP or a debugger)"
    return f" (alive, pid {pid}: late, not gone)"


def install_stop_notice() -> None:
    """Say who broke the job when the launcher stops this process (SIGTERM), from now on."""
    stop_notice.install()


def close_reports() -> None:
    """The job's groups shut down: where this process serves the store, let the others read
    the reports of a failure first (what other jobs wait on let go of before); then stop
    reporting."""
    leave()
    failure_reports.keep_store_for_survivors()
    failure_reports.close_channel()


def before_exit() -> None:
    """At interpreter exit, while the reports are open: a failure's last duties (see
    :func:`.last_words.at_exit`)."""
    last_words.at_exit()


def shut_down() -> None:
    """Close the reports and end their threads (at exit, and between tests sharing processes)."""
    failure_reports.shut_down()
    stop_notice.uninstall()
