"""A warm interpreter that forks fresh processes for multi-process tests.

Starting a rank of a test world costs an interpreter start and ``import torch`` (seconds
on a small machine) for milliseconds of collectives. :class:`ForkServer` pays that once:
it starts ``python -m gangmesh.testing.forkserver``, which imports the modules it is
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
collected when it ends). Imports neither torch nor the rest of gangmesh (the server does,
in its own process). Needs a POSIX system.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any

__all__ = ["ForkServer", "ForkServerError", "Job"]

_READY = "ready"


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
                [sys.executable, "-m", __name__, *preload],
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
            elif event.get("event") != _READY:
                self._started.put(event)
        # The server is gone: nobody will report the processes still listed (it killed and
        # collected them as it ended).
        self._started.put({"error": "the fork server stopped"})
        for pid in list(self._running):
            self._exits.setdefault(pid, queue.Queue()).put(-int(signal.SIGKILL))
        for reaped in list(self._reaped.values()):
            reaped.set()


# --- the server process -------------------------------------------------------------------


def _serve(preload: Sequence[str]) -> Job | None:
    """Import ``preload``, then fork a process per request until stdin closes. Returns
    only in a forked process, with the job it is to run."""
    for name in preload:
        __import__(name)
    # The garbage collector of a forked process would write to every object the imports
    # made, copying each page it shares with this one (a quarter of a second of CPU per
    # process with torch imported): frozen, they are left out of its collections.
    gc.collect()
    gc.freeze()
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    os.set_blocking(wake_read, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    commands = sys.stdin.buffer
    events = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # a stray print must not reach the event stream
    running: set[int] = set()  # forked, exit not yet reported
    exited: set[int] = set()  # exit reported, not yet reaped
    doomed: set[int] = set()  # to be reaped as soon as they exit

    def emit(event: dict[str, Any]) -> None:
        events.write(json.dumps(event).encode() + b"\n")
        events.flush()

    def reap(pid: int) -> None:
        exited.discard(pid)
        os.waitpid(pid, 0)
        emit({"reaped": pid})

    emit({"event": _READY, "threads": len(os.listdir("/proc/self/task"))
          if os.path.isdir("/proc/self/task") else None})  # fmt: skip
    pending = b""
    while True:
        ready, _, _ = select.select([commands, wake_read], [], [])
        if wake_read in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_read, 512):
                    pass
            for pid in sorted(running):
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
                if info is not None and info.si_pid == pid:
                    running.discard(pid)
                    exited.add(pid)
                    code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
                    emit({"exited": pid, "code": code})
                    if pid in doomed:
                        doomed.discard(pid)
                        reap(pid)
        if commands not in ready:
            continue
        chunk = os.read(commands.fileno(), 65536)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            command = json.loads(line)
            if "reap" in command:
                pid = int(command["reap"])
                if pid in exited:
                    reap(pid)
                elif pid in running:
                    doomed.add(pid)  # killed, but its exit has not been seen yet
                else:
                    emit({"reaped": pid})
                continue
            job = Job(**command["spawn"])
            pid = _fork(job, [wake_read, wake_write])
            if pid == 0:
                events.close()
                return job
            running.add(pid)
            emit({"pid": pid})
    for pid in running | exited:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    for pid in running | exited:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return None


def _fork(job: Job, close: list[int]) -> int:
    """Fork; in the child, become a new session with the job's files and environment (0)."""
    session_read, session_write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(session_write)
        os.read(session_read, 1)  # the child is a session leader: killpg(pid) reaches it
        os.close(session_read)
        return pid
    os.setsid()
    os.write(session_write, b"x")
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in [*close, session_read, session_write]:
        with contextlib.suppress(OSError):
            os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    output = os.open(job.output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(null, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(null)
    os.close(output)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stdin
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    return 0


def _run(job: Job) -> int:
    """Run the job as ``__main__`` in this (forked) process; the exit code. Unless the
    job asks for the interpreter's own finalisation, do what it does at exit on the
    Python side here."""
    if job.enter:  # a host of a bed: before anything else, while this is the only thread
        from gangmesh.testing.netns import enter

        enter(job.enter)
    os.chdir(job.cwd)
    os.environ.clear()
    os.environ.update(job.env)
    _reseed()
    try:
        if job.module:
            import runpy

            sys.argv = [job.target, *job.argv]
            sys.path[0] = job.path0 if job.path0 is not None else job.cwd
            runpy.run_module(job.target, run_name="__main__", alter_sys=True)
        else:
            script = Path(job.target)
            sys.argv = [str(script), *job.argv]
            sys.path[0] = job.path0 if job.path0 is not None else str(script.resolve().parent)
            main = ModuleType("__main__")
            main.__file__ = str(script)
            main.__dict__["__builtins__"] = __builtins__
            sys.modules["__main__"] = main
            exec(compile(script.read_bytes(), str(script), "exec"), main.__dict__)
        code = 0
    except SystemExit as ex:
        code = _exit_code(ex.code)
    except BaseException as ex:
        sys.excepthook(type(ex), ex, ex.__traceback__)
        code = 1
    return code if job.finalize else _exit(code)


def _exit_code(value: object) -> int:
    """The process exit code of ``SystemExit(value)``."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _exit(code: int) -> int:
    """The interpreter's exit, Python side: wait for non-daemon threads, run the atexit
    hooks, flush the streams. (The C++ static destructors that follow in a new
    interpreter, seconds of deregistering torch operators, are skipped, unless the job
    asks for them with ``finalize``.)"""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _reseed() -> None:
    """Give this process random state of its own, as a new interpreter would have
    (Python's ``random`` reseeds itself after a fork)."""
    numpy = sys.modules.get("numpy.random")
    if numpy is not None:
        numpy.seed()


def _main() -> None:
    job = _serve(sys.argv[1:])
    if job is not None:
        code = _run(job)
        if job.finalize:
            gc.unfreeze()  # a new interpreter's finalisation collects what the imports made
            sys.exit(code)  # the interpreter's whole exit: hooks, finalisation, C++ teardown
        os._exit(code)


if __name__ == "__main__":
    _main()
