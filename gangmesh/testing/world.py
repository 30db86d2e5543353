"""Run one test in every process of a local gloo world, and say how each rank ended.

The process that reports a ``gangmesh_world`` test starts n ``python -m pytest`` runs of
it, one per rank, each in a session of its own; waits for them within the timeout, with
a grace once one fails; kills every session, and turns the ranks' results into the
test's outcome. Given a ``ForkServer`` (``gangmesh.testing.forkserver``), the ranks are
forked from its warm interpreter (torch already imported) instead of started afresh:
the same pytest runs, in new processes, without paying for ``import torch`` each time.
The pytest side (marker, fixtures, the test item) is :mod:`gangmesh.testing.plugin`.
Imports neither torch nor the rest of gangmesh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gangmesh.testing.forkserver import ForkServer, Job

__all__ = [
    "DUMP_AHEAD",
    "FAILURE_GRACE",
    "WORLD_VARIABLE",
    "Outcome",
    "World",
    "WorldFailed",
    "rank_server",
    "report_outcomes",
    "run_world",
]

FAILURE_GRACE = 10.0
"""Seconds the other ranks get to finish once one rank has failed."""

WORLD_VARIABLE = "GANGMESH_TEST_WORLD"
"""Environment variable that makes a pytest process one rank of a world (JSON)."""

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
)
_PRELOAD = ("numpy", "torch", "torch.distributed", "pytest")
"""What the fork server imports before it forks ranks: what every rank would import."""
_TAIL_LINES = 30
DUMP_AHEAD = 1.0
"""Seconds before its deadline that a rank writes the stack of every thread, for the report."""


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


# --- starting the ranks, waiting for them, killing them -------------------------------------


@dataclass
class _Rank:
    """One rank's process as the reporting process tracks it."""

    rank: int
    pid: int  # also its session's id
    log: Path
    result: Path
    stacks: Path
    process: subprocess.Popen[bytes] | None  # None: forked by ``server``
    server: ForkServer | None = None
    code: int | None = None  # None: still running when it was killed
    killed_after: str = ""  # why it was killed, if it was

    def await_exit(self) -> int | None:
        """Block until the rank exits, without reaping it; its exit code (minus the signal
        that ended it), or None if it cannot be known."""
        if self.server is not None:
            return self.server.wait(self.pid)
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            return None
        if info is None:  # pragma: no cover - only with WNOHANG
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def reap(self) -> int | None:
        """Release the exited rank (its session killed first); its exit code."""
        if self.server is not None:
            code = self.server.wait(self.pid)
            self.server.reap(self.pid)
            return code
        assert self.process is not None
        return self.process.wait()


