"""Start N local worker processes of a gangmesh command and watch them to the end."""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path

GRACE_SECONDS = 10.0
"""How long survivors get, beyond the collective timeout, to exit after a peer failed."""

_PRELOAD = ["torch", "gangmesh.cli"]
"""What the process that forks the workers imports once, instead of once per worker."""


@dataclass
class WorkerExit:
    """How one local worker ended, with the tail of what it printed."""

    rank: int
    returncode: int
    output_tail: str


def run_local_workers(nproc: int, command: Sequence[str], *, timeout: float) -> list[WorkerExit]:
    """Run ``gangmesh <command> --init-method file://...`` as ranks 0..nproc-1.

    The workers are forked from one process that has imported torch and gangmesh
    (multiprocessing's forkserver, where the system has it), so ``import torch`` is
    paid once, not once per rank. Ranks meet through a file store in a private
    temporary folder and gloo is bound to the loopback interface, so nothing listens
    beyond this machine. Rank 0 writes to this process's stdout; the others' output
    is kept for the report. Once a worker fails, the others get ``timeout`` plus a
    grace period to notice and exit; then they are killed. No worker outlives this call.
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
                    target=_worker, args=(rank, nproc, argv, output), name=f"gangmesh-rank{rank}"
                )
                worker.start()
                workers.append(worker)
            codes = _wait_all(workers, timeout + GRACE_SECONDS)
        finally:
            for worker in workers:
                if worker.exitcode is None:
                    worker.kill()
                worker.join()
        return [
            WorkerExit(rank, code, _tail(logs[rank]) if rank else "")
            for rank, code in enumerate(codes)
        ]


def _context() -> ForkServerContext | SpawnContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context: ForkServerContext = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context


def _worker(rank: int, nproc: int, argv: list[str], output: str | None) -> None:
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
    from gangmesh.cli import main

    try:
        code = main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def _wait_all(workers: list[BaseProcess], grace: float) -> list[int]:
    """Exit codes of every worker; after the first failure, kill those still running
    once ``grace`` seconds have passed (their code is then -9)."""
    deadline: float | None = None
    while True:
        running = [worker for worker in workers if worker.exitcode is None]
        if not running:
            return [worker.exitcode for worker in workers if worker.exitcode is not None]
        if deadline is None and any(worker.exitcode not in (None, 0) for worker in workers):
            deadline = time.monotonic() + grace
        if deadline is not None and time.monotonic() >= deadline:
            for worker in running:
                worker.kill()
                worker.join()
            continue
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        wait([worker.sentinel for worker in running], timeout=left)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])
