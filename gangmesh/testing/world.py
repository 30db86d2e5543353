"""What a rank of a local gloo world is told, and worlds of new interpreters, one per test.

:class:`World` is what a rank's pytest process learns about the test it runs. The
environment and the ``python -m pytest`` command of a rank are built here for both
ways of running ranks: :func:`run_world` starts n new interpreters for one test (each in
a session of its own), waits for them within the timeout, with a grace once one fails,
and kills every session; :mod:`gangmesh.testing.pool` keeps worlds of forked ranks that
run test after test. The pytest side (marker, fixtures, the test item) is
:mod:`gangmesh.testing.plugin`. Imports neither torch nor the rest of gangmesh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from gangmesh.testing.forkserver import ForkServer
from gangmesh.testing.hostbed import HOSTS_VARIABLE, HostBed
from gangmesh.testing.outcome import Outcome, RankEnd, outcome_of
from gangmesh.testing.shape import WorldShape

__all__ = [
    "FAILURE_GRACE",
    "POOL_VARIABLE",
    "WORLD_VARIABLE",
    "World",
    "clean_environment",
    "free_port",
    "kill_session",
    "pytest_command",
    "rank_environment",
    "rank_server",
    "run_world",
    "target_of",
]

FAILURE_GRACE = 10.0
"""Seconds the other ranks get to finish once one rank has failed."""

WORLD_VARIABLE = "GANGMESH_TEST_WORLD"
"""Environment variable that makes a pytest process one rank of a world (JSON)."""

POOL_VARIABLE = "GANGMESH_TEST_POOL"
"""Environment variable that makes a pytest process one rank of a pooled world (JSON)."""

_LAUNCHER_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "PYTEST_CURRENT_TEST",
    WORLD_VARIABLE,
    POOL_VARIABLE,
)
_HOST_VARIABLES = ("GANGMESH_HOST", "GLOO_SOCKET_IFNAME", HOSTS_VARIABLE)
_PRELOAD = ("numpy", "torch", "torch.distributed", "pytest", "gangmesh.testing.warm_pytest")
"""What the fork server imports before it forks ranks: what every rank would import, and
what a pytest session imports (:mod:`gangmesh.testing.warm_pytest`)."""


@dataclass(frozen=True)
class World:
    """What a rank's pytest process is told about its world."""

    nodeid: str
    rank: int
    size: int
    timeout: float
    deadline: float  # time.monotonic() (one clock for every process of a machine)
    store: str
    result: str
    stacks: str
    init_method: str = ""  # where root_gang meets; default: the file store ``store``


# --- what every rank gets ----------------------------------------------------------------------


def rank_server(config: pytest.Config) -> ForkServer:
    """A fork server for the ranks of ``config``'s tests: torch imported, in the rootdir."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARIABLES}
    env.setdefault("OMP_NUM_THREADS", "1")
    return ForkServer(_PRELOAD, env=env, cwd=config.rootpath)


def rank_environment(rank: int, size: int, port: int, device: str = "cpu") -> dict[str, str]:
    """The variables torchrun would give rank ``rank`` of ``size`` on this machine, gloo
    bound to the loopback interface; GANGMESH_DEVICE says ``device``."""
    return {
        "GANGMESH_DEVICE": device,
        "RANK": str(rank),
        "WORLD_SIZE": str(size),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "GLOO_SOCKET_IFNAME": _loopback_interface(),
    }


def clean_environment(hosts: bool = False) -> dict[str, str]:
    """This process's environment without a launcher's variables, one thread per op; for
    a rank on a host of a bed, also without what would say where it runs
    (``GANGMESH_HOST``, ``GLOO_SOCKET_IFNAME``): its hostname and address say it."""
    dropped = _LAUNCHER_VARIABLES + (_HOST_VARIABLES if hosts else ())
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
    return env


def pytest_command(config: pytest.Config, targets: Sequence[str], basetemp: Path) -> list[str]:
    """``python -m pytest`` on ``targets``, with the options of this session that shape them."""
    command = [sys.executable, "-m", "pytest", *targets, "-q", "-p", "no:cacheprovider"]
    # tee-sys: what the test prints reaches the log as it happens (for a rank that hangs)
    # and the report (for a rank that fails).
    command += [
        "--capture=tee-sys",
        "--runxfail",
        f"--rootdir={config.rootpath}",
        f"--basetemp={basetemp}",
    ]
    if config.inipath is not None:
        command.append(f"--config-file={config.inipath}")
    for plugin in config.getoption("plugins", None) or []:
        if plugin != "no:cacheprovider":
            command += ["-p", plugin]
    import_mode = config.getoption("importmode", None)
    if import_mode:
        command.append(f"--import-mode={import_mode}")
    for option in config.getoption("override_ini", None) or []:
        command += ["-o", option]
    for warning in config.getoption("pythonwarnings", None) or []:
        command += ["-W", warning]
    if config.pluginmanager.hasplugin("xdist"):
        command += ["-n", "0"]  # a rank runs its tests itself, whatever addopts says
    if config.getoption("noconftest", False):
        command.append("--noconftest")
    confcutdir = config.getoption("confcutdir", None)
    if confcutdir:
        command.append(f"--confcutdir={confcutdir}")
    return command


def target_of(function: pytest.Function) -> str:
    """The test's node id with its file's absolute path, as a rank's command line takes it."""
    return f"{function.path}::{function.nodeid.split('::', 1)[1]}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _loopback_interface() -> str:
    with contextlib.suppress(OSError):
        for _, name in socket.if_nameindex():
            if name in ("lo", "lo0"):
                return name
    return "lo"


