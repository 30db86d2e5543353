"""Run processes on the hosts of a bed, forked from the warm interpreter of tests/dist/launch.py
straight into each host's namespaces: worker scripts with a launcher's variables, and
torchrun agents of a multi-node job. Every run is bounded; its sessions are killed after
it, and the bed's close kills whatever else is left on its hosts (a torchrun agent's
workers included)."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gangmesh.testing.forkserver import Job
from gangmesh.testing.hostbed import HOSTS_VARIABLE, HostBed
from tests.dist.launch import LAUNCHER_VARIABLES, REPO, WORKERS, Run, fork_server

HOST_VARIABLES = ("GANGMESH_HOST", "GLOO_SOCKET_IFNAME", "GROUP_RANK", "ROLE_RANK",
                  "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT")  # fmt: skip


@dataclass
class OnHost:
    """One process to start on a host: a script (or a module) with its arguments and variables."""

    host: int
    target: str
    argv: list[str]
    env: dict[str, str]
    module: bool = False
    path0: str | None = None  # sys.path[0] of a script: default, the workers' folder


def run_on_hosts(bed: HostBed, processes: list[OnHost], timeout: float) -> Run:
    """Fork each process onto its host; wait for all of them (``timeout`` in all), kill their
    sessions and reap them. The return code is the one farthest from 0; the output is each
    process's, in turn, headed by its host."""
    dropped = set(LAUNCHER_VARIABLES) | set(HOST_VARIABLES)
    clean = {k: v for k, v in os.environ.items() if k not in dropped}
    server = fork_server()
    with tempfile.TemporaryDirectory(prefix="gangmesh-hosts-") as folder:
        jobs = [
            Job(
                target=p.target,
                argv=p.argv,
                env={
                    **clean,
                    "PYTHONPATH": str(REPO),
                    "OMP_NUM_THREADS": "1",
                    HOSTS_VARIABLE: bed.hosts[p.host].to_env(),
                    **p.env,
                },
                cwd=os.getcwd(),
                output=str(Path(folder) / f"process{index}.log"),
                module=p.module,
                path0=None if p.module else (p.path0 or str(WORKERS)),
                enter=bed.hosts[p.host].namespaces(),
            )
            for index, p in enumerate(processes)
        ]
        pids = [server.spawn(job) for job in jobs]
        deadline = time.monotonic() + timeout
        codes = [server.wait(pid, max(0.1, deadline - time.monotonic())) for pid in pids]
        for pid in pids:
            server.kill_session(pid)
        for pid in pids:
            server.reap(pid)
        output = "\n".join(
            f"--- process {index} on {bed.hosts[p.host].name} ---\n"
            + Path(job.output).read_text(errors="replace")
            for index, (p, job) in enumerate(zip(processes, jobs, strict=True))
            if Path(job.output).exists()
        )
    if None in codes:
        output = f"TIMED OUT after {timeout}s\n{output}"
    final = [-9 if code is None else code for code in codes]
    return Run(max(final, key=abs), output, pids)


def workers_on_hosts(bed: HostBed, script: str, per_host: int, *args: str,
                     timeout: float) -> Run:  # fmt: skip
    """``script`` in ``per_host`` processes on each host, with the variables torchrun gives
    its workers (consecutive ranks on a host; host0 serves the store), no agent."""
    size = per_host * len(bed.hosts)
    port = "29500"
    return run_on_hosts(
        bed,
        [
            OnHost(
                rank // per_host,
                str(WORKERS / script),
                list(args),
                {
                    "RANK": str(rank),
                    "WORLD_SIZE": str(size),
                    "LOCAL_RANK": str(rank % per_host),
                    "LOCAL_WORLD_SIZE": str(per_host),
                    "MASTER_ADDR": bed.hosts[0].address,
                    "MASTER_PORT": port,
                },
            )
            for rank in range(size)
        ],
        timeout,
    )


def torchrun_on_hosts(bed: HostBed, per_host: int, *command: str, timeout: float,
                      max_restarts: int = 0) -> Run:  # fmt: skip
    """A torchrun agent on each host, meeting by c10d rendezvous at host0 (named as a
    multi-node job names it), each starting ``per_host`` workers of ``command`` (a worker
    script and its arguments, or ``-m module ...``)."""
    agent = [
        f"--nnodes={len(bed.hosts)}", f"--nproc-per-node={per_host}", "--rdzv-backend=c10d",
        "--rdzv-endpoint=host0:29400", "--rdzv-id=gangmesh-hosts",
        "--rdzv-conf=join_timeout=30,close_timeout=10", f"--max-restarts={max_restarts}",
        "--monitor-interval=0.5",
    ]  # fmt: skip
    if command[0] != "-m":
        command = (str(WORKERS / command[0]), *command[1:])
    # the agents' own folders (torchrun's error files and logs) go where the run removes them,
    # also after an agent cut off with its host was killed before it cleaned up
    with tempfile.TemporaryDirectory(prefix="gangmesh-agents-") as logs:
        return run_on_hosts(
            bed,
            [
                OnHost(host.index, "torch.distributed.run",
                       [*agent, f"--log-dir={logs}/host{host.index}", *command], {}, module=True)
                for host in bed.hosts
            ],
            timeout,
        )  # fmt: skip
