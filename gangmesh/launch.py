"""Start N local worker processes of a gangmesh command and watch them to the end."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

GRACE_SECONDS = 10.0
"""How long survivors get, beyond the collective timeout, to exit after a peer failed."""


@dataclass
class WorkerExit:
    """How one local worker ended, with the tail of what it printed."""

    rank: int
    returncode: int
    output_tail: str


def run_local_workers(nproc: int, command: Sequence[str], *, timeout: float) -> list[WorkerExit]:
    """Run ``python -m gangmesh.cli <command> --init-method file://...`` as ranks 0..nproc-1.

    Ranks meet through a file store in a private temporary folder and gloo is
    bound to the loopback interface, so nothing listens beyond this machine.
    Rank 0 writes to this process's stdout; the others' output is kept for the
    report. Once a worker fails, the others get ``timeout`` plus a grace period
    to notice and exit; then they are killed. No worker outlives this call.
    """
    with tempfile.TemporaryDirectory(prefix="gangmesh-") as folder:
        init_method = f"file://{Path(folder) / 'store'}"
        logs = [Path(folder) / f"rank{rank}.log" for rank in range(nproc)]
        procs = []
        try:
            for rank in range(nproc):
                procs.append(
                    _start(rank, nproc, [*command, "--init-method", init_method], logs[rank])
                )
            codes = _wait_all(procs, timeout + GRACE_SECONDS)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        return [
            WorkerExit(rank, code, _tail(logs[rank]) if rank else "")
            for rank, code in enumerate(codes)
        ]


def _start(rank: int, nproc: int, command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "RANK": str(rank),
        "WORLD_SIZE": str(nproc),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    output = None if rank == 0 else log_path.open("wb")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "gangmesh.cli", *command],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT if output else None,
        )
    finally:
        if output:
            output.close()


def _wait_all(procs: list[subprocess.Popen[bytes]], grace: float) -> list[int]:
    """Exit codes of every worker; after the first failure, kill those still running
    once ``grace`` seconds have passed (their code is then -9)."""
    deadline: float | None = None
    while True:
        codes = [proc.poll() for proc in procs]
        if all(code is not None for code in codes):
            return [int(code) for code in codes if code is not None]
        if deadline is None and any(code not in (None, 0) for code in codes):
            deadline = time.monotonic() + grace
        if deadline is not None and time.monotonic() > deadline:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        _wait_any(procs, 0.2)


def _wait_any(procs: list[subprocess.Popen[bytes]], seconds: float) -> None:
    """Block until a running worker exits or ``seconds`` pass."""
    running = [proc for proc in procs if proc.poll() is None]
    if running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            running[0].wait(timeout=seconds)


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])
