"""The fork server's own process (``python -m gangmesh.testing.forkserver_process``): it
imports the modules it is given, then forks a process per request of its
:class:`~gangmesh.testing.forkserver.ForkServer` and runs that process's job as ``__main__``
(see :mod:`gangmesh.testing.forkserver`).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import runpy
import select
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from gangmesh.testing.forkserver import READY, Job
from gangmesh.testing.netns import enter


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

    emit({"event": READY, "threads": len(os.listdir("/proc/self/task"))
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
        enter(job.enter)
    os.chdir(job.cwd)
    os.environ.clear()
    os.environ.update(job.env)
    _reseed()
    try:
        if job.module:
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
        # as the interpreter does: the error's frames, and what they hold, live on through exit
        sys.last_type, sys.last_value, sys.last_traceback = type(ex), ex, ex.__traceback__
        if sys.version_info >= (3, 12):
            sys.last_exc = ex
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
    # As the interpreter does: the hooks registered for this moment first (a thread pool's
    # tells its idle workers to end), then the join of every non-daemon thread.
    threading._shutdown()  # type: ignore[attr-defined]
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
