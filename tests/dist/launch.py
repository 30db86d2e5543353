"""Launch real multi-process gloo jobs on 127.0.0.1 with a bounded time and no leftovers.

``torchrun`` and ``run_command`` start a command as it is (tests of torchrun, restarts,
exit codes under torchrun, the CLI where its command line matters). The others
(``processes``, ``bare_processes``, ``slurm_like``, ``every_rank_results``,
``torchrun_like``, ``forked_module``) fork each process from one warm interpreter that has
imported torch and gangmesh (gangmesh.testing.forkserver): new processes, each in a
session of its own, without paying for ``import torch`` per process; with ``finalize``
each ends as a new interpreter does (tests of the interpreter's exit), forked from a
server that imported only what such a script imports.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gangmesh.testing.forkserver import ForkServer, Job
from gangmesh.testing.hostbed import Host
from gangmesh.testing.netns import HOST_KINDS, enter_command

WORKERS = Path(__file__).parent / "workers"
REPO = Path(__file__).resolve().parents[2]
LAUNCHER_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)
# What the worker scripts and the docs' examples import, imported once by the fork server.
PRELOAD = [
    "numpy",
    "torch",
    "torch.distributed",
    "torch.distributed.device_mesh",
    "torch.distributed.fsdp",
    "torch.distributed.tensor",
    "torch.distributed.tensor.parallel",
    "torch.distributed.checkpoint",
    # Imported on first use by every optimizer and by FSDP2's first DTensor: about a second
    # of CPU per rank otherwise.
    "torch._dynamo",
    "gangmesh",
    # What a rank's first gang imports of gangmesh (the package loads its names on use).
    "gangmesh.assembly.factories",
    "gangmesh.assembly.setup",
]
# What a new interpreter running an exit test (workers/exit_clean.py) has imported when it
# ends: only what the script imports, so that its teardown is the one ``python script.py``
# would have.
EXIT_PRELOAD = ["torch", "gangmesh", "gangmesh.assembly.factories", "gangmesh.assembly.setup"]


@dataclass
class Run:
    returncode: int
    output: str
    pids: list[int] = field(default_factory=list)  # the processes forked for it (session ids)

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


@contextlib.contextmanager
def reserved_port() -> Iterator[int]:
    """A free port on 127.0.0.1, held until the block ends for the store rank 0 (or
    torchrun's agent) serves.

    A port from ``free_port`` is free again until rank 0 binds it, seconds later, and
    another job's ``free_port`` may pick it meanwhile: that job's rank 0 then cannot serve,
    and its ranks meet in the other job's store. This one stays bound (not listening, with
    SO_REUSEADDR): no search for a free port takes it (a bind to port 0, the local port of
    an outgoing connection), while a server that binds it by number with SO_REUSEADDR, as
    torch's TCPStore does, shares it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])


_HOST_PORTS = itertools.count(29500)
"""Store ports of the jobs run on a host of a bed (``host=``): below the ephemeral range
(32768 on), so that no outgoing connection there holds one, and each used once."""


@contextlib.contextmanager
def store_port(host: Host | None) -> Iterator[int]:
    """A port for the store of a job on ``host``, or on this machine's loopback (None)."""
    if host is None:
        with reserved_port() as port:
            yield port
    else:
        yield next(_HOST_PORTS)


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
    script: str | Path,
    nproc: int,
    *args: str,
    timeout: float = 180,
    env: dict[str, str] | None = None,
    options: tuple[str, ...] = (),
    host: Host | None = None,
) -> Run:
    """Run ``script`` under torchrun with ``nproc`` local processes on 127.0.0.1 (and
    torchrun's ``options``), on ``host`` where given; the agent's store port is held for the
    run (``store_port``)."""
    path = Path(script)
    if not path.is_absolute():
        path = WORKERS / path
    with store_port(host) as port:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={nproc}",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            *options,
            str(path),
            *args,
        ]
        if host is not None:
            cmd = enter_command(host.holder, HOST_KINDS, cmd)
        return run_command(cmd, timeout=timeout, env=env)


