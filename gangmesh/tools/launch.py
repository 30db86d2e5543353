"""Start N local worker processes of a gangmesh command and watch them to the end."""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path

GRACE_SECONDS = 10.0
"""How long survivors get, beyond the collective timeout, to exit after a peer failed."""

QUIET_SECONDS = 3.0
"""After a failure, how long the last worker still running may run on once all the others
have ended; then it is taken to have stopped answering and is killed. With every peer gone,
gloo fails any collective at once, so a worker that has not ended by then is in none."""

_POLL_SECONDS = 0.25
"""After a failure, how often the launcher looks for stopped workers."""

_PRELOAD = ["torch", "gangmesh.tools.cli"]
"""What the process that forks the workers imports once, instead of once per worker."""


@dataclass
class WorkerExit:
    """How one local worker ended, with the tail of what it printed."""

    rank: int
    returncode: int
    output_tail: str
    killed: str | None = None
    """Why the launcher killed it, once a worker had failed: ``"unanswering"`` (stopped, or
    the last one running ``QUIET_SECONDS`` after all the others ended), ``"late"`` (still
    running when the grace period ran out); None when it ended by itself."""
    stopped: bool = False
    """It was stopped (SIGSTOP, a debugger) when the launcher killed it (Linux only)."""


def run_local_workers(
    nproc: int, main: Callable[[list[str]], int], command: Sequence[str], *, timeout: float
) -> list[WorkerExit]:
    """Run ``main([*command, "--init-method", "file://..."])`` as ranks 0..nproc-1, where
    ``main`` is the ``gangmesh`` command's entry point and returns the exit status.

    The workers are forked from one process that has imported torch and gangmesh, so
    ``import torch`` is paid once, not once per rank: this one, when it has imported
    torch and runs no other thread, else multiprocessing's forkserver (where the system
    has it). Ranks meet through a file store in a private
    temporary folder and gloo is bound to the loopback interface, so nothing listens
    beyond this machine. Rank 0 writes to this process's stdout; the others' output
    is kept for the report. Once a worker fails, a worker that is stopped (SIGSTOP, a
    debugger), or the last one running ``QUIET_SECONDS`` after all the others ended, has
    stopped answering and is killed; the others get ``timeout`` plus a grace period to
    notice and exit, then they are killed too. No worker outlives this call.
    """
    context = _context()
    with tempfile.TemporaryDirectory(prefix="gangmesh-") as folder:
        argv = [*command, "--init-method", f"file://{Path(folder) / 'store'}"]
        logs = [Path(folder) / f"rank{rank}.log" for rank in range(nproc)]
        workers: list[BaseProcess] = []
        try:
            for rank in range(nproc):
                output = None if rank == 0 else str(logs[rank])
                worker: BaseProcess = context.Process(
                    target=_worker,
                    args=(rank, nproc, main, argv, output),
                    name=f"gangmesh-rank{rank}",
                )
                worker.start()
                workers.append(worker)
            kills = _wait_all(workers, timeout + GRACE_SECONDS)
        finally:
            for worker in workers:
                if worker.exitcode is None:
                    worker.kill()
                worker.join()
        return [
            WorkerExit(
                rank,
                worker.exitcode if worker.exitcode is not None else -9,
                _tail(logs[rank]) if rank else "",
                *kills.get(rank, (None, False)),
            )
            for rank, worker in enumerate(workers)
        ]


def _context() -> ForkContext | ForkServerContext | SpawnContext:
    """Fork the workers from this process where that is safe and saves importing torch
    again; else from a forkserver that imports it once; else spawn them."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and "torch" in sys.modules and _threads() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")
    context: ForkServerContext = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context


def _threads() -> int | None:
    """The threads of this process, native ones included (a BLAS pool); None where the
    system does not say (only Linux's /proc does)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def _worker(
    rank: int, nproc: int, main: Callable[[list[str]], int], argv: list[str], output: str | None
) -> None:
    """One rank: torchrun's variables, its output to ``output`` (if given), then the command."""
    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": str(nproc),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(nproc),
            "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        }
    )
    if output is not None:
        log = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
    try:
        code = main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    # No teardown: after a failure, releasing torch's groups can wait for peers that died
    # or stopped, and the launcher would take this rank for one that stopped answering.
    os._exit(code)


def _wait_all(workers: list[BaseProcess], grace: float) -> dict[int, tuple[str, bool]]:
    """Wait for every worker; once one has failed, kill those that stopped answering (see
    ``QUIET_SECONDS``) and, after ``grace`` seconds, any still running.

    Returns, for each rank killed here, why (``"unanswering"`` or ``"late"``) and whether
    it was stopped.
    """
    kills: dict[int, tuple[str, bool]] = {}
    deadline: float | None = None
    last_end = time.monotonic()
    ended = 0
    while True:
        running = [worker for worker in workers if worker.exitcode is None]
        if not running:
            return kills
        now = time.monotonic()
        if len(workers) - len(running) != ended:
            ended, last_end = len(workers) - len(running), now
        if deadline is None and any(worker.exitcode not in (None, 0) for worker in workers):
            deadline = now + grace
        if deadline is not None:
            stopped = {id(worker) for worker in running if _is_stopped(worker.pid)}
            alone = len(running) == 1 and now >= last_end + QUIET_SECONDS
            doomed = (
                running
                if now >= deadline or alone
                else [worker for worker in running if id(worker) in stopped]
            )
            for worker in doomed:
                why = "late" if now >= deadline else "unanswering"
                kills[workers.index(worker)] = (why, id(worker) in stopped)
                worker.kill()
                worker.join()
            if doomed:
                continue
        left = None if deadline is None else min(deadline - now, _POLL_SECONDS)
        wait([worker.sentinel for worker in running], timeout=left)


def _is_stopped(pid: int | None) -> bool:
    """Whether the process is stopped by a signal or a tracer (Linux's /proc; else False)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] in (["T"], ["t"])


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])
