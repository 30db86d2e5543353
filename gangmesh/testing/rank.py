"""Inside a rank's pytest process: report each test where the parent reads it, and, in a
pooled world, run test after test on the parent's command.

A rank of a new interpreter runs its one test as pytest would; :class:`RankReporter`
writes the phases pytest reports to the test's result file. A pooled rank
(:mod:`gangmesh.testing.pool`) collects the tests of its world size once, connects to the
parent's control socket and, for each command, points its output at the test's log,
sets torchrun's variables, runs the test with pytest's own protocol (every fixture torn
down after it), and then makes sure the test left nothing behind: it destroys every
process group and answers what remains, if anything: a gloo thread (a group that an
object of the test still holds), another Python thread, another process in its
session. A rank that is not clean is never given another test. Imports gangmesh's core
only to shut process groups down.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from gangmesh.testing.outcome import DUMP_AHEAD
from gangmesh.testing.world import World

__all__ = ["PooledRank", "RankReporter", "left_behind"]


class RankReporter:
    """Writes the phases pytest reports for the current test to the test's result file,
    and the stacks of every thread to its stacks file just before its deadline."""

    def __init__(self) -> None:
        self.world: World | None = None
        self._phases: list[dict[str, Any]] = []
        self._stacks: IO[str] | None = None

    def begin(self, world: World) -> None:
        """Report for ``world``'s test from now on."""
        self.end()
        self.world, self._phases = world, []
        self._stacks = open(world.stacks, "w")  # noqa: SIM115 - open until end()
        delay = world.deadline - time.monotonic() - DUMP_AHEAD
        if delay > 0:
            faulthandler.dump_traceback_later(delay, file=self._stacks)

    def end(self) -> None:
        """Stop the stack dump of the current test; idempotent."""
        faulthandler.cancel_dump_traceback_later()
        if self._stacks is not None:
            self._stacks.close()
            self._stacks = None

    @property
    def failed(self) -> bool:
        """Whether a phase of the current test failed."""
        return any(phase["outcome"] == "failed" for phase in self._phases)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.world is None or report.nodeid != self.world.nodeid:
            return
        self._record(
            {
                "when": report.when,
                "outcome": report.outcome,
                "at": time.monotonic(),
                "message": _message(report),
                "text": report.longreprtext if report.failed else "",
                "sections": [list(section) for section in report.sections] if report.failed else [],
            }
        )

    def not_collected(self, errors: list[str]) -> None:
        """Report the current test as failed: this rank could not collect it."""
        reason = errors[0].splitlines()[-1] if errors else "no such test"
        self._record(
            {
                "when": "setup",
                "outcome": "failed",
                "at": time.monotonic(),
                "message": f"not collected in the rank: {reason}",
                "text": "\n".join(errors),
                "sections": [],
            }
        )

    def _record(self, phase: dict[str, Any]) -> None:
        assert self.world is not None
        self._phases.append(phase)
        path = Path(self.world.result)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps({"phases": self._phases}))
        os.replace(partial, path)


def _message(report: pytest.TestReport) -> str:
    """The one-line reason of a failed or skipped report (exception type and message)."""
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple):
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    lines = report.longreprtext.strip().splitlines()
    return lines[-1] if lines else report.outcome


class PooledRank:
    """The pytest plugin of a pooled rank: its test loop takes tests from the parent."""

    def __init__(self, reporter: RankReporter, control: str, rank: int) -> None:
        self._reporter = reporter
        self._control = control
        self._rank = rank
        self._collect_errors: list[str] = []

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._collect_errors.append(report.longreprtext)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        items = {item.nodeid: item for item in session.items}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as control:
            control.connect(self._control)
            stream = control.makefile("rwb")
            _send(stream, {"ready": self._rank})
            for line in stream:
                command = json.loads(line)
                world = World(**command["world"])
                self._run(items.get(world.nodeid), world, command["env"], command["log"])
                _send(stream, {"failed": self._reporter.failed, "left": left_behind()})
        return True

    def _run(self, item: pytest.Item | None, world: World, env: dict[str, str], log: str) -> None:
        os.environ.update(env)
        with _output_to(log):
            self._reporter.begin(world)
            try:
                if item is None:
                    self._reporter.not_collected(self._collect_errors)
                else:
                    item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
            finally:
                self._reporter.end()


def _send(stream: io.BufferedIOBase, message: dict[str, Any]) -> None:
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()


@contextlib.contextmanager
def _output_to(path: str) -> Iterator[None]:
    """Send this process's stdout and stderr (file descriptors 1 and 2) to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


def left_behind() -> str:
    """Destroy every process group (gangmesh's gangs and meshes release theirs), then say
    what of the last test remains in this process: "" if nothing, else what (a gloo
    thread: a group an object of the test still holds; a Python thread; another process
    in this process's session; or that ``/proc`` cannot tell)."""
    from gangmesh.runtime._exit import shut_everything_down

    shut_everything_down()
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return "no /proc to look for threads and processes in"
    main = threading.main_thread()
    threads = [thread.name for thread in threading.enumerate() if thread is not main]
    if threads:
        return f"Python threads {threads}"
    gloo = [name for name in (_read(task / "comm") for task in tasks.iterdir()) if "gloo" in name]
    if gloo:
        return f"gloo threads {gloo} (a process group something still holds)"
    others = _others_in_session()
    return f"processes {others} in the rank's session" if others else ""


def _others_in_session() -> list[int]:
    session, me = str(os.getsid(0)), os.getpid()
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _read(stat).rsplit(")", 1)[-1].split()  # state, ppid, pgrp, session, ...
        if len(fields) > 3 and fields[3] == session and int(stat.parent.name) != me:
            found.append(int(stat.parent.name))
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