def rank_server(config: pytest.Config) -> ForkServer:
    """A fork server for the ranks of ``config``'s tests: torch imported, in the rootdir."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARIABLES}
    env.setdefault("OMP_NUM_THREADS", "1")
    return ForkServer(_PRELOAD, env=env, cwd=config.rootpath)


def run_world(
    config: pytest.Config,
    function: pytest.Function,
    size: int,
    timeout: float,
    server: ForkServer | None = None,
) -> list[Outcome]:
    """Run ``function`` in ``size`` pytest processes within ``timeout``; how each rank ended.

    The processes are forked by ``server`` when one is given and alive, else started
    afresh. Every process is reaped, and its session killed, before this returns.
    """
    with tempfile.TemporaryDirectory(prefix="gangmesh-world-") as folder:
        base = Path(folder)
        target = f"{function.path}::{function.nodeid.split('::', 1)[1]}"
        port = _free_port()
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
                )
                ranks.append(_start(config, target, world, port, base, server))
            _wait(ranks, deadline, timeout)
        finally:
            _kill_and_reap(ranks)
        return [_outcome(rank, size) for rank in ranks]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _loopback_interface() -> str:
    with contextlib.suppress(OSError):
        for _, name in socket.if_nameindex():
            if name in ("lo", "lo0"):
                return name
    return "lo"


def _start(
    config: pytest.Config,
    target: str,
    world: World,
    port: int,
    base: Path,
    server: ForkServer | None,
) -> _Rank:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARIABLES}
    env.update(
        {
            "RANK": str(world.rank),
            "WORLD_SIZE": str(world.size),
            "LOCAL_RANK": str(world.rank),
            "LOCAL_WORLD_SIZE": str(world.size),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "GLOO_SOCKET_IFNAME": _loopback_interface(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
            WORLD_VARIABLE: json.dumps(dataclasses.asdict(world)),
        }
    )
    command = _pytest_command(config, target, base / f"rank{world.rank}-tmp")
    log = base / f"rank{world.rank}.log"
    result, stacks = Path(world.result), Path(world.stacks)
    if server is not None and server.alive:
        job = Job(
            target="pytest",
            module=True,
            argv=command[3:],
            env=env,
            cwd=str(config.rootpath),
            output=str(log),
        )
        pid = server.spawn(job)
        return _Rank(world.rank, pid, log, result, stacks, process=None, server=server)
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=config.rootpath,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return _Rank(world.rank, process.pid, log, result, stacks, process=process)


def _pytest_command(config: pytest.Config, target: str, basetemp: Path) -> list[str]:
    """``python -m pytest`` on one test, with the options of this session that shape it."""
    command = [sys.executable, "-m", "pytest", target, "-q", "-p", "no:cacheprovider"]
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
    if config.getoption("noconftest", False):
        command.append("--noconftest")
    confcutdir = config.getoption("confcutdir", None)
    if confcutdir:
        command.append(f"--confcutdir={confcutdir}")
    return command


def _wait(ranks: list[_Rank], deadline: float, timeout: float) -> None:
    """Wait until every rank exits, the timeout expires, or the grace after a first
    failure ends; then kill the sessions of the ranks still running."""
    exits: queue.Queue[tuple[int, int]] = queue.Queue()
    for rank in ranks:
        threading.Thread(target=_await_exit, args=(rank, exits), daemon=True).start()
    why = f"did not finish within {timeout:g} s"
    first_failure: int | None = None
    running = {rank.rank: rank for rank in ranks}
    while running:
        try:
            index, code = exits.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        running.pop(index).code = code
        if code != 0 and first_failure is None:
            first_failure = index
            if time.monotonic() + FAILURE_GRACE < deadline:
                deadline = time.monotonic() + FAILURE_GRACE
                why = f"did not finish within {FAILURE_GRACE:g} s after rank {index} failed"
    for rank in running.values():
        rank.killed_after = why
        _kill_session(rank.pid)


def _await_exit(rank: _Rank, exits: queue.Queue[tuple[int, int]]) -> None:
    """Report a rank's exit status without reaping it, so its process id (and session id)
    cannot be reused while its session may still need killing."""
    code = rank.await_exit()
    if code is not None:
        exits.put((rank.rank, code))


def _kill_session(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _kill_and_reap(ranks: list[_Rank]) -> None:
    """Kill what each rank's session still holds (processes the test started included),
    then reap the ranks."""
    for rank in ranks:
        _kill_session(rank.pid)
    for rank in ranks:
        code = rank.reap()
        if rank.code is None and not rank.killed_after:
            rank.code = code


# --- the report -----------------------------------------------------------------------------


@dataclass
class Outcome:
    """How one rank ended, in the words of the report."""

    rank: int
    status: str  # passed, skipped, failed, unfinished
    line: str
    details: str = ""
    at: float = math.inf  # when it failed (time.monotonic()), to name the first failure first


def _outcome(rank: _Rank, size: int) -> Outcome:
    name = f"rank {rank.rank} of {size}"
    phases: list[dict[str, Any]] = []
    with contextlib.suppress(OSError, ValueError):
        phases = json.loads(rank.result.read_text())["phases"]
    tail = _tail(rank.log)
    output = f"output of {name} (last lines):\n{tail}" if tail else f"{name} printed nothing"
    if rank.killed_after:
        stacks = _test_frames(_tail(rank.stacks, lines=400))
        if stacks:
            output += f"\n\nstacks of {name}, {DUMP_AHEAD:g} s before it was killed:\n{stacks}"
        return Outcome(rank.rank, "unfinished", f"{name}: {rank.killed_after}", output)
    failed = [phase for phase in phases if phase["outcome"] == "failed"]
    if failed:
        phase = failed[0]
        where = "" if phase["when"] == "call" else f" (in {phase['when']})"
        sections = "".join(
            f"\n--- {name}: {title} ---\n{content.rstrip()}" for title, content in phase["sections"]
        )
        line = f"{name}{where}: {phase['message']}"
        return Outcome(rank.rank, "failed", line, phase["text"] + sections, phase["at"])
    if not any(phase["when"] == "teardown" for phase in phases):
        reason = f"exited with code {rank.code} before the test finished"
        if not phases:
            reason = f"exited with code {rank.code} before reporting any result"
        return Outcome(rank.rank, "failed", f"{name}: {reason}", output)
    if rank.code != 0:
        return Outcome(
            rank.rank, "failed", f"{name}: the test ended but pytest exited with code {rank.code}"
        )
    skipped = [phase for phase in phases if phase["outcome"] == "skipped"]
    if skipped:
        return Outcome(rank.rank, "skipped", skipped[0]["message"])
    return Outcome(rank.rank, "passed", f"{name}: passed")


class WorldFailed(Exception):
    """A ``gangmesh_world`` test failed on some rank; the message names each one."""


def report_outcomes(outcomes: list[Outcome], size: int, timeout: float) -> None:
    """Fail the test, naming every rank that did not pass, or skip it if every rank skipped.

    :raises WorldFailed: a rank failed, crashed or did not finish.
    """
    bad = sorted((o for o in outcomes if o.status in ("failed", "unfinished")), key=lambda o: o.at)
    if bad:
        lines = []
        if all(o.status == "unfinished" for o in bad):
            lines.append(
                f"timed out after {timeout:g} s: {_ranks([o.rank for o in bad])} of {size} "
                "did not finish"
            )
        lines += [o.line.splitlines()[0] for o in bad]
        for status in ("passed", "skipped"):
            same = [o.rank for o in outcomes if o.status == status]
            if same:
                lines.append(f"{status}: {_ranks(same)} of {size}")
        for outcome in bad:
            title = f" rank {outcome.rank} of {size} "
            lines += ["", title.center(78, "_"), outcome.details.rstrip()]
        raise WorldFailed("\n".join(lines))
    if all(o.status == "skipped" for o in outcomes):
        reasons = sorted({o.line for o in outcomes})
        pytest.skip(reasons[0] if len(reasons) == 1 else "; ".join(reasons))


def _ranks(ranks: list[int]) -> str:
    """``"rank 3"`` or ``"ranks 0, 2"``."""
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _test_frames(stacks: str) -> str:
    """A faulthandler dump without the frames of pytest itself."""
    machinery = (
        "/_pytest/",
        "/pluggy/",
        "/pytest/__main__.py",
        "<frozen runpy>",
        "/gangmesh/testing/forkserver.py",
    )
    return "\n".join(
        line for line in stacks.splitlines() if not any(part in line for part in machinery)
    )


def _tail(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])
