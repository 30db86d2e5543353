"""Launch real multi-process gloo jobs on 127.0.0.1 with a bounded time and no leftovers."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    returncode: int
    output: str

    def results(self, out_dir: Path) -> dict[int, dict]:
        """The JSON each rank wrote to ``out_dir/rank<N>.json``."""
        return {
            int(p.stem.removeprefix("rank")): json.loads(p.read_text())
            for p in sorted(out_dir.glob("rank*.json"))
        }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_command(cmd: list[str], *, timeout: float, env: dict[str, str] | None = None) -> Run:
    """Run ``cmd`` in its own session; on timeout kill the whole session."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=full_env,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return Run(-9, f"TIMED OUT after {timeout}s\n{output}")
    finally:
        _kill_session(proc.pid)
    return Run(proc.returncode, output)


def torchrun(
    script: str | Path, nproc: int, *args: str, timeout: float = 180, env: dict[str, str] | None = None
) -> Run:
    """Run ``script`` under torchrun with ``nproc`` local processes on 127.0.0.1."""
    path = Path(script)
    if not path.is_absolute():
        path = WORKERS / path
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        str(path),
        *args,
    ]
    return run_command(cmd, timeout=timeout, env=env)


def every_rank_results(script: str, world: int, out: Path, timeout: float = 180) -> dict[int, dict]:
    """Run a worker script under torchrun; the JSON results of every rank, which must all exit 0."""
    run = torchrun(script, world, str(out), timeout=timeout)
    assert run.returncode == 0, run.output
    found = run.results(out)
    assert sorted(found) == list(range(world)), run.output
    return found


def _kill_session(pid: int) -> None:
    """Kill whatever the launched session left behind."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def slurm_like(
    script: str, ntasks: int, *args: str, timeout: float = 120, ranks: list[int] | None = None
) -> Run:
    """Start ``ntasks`` processes (or only ``ranks`` of them) with the variables srun sets
    (one node), no torchrun."""
    port = str(free_port())
    return processes(
        script,
        ntasks,
        *args,
        timeout=timeout,
        ranks=ranks,
        env_of=lambda rank: {
            "SLURM_PROCID": str(rank),
            "SLURM_NTASKS": str(ntasks),
            "SLURM_LOCALID": str(rank),
            "SLURM_NTASKS_PER_NODE": str(ntasks),
            "SLURM_JOB_NODELIST": "127.0.0.1",
            "SLURM_JOB_ID": "4242",
            "MASTER_PORT": port,
        },
    )


def bare_processes(script: str, nproc: int, *args: str, timeout: float = 120) -> Run:
    """Start ``nproc`` processes with torchrun's variables but no agent, so that one
    process's death does not make a launcher kill the others."""
    port = str(free_port())
    return processes(
        script,
        nproc,
        *args,
        timeout=timeout,
        env_of=lambda rank: {
            "RANK": str(rank),
            "WORLD_SIZE": str(nproc),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        },
    )


def processes(
    script: str,
    count: int,
    *args: str,
    timeout: float,
    env_of: Callable[[int], dict[str, str]],
    ranks: list[int] | None = None,
) -> Run:
    """Run ``count`` copies of a worker script (or only ``ranks`` of them), each in its own
    session, all bounded by ``timeout`` and killed afterwards. The return code is the one
    farthest from 0."""
    started = range(count) if ranks is None else ranks
    procs = [_start([sys.executable, str(WORKERS / script), *args], env_of(rank)) for rank in started]
    deadline = time.monotonic() + timeout
    outputs, codes = [], []
    for proc in procs:
        try:
            output, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_session(proc.pid)
            output = f"TIMED OUT after {timeout}s\n" + (proc.communicate()[0] or "")
        outputs.append(output or "")
        codes.append(proc.returncode if proc.returncode is not None else -9)
    for proc in procs:
        _kill_session(proc.pid)
    return Run(max(codes, key=abs), "\n".join(outputs))


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    launcher_vars = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    clean = {k: v for k, v in os.environ.items() if k not in launcher_vars}
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**clean, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **env},
        start_new_session=True,
    )