def kill_session(pid: int) -> None:
    """SIGKILL every process in the session of ``pid``."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


# --- a world of new interpreters for one test -------------------------------------------------


@dataclass
class _Rank:
    """One rank's new interpreter as the reporting process tracks it."""

    end: RankEnd
    process: subprocess.Popen[bytes]

    def await_exit(self) -> int | None:
        """Block until the rank exits, without reaping it; its exit code (minus the signal
        that ended it), or None if it cannot be known."""
        try:
            info = os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            return None
        if info is None:  # pragma: no cover - only with WNOHANG
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def run_world(
    config: pytest.Config, function: pytest.Function, shape: WorldShape, timeout: float
) -> list[Outcome]:
    """Run ``function`` in ``shape.size`` new pytest processes within ``timeout``, on hosts
    of a bed of their own where ``shape`` has several; how each rank ended. Every process
    is reaped, and its session killed, before this returns; the bed is removed.

    :raises gangmesh.testing.netns.NamespaceError: the hosts could not be made.
    """
    size = shape.size
    with (
        tempfile.TemporaryDirectory(prefix="gangmesh-world-") as folder,
        contextlib.ExitStack() as stack,
    ):
        base = Path(folder)
        bed = stack.enter_context(HostBed(shape.hosts)) if shape.hosts > 1 else None
        port = free_port() if bed is None else 29500
        deadline = time.monotonic() + timeout
        ranks: list[_Rank] = []
        try:
            for rank in range(size):
                world = World(
                    nodeid=function.nodeid,
                    rank=rank,
                    size=size,
                    timeout=timeout,
                    deadline=deadline,
                    store=str(base / "store"),
                    result=str(base / f"rank{rank}.json"),
                    stacks=str(base / f"rank{rank}.stacks"),
                    init_method="" if bed is None else f"tcp://{bed.hosts[0].address}:{port}",
                )
                ranks.append(_start(config, target_of(function), world, port, base, shape, bed))
            _wait(ranks, deadline, timeout)
        finally:
            _kill_and_reap(ranks)
        return [outcome_of(rank.end, size) for rank in ranks]


def _start(
    config: pytest.Config,
    target: str,
    world: World,
    port: int,
    base: Path,
    shape: WorldShape,
    bed: HostBed | None,
) -> _Rank:
    env = clean_environment(hosts=bed is not None)
    command = pytest_command(config, [target], base / f"rank{world.rank}-tmp")
    if bed is None:
        env.update(rank_environment(world.rank, world.size, port, shape.device))
    else:
        host = bed.hosts[shape.host_of(world.rank)]
        env.update(shape.environment(world.rank, bed.hosts[0].address, port))
        env[HOSTS_VARIABLE] = host.to_env()
        command = bed.command(host.index, command)
    env[WORLD_VARIABLE] = json.dumps(dataclasses.asdict(world))
    log = base / f"rank{world.rank}.log"
    end = RankEnd(world.rank, log, Path(world.result), Path(world.stacks))
    with end.log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=config.rootpath,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return _Rank(end, process)


def _wait(ranks: list[_Rank], deadline: float, timeout: float) -> None:
    """Wait until every rank exits, the timeout expires, or the grace after a first
    failure ends; then kill the sessions of the ranks still running."""
    exits: queue.Queue[tuple[int, int]] = queue.Queue()
    for rank in ranks:
        threading.Thread(target=_await_exit, args=(rank, exits), daemon=True).start()
    why = f"did not finish within {timeout:g} s"
    first_failure: int | None = None
    running = {rank.end.rank: rank for rank in ranks}
    while running:
        try:
            index, code = exits.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        running.pop(index).end.code = code
        if code != 0 and first_failure is None:
            first_failure = index
            if time.monotonic() + FAILURE_GRACE < deadline:
                deadline = time.monotonic() + FAILURE_GRACE
                why = f"did not finish within {FAILURE_GRACE:g} s after rank {index} failed"
    for rank in running.values():
        rank.end.killed_after = why
        kill_session(rank.process.pid)


def _await_exit(rank: _Rank, exits: queue.Queue[tuple[int, int]]) -> None:
    """Report a rank's exit status without reaping it, so its process id (and session id)
    cannot be reused while its session may still need killing."""
    code = rank.await_exit()
    if code is not None:
        exits.put((rank.end.rank, code))


def _kill_and_reap(ranks: list[_Rank]) -> None:
    """Kill what each rank's session still holds (processes the test started included),
    then reap the ranks."""
    for rank in ranks:
        kill_session(rank.process.pid)
    for rank in ranks:
        code = rank.process.wait()
        if rank.end.code is None and not rank.end.killed_after:
            rank.end.code = code