def every_rank_results(
    script: str, world: int, out: Path, *args: str, timeout: float = 180
) -> dict[int, dict]:
    """Run a worker script in ``world`` processes with torchrun's variables (arguments: ``out``,
    then ``args``); the JSON results of every rank, which must all exit 0."""
    run = torchrun_like(script, world, str(out), *args, timeout=timeout)
    assert run.returncode == 0, run.output
    found = run.results(out)
    assert sorted(found) == list(range(world)), run.output
    return found


def _kill_session(pid: int) -> None:
    """Kill whatever the launched session left behind."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def slurm_like(
    script: str,
    ntasks: int,
    *args: str,
    timeout: float = 120,
    ranks: list[int] | None = None,
    host: Host | None = None,
) -> Run:
    """Start ``ntasks`` processes (or only ``ranks`` of them) with the variables srun sets
    (one node), no torchrun; on ``host`` where given."""
    with store_port(host) as port:
        return processes(
            script,
            ntasks,
            *args,
            timeout=timeout,
            ranks=ranks,
            host=host,
            env_of=lambda rank: {
                "SLURM_PROCID": str(rank),
                "SLURM_NTASKS": str(ntasks),
                "SLURM_LOCALID": str(rank),
                "SLURM_NTASKS_PER_NODE": str(ntasks),
                "SLURM_JOB_NODELIST": "127.0.0.1",
                "SLURM_JOB_ID": "4242",
                "MASTER_PORT": str(port),
            },
        )


def bare_processes(
    script: str, nproc: int, *args: str, timeout: float = 120, host: Host | None = None
) -> Run:
    """Start ``nproc`` processes with torchrun's variables but no agent, so that one
    process's death does not make a launcher kill the others; on ``host`` where given."""
    with store_port(host) as port:
        return processes(
            script,
            nproc,
            *args,
            timeout=timeout,
            host=host,
            env_of=lambda rank: {
                "RANK": str(rank),
                "WORLD_SIZE": str(nproc),
                "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(nproc),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            },
        )


def bare_jobs(
    script: str, nproc: int, folder: Path, modes: Sequence[str], *, host: Host | None
) -> dict[str, tuple[Run, Path]]:
    """One job of ``nproc`` bare processes per mode (``script OUT MODE``, OUT being
    ``folder/MODE``), all launched at the same time: most of each waits out a timeout."""
    with ThreadPoolExecutor(len(modes)) as pool:
        start = {mode: (script, nproc, str(folder / mode), mode) for mode in modes}
        runs = {mode: pool.submit(bare_processes, *args, host=host) for mode, args in start.items()}
    return {mode: (run.result(), folder / mode) for mode, run in runs.items()}


def torchrun_like(
    script: str | Path,
    nproc: int,
    *args: str,
    timeout: float = 180,
    env: dict[str, str] | None = None,
    path0: str | None = None,
    finalize: bool = False,
) -> Run:
    """Run ``script`` in ``nproc`` forked processes with the variables torchrun gives its
    workers (one node, first attempt; rank 0 serves the store), their output in one stream
    as torchrun's is. For scripts whose test is not about torchrun itself. ``path0``: the
    first folder of ``sys.path`` (default: the script's). ``finalize``: each process ends
    as a new interpreter does, finalisation and C++ teardown included (tests of the exit)."""
    with reserved_port() as port:
        return processes(
            str(_worker_path(script)),
            nproc,
            *args,
            timeout=timeout,
            shared_output=True,
            path0=path0,
            finalize=finalize,
            env_of=_torchrun_variables(nproc, port, env),
        )


def _worker_path(script: str | Path) -> Path:
    """``script``, or the worker of that name when it is not an absolute path."""
    path = Path(script)
    return path if path.is_absolute() else WORKERS / path


def _torchrun_variables(
    nproc: int, port: int, env: dict[str, str] | None = None
) -> Callable[[int], dict[str, str]]:
    """The variables torchrun gives each of ``nproc`` workers on one node, first attempt,
    with ``port`` for the store rank 0 serves; ``env`` added to each."""
    return lambda rank: {
        "RANK": str(rank),
        "WORLD_SIZE": str(nproc),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(nproc),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        **(env or {}),
    }


def processes(
    script: str,
    count: int,
    *args: str,
    timeout: float,
    env_of: Callable[[int], dict[str, str]],
    ranks: list[int] | None = None,
    shared_output: bool = False,
    path0: str | None = None,
    finalize: bool = False,
    host: Host | None = None,
) -> Run:
    """Run ``count`` copies of a worker script (or only ``ranks`` of them), each forked in a
    session of its own (into ``host``'s namespaces where given), all bounded by ``timeout``
    and killed afterwards. The return code is the one farthest from 0. The output is each
    process's in turn, or, with ``shared_output``, one stream all of them wrote to."""
    started = list(range(count) if ranks is None else ranks)
    clean = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    with tempfile.TemporaryDirectory(prefix="gangmesh-job-") as folder:
        logs = [
            Path(folder) / ("all.log" if shared_output else f"rank{rank}.log") for rank in started
        ]
        jobs = [
            Job(
                target=str(WORKERS / script),
                argv=list(args),
                env={**clean, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **env_of(rank)},
                cwd=os.getcwd(),
                output=str(log),
                path0=path0,
                finalize=finalize,
                enter=[] if host is None else host.namespaces(),
            )
            for rank, log in zip(started, logs, strict=True)
        ]
        return _run_jobs(jobs, timeout)


def forked_module(module: str, *args: str, timeout: float) -> Run:
    """``python -m module args`` as a process forked from the warm interpreter, with the
    environment ``run_command`` gives; bounded by ``timeout``, its session killed afterwards."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory(prefix="gangmesh-job-") as folder:
        job = Job(module, list(args), env, os.getcwd(), str(Path(folder) / "out.log"), module=True)
        return _run_jobs([job], timeout)


def _run_jobs(jobs: list[Job], timeout: float) -> Run:
    """Fork a process per job, wait for all of them (``timeout`` in all), kill their sessions
    and reap them. The return code is the one farthest from 0; the output is each log file
    in turn (once, when jobs share one). Jobs that end as a new interpreter does come from
    a server that imported only what such a script imports."""
    server = fork_server(EXIT_PRELOAD if any(job.finalize for job in jobs) else PRELOAD)
    pids = [server.spawn(job) for job in jobs]
    deadline = time.monotonic() + timeout
    codes: list[int | None] = [
        server.wait(pid, max(0.1, deadline - time.monotonic())) for pid in pids
    ]
    for pid in pids:
        server.kill_session(pid)
    for pid in pids:
        server.reap(pid)
    logs = [Path(job.output) for job in jobs]
    output = "\n".join(
        log.read_text(errors="replace") for log in dict.fromkeys(logs) if log.exists()
    )
    if None in codes:
        output = f"TIMED OUT after {timeout}s\n{output}"
    final = [-9 if code is None else code for code in codes]
    return Run(max(final, key=abs), output, pids)


_servers: dict[tuple[str, ...], ForkServer] = {}
_server_lock = threading.Lock()


def fork_server(preload: list[str] = PRELOAD) -> ForkServer:
    """The fork server of this test session that imported ``preload`` (started on first
    use, replaced if it died)."""
    key = tuple(preload)
    with _server_lock:
        server = _servers.get(key)
        if server is None or not server.alive:
            if server is not None:
                server.close()
            env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
            env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
            server = _servers[key] = ForkServer(preload, env=env, cwd=REPO)
            atexit.register(server.close)
        return server


def sessions_alive(pids: list[int]) -> list[int]:
    """Processes still running in the sessions of ``pids`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # after "(comm)": state, ppid, pgrp, session, ...
            if int(stat.read_text().rsplit(")", 1)[1].split()[3]) in pids:
                found.append(int(stat.parent.name))
    return found


def torchrun_exit_codes(output: str) -> dict[int, int]:
    """The exit code torchrun's summary gives each global rank it lists (Failures and Root
    Cause): a negative code is the signal that ended the process."""
    found = re.findall(r"rank\s*: (\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*: (-?\d+)", output)
    return {int(rank): int(code) for rank, code in found}
