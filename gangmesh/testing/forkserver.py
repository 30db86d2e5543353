"""A warm interpreter that forks fresh processes for multi-process tests.

Starting a rank of a test world costs an interpreter start and ``import torch`` (seconds
on a small machine) for milliseconds of collectives. :class:`ForkServer` pays that once:
it starts ``python -m gangmesh.testing.forkserver_process``, which imports the modules it is
given (never starting a thread or a process group) and then forks, on request, one
process per rank. Each forked process is new: it starts a session of its own, takes the
environment, working directory, ``sys.argv`` and ``sys.path[0]`` it is given, writes to
its own output file, enters the namespaces it is given (a host of a
:class:`~gangmesh.testing.hostbed.HostBed`), runs a script or a module as ``__main__``,
and ends through the interpreter's normal exit (atexit hooks, exit code, an uncaught
exception's traceback; with ``Job.finalize`` also the interpreter's finalisation and C++
teardown), as ``python script.py`` would. Nothing a test does, a process group it leaves, a rank
it kills or a collective that hangs, can reach the next test: every test gets processes
no test has run in, and a process that does not finish is killed with its session.

The server reports each process's exit without reaping it, so the caller can kill what
the process left in its session before its id can be reused; :meth:`ForkServer.reap`
releases it, and returns once the process is gone (one that has not ended yet is
collected when it ends). This module, the client, imports neither torch nor the rest of
gangmesh (the server does, in its own process). Needs a POSIX system.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import IO, Any

__all__ = ["ForkServer", "ForkServerError", "Job"]

READY = "ready"
"""The event the server sends once it has started."""

SERVER_MODULE = "gangmesh.testing.forkserver_process"
"""The module the server process runs."""


@dataclass(frozen=True)
class Job:
    """What one forked process runs, and where."""

    target: str  # a script's path, or a module's name when ``module`` is true
    argv: list[str]  # sys.argv[1:]
    env: dict[str, str]  # the whole environment
    cwd: str
    output: str  # file that receives stdout and stderr (appended to: ranks may share one)
    module: bool = False
    path0: str | None = field(default=None)  # sys.path[0]; default: the script's folder or cwd
    finalize: bool = False  # end as a new interpreter ends, C++ static destructors included
    enter: list[str] = field(default_factory=list)  # namespaces to enter (/proc/PID/ns/KIND)


class ForkServerError(RuntimeError):
    """The fork server did not start or stopped answering."""


class ForkServer:
    """Client of a fork server process: starts it, asks it for processes, hears of their
    exits, and stops it (killing what is still running) on :meth:`close`.

    :param preload: modules the server imports before it forks anything.
    :param env: the server's environment (its processes get the one of their job).
    :param cwd: the server's working directory (and the default ``sys.path`` entry).
    :param log: file for the server's own output (import warnings, crashes).
    """

    def __init__(
        self,
        preload: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        log: str | os.PathLike[str] = os.devnull,
    ) -> None:
        self._lock = threading.Lock()
        self._exits: dict[int, queue.Queue[int]] = {}
        self._reaped: dict[int, threading.Event] = {}
        self._running: set[int] = set()
        with open(log, "ab") as output:
            self._process = subprocess.Popen(
                [sys.executable, "-m", SERVER_MODULE, *preload],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=output,
                env=dict(os.environ if env is None else env),
                cwd=cwd,
                start_new_session=True,
            )
        assert self._process.stdin is not None and self._process.stdout is not None
        self._commands: IO[bytes] = self._process.stdin
        self._events: IO[bytes] = self._process.stdout
        self._started: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read_events, daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        """Whether the server process still runs."""
        return self._process.poll() is None

    def spawn(self, job: Job, timeout: float = 300.0) -> int:
        """Fork a process that runs ``job``; its id (also the id of its session).

        ``timeout`` bounds the wait for the server, whose first answer comes once it has
        imported its modules.

        :raises ForkServerError: the server died or did not answer within ``timeout``.
        """
        with self._lock:
            self._send({"spawn": asdict(job)})
            try:
                event = self._started.get(timeout=timeout)
            except queue.Empty:
                raise ForkServerError(
                    f"the fork server did not answer within {timeout:g} s"
                ) from None
            if "pid" not in event:
                raise ForkServerError(event.get("error", "the fork server stopped"))
            pid = int(event["pid"])
            self._exits.setdefault(pid, queue.Queue())
            self._running.add(pid)
            return pid

    def wait(self, pid: int, timeout: float | None = None) -> int | None:
        """The exit code of process ``pid`` (minus the signal that ended it), or None if it
        is still running after ``timeout`` seconds. The process is not reaped."""
        try:
            code = self._exits[pid].get(timeout=timeout)
        except queue.Empty:
            return None
        self._exits[pid].put(code)  # later calls see it too
        return code

    def kill_session(self, pid: int) -> None:
        """SIGKILL every process in the session of ``pid`` (which it may have left)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    def reap(self, pid: int, timeout: float = 60.0) -> None:
        """Release a process (after :meth:`kill_session`); its id may then be reused. Returns
        once the server has collected it: at once for a process that has exited, when it
        exits for one that is still ending.

        :raises ForkServerError: the process did not end within ``timeout``.
        """
        with self._lock:
            if pid not in self._running:
                return
            self._running.discard(pid)
            reaped = self._reaped.setdefault(pid, threading.Event())
            try:
                self._send({"reap": pid})
            except ForkServerError:
                return  # the server is gone, and its processes were killed with it
        if not reaped.wait(timeout):
            raise ForkServerError(f"process {pid} did not end within {timeout:g} s")
        self._reaped.pop(pid, None)

    def close(self) -> None:
        """Kill every process the server forked (with their sessions), then the server."""
        for pid in list(self._running):
            self.kill_session(pid)
        with contextlib.suppress(OSError):
            self._commands.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill_session(self._process.pid)
            self._process.wait()
        self._reader.join(timeout=5)
        self._running.clear()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _send(self, command: dict[str, Any]) -> None:
        try:
            self._commands.write(json.dumps(command).encode() + b"\n")
            self._commands.flush()
        except (BrokenPipeError, ValueError, OSError) as ex:
            raise ForkServerError("the fork server stopped") from ex

    def _read_events(self) -> None:
        for line in self._events:
            event = json.loads(line)
            if "exited" in event:
                self._exits.setdefault(int(event["exited"]), queue.Queue()).put(int(event["code"]))
            elif "reaped" in event:
                self._reaped.setdefault(int(event["reaped"]), threading.Event()).set()
            elif event.get("event") != READY:
                self._started.put(event)
        # The server is gone: nobody will report the processes still listed (it killed and
        # collected them as it ended).
        self._started.put({"error": "the fork server stopped"})
        for pid in list(self._running):
            self._exits.setdefault(pid, queue.Queue()).put(-int(signal.SIGKILL))
        for reaped in list(self._reaped.values()):
            reaped.set()
