"""Linux namespaces for the host test bed: make one, enter one, run a command in one.

A namespace here is anonymous: it lives as long as its *holder*, a process started in it
by ``unshare`` that blocks on its standard input, and the processes that entered it. It
has no name in ``/run/netns`` that could outlive a test run: once the holder sees its
input close (:meth:`Holder.close`, or the process that made it ended in any way, killed
included), it kills every process still in the namespace and ends, and the kernel
removes the namespace and every link in it. A host's
holder has network, hostname (UTS) and mount namespaces of its own, with its hostname set
and files bound over ``/etc/hosts`` and ``/etc/resolv.conf``; the link's holder has a
network namespace only.

Processes enter a host in one of two ways: a process forked from a warm interpreter
calls :func:`enter` before it runs anything (``setns`` of each namespace; a forked child
runs one thread, as the mount namespace requires); a new process runs under
:func:`enter_command` (``nsenter``). Needs Linux, root (``CAP_SYS_ADMIN``), ``unshare``,
``nsenter`` and ``ip``. Imports neither torch nor the rest of gangmesh.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "HOST_KINDS",
    "Holder",
    "NamespaceError",
    "enter",
    "enter_command",
    "namespaces_unavailable",
    "processes_in",
]

HOST_KINDS = ("net", "uts", "mnt")
"""The namespaces of a host, in the order they are entered (the mount namespace last)."""

_FLAGS = {"net": 0x40000000, "uts": 0x04000000, "mnt": 0x00020000}
"""``CLONE_NEW*`` of each kind, as ``setns`` takes it."""

_READY = b"ready\n"
_HOLD = """
import os, signal, sys
sys.stdin.buffer.read()
mine = os.stat("/proc/self/ns/net").st_ino
for _ in range(100):
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                if os.stat(f"/proc/{name}/ns/net").st_ino == mine:
                    found.append(int(name))
            except OSError:
                pass
    if not found:
        break
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""
"""What a holder runs once its namespaces are made: wait until its input closes (the
process that made it closed it, or ended in any way), then SIGKILL every process still
in its network namespace (until none is left), and end: the namespaces go with it."""
_START_TIMEOUT = 30.0


class NamespaceError(RuntimeError):
    """A namespace could not be made, entered or configured."""


class Holder:
    """A process that holds new namespaces until :meth:`close` (or until this process ends).

    :param kinds: which namespaces to make: ``"net"`` and, for a host, ``"uts"`` and
        ``"mnt"``.
    :param hostname: the hostname inside (needs ``"uts"``).
    :param binds: files bound over others inside, ``{file: target}`` such as
        ``{"/tmp/bed/hosts": "/etc/hosts"}`` (needs ``"mnt"``).
    :raises NamespaceError: ``unshare`` failed or the holder did not start in time.
    """

    def __init__(
        self, kinds: Sequence[str], *, hostname: str = "", binds: Mapping[str, str] | None = None
    ) -> None:
        flags = {"net": "--net", "uts": "--uts", "mnt": "--mount"}
        setup = ["ip link set lo up"]
        if hostname:
            setup.append(f"hostname {_quoted(hostname)}")
        for source, target in (binds or {}).items():
            setup.append(f"mount --bind {_quoted(source)} {_quoted(target)}")
        # The shell reports ready, then becomes the Python of _HOLD.
        script = " && ".join([*setup, "echo ready", 'exec "$0" -I -S -c "$1"'])
        command = ["unshare", *(flags[kind] for kind in kinds)]
        if "mnt" in kinds:
            command.append("--propagation=private")
        command += ["--", "sh", "-c", script, sys.executable, _HOLD]
        self.kinds = tuple(kinds)
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.pid = self._process.pid
        assert self._process.stdout is not None
        line = _read_line(self._process.stdout, _START_TIMEOUT)
        if line != _READY:
            error = self._end()
            raise NamespaceError(
                f"{' '.join(command[:4])} ...: could not make the namespaces "
                f"({error.decode(errors='replace').strip() or 'no answer'})"
            )
        self.inodes = {kind: os.stat(self.path(kind)).st_ino for kind in self.kinds}

    def path(self, kind: str) -> str:
        """The file of namespace ``kind`` of this holder (``/proc/PID/ns/KIND``).

        :param kind: ``"net"``, ``"uts"`` or ``"mnt"``.
        """
        return f"/proc/{self.pid}/ns/{kind}"

    def run(self, command: Sequence[str], timeout: float = 30.0) -> str:
        """Run ``command`` inside this holder's namespaces; its output.

        :param command: the program and its arguments.
        :param timeout: seconds the command may run.
        :raises NamespaceError: the command failed or did not end within ``timeout``.
        """
        full = enter_command(self.pid, self.kinds, command)
        try:
            done = subprocess.run(full, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as ex:
            raise NamespaceError(f"{' '.join(command)}: no end within {timeout:g} s") from ex
        if done.returncode != 0:
            raise NamespaceError(
                f"{' '.join(command)}: exit code {done.returncode}: {done.stderr.strip()}"
            )
        return done.stdout

    def close(self) -> None:
        """End the holder (the namespaces go once nothing else is in them); idempotent."""
        self._end()

    def _end(self) -> bytes:
        """End the holder; what it wrote to its standard error (the first time)."""
        with contextlib.suppress(OSError):
            if self._process.stdin is not None:
                self._process.stdin.close()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            self._process.wait()
        error = b""
        with contextlib.suppress(OSError, ValueError):
            if self._process.stderr is not None:
                error = self._process.stderr.read()
        for stream in (self._process.stdout, self._process.stderr):
            if stream is not None:
                stream.close()
        return error


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _read_line(stream: object, timeout: float) -> bytes:
    """One line of a pipe, or b"" when none comes within ``timeout``."""
    import select

    fd = stream.fileno()  # type: ignore[attr-defined]
    line = b""
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return b""
        chunk = os.read(fd, 1)
        if not chunk:
            return line
        line += chunk
    return line


def enter_command(pid: int, kinds: Sequence[str], command: Sequence[str]) -> list[str]:
    """``command`` run by ``nsenter`` in the namespaces ``kinds`` of process ``pid``, in
    this process's working directory (where the mount namespace changes).

    :param pid: a process in the namespaces (a holder).
    :param kinds: which of its namespaces to enter.
    :param command: the program and its arguments.
    """
    flags = {"net": "--net", "uts": "--uts", "mnt": "--mount"}
    where = [f"--wd={os.getcwd()}"] if "mnt" in kinds else []
    return ["nsenter", f"--target={pid}", *(flags[kind] for kind in kinds), *where, "--",
            *command]  # fmt: skip


def enter(paths: Sequence[str]) -> None:
    """Move this process into the namespaces whose files (``/proc/PID/ns/KIND``) are
    given, the mount namespace last; then return to the working directory it had.

    :param paths: the namespaces' files.
    :raises NamespaceError: a namespace could not be entered (this process runs more
        than one thread, lacks the privilege, or the namespace is gone).
    """
    cwd = os.getcwd()
    fds = []
    try:
        for path in sorted(paths, key=lambda p: HOST_KINDS.index(Path(p).name)):
            fds.append((Path(path).name, os.open(path, os.O_RDONLY)))
        for kind, fd in fds:
            _setns(fd, _FLAGS[kind], kind)
    except OSError as ex:
        raise NamespaceError(f"cannot enter the namespaces {list(paths)}: {ex}") from ex
    finally:
        for _, fd in fds:
            os.close(fd)
    os.chdir(cwd)


def _setns(fd: int, flag: int, kind: str) -> None:
    setns = getattr(os, "setns", None)  # Python 3.12+
    if setns is not None:
        setns(fd, flag)
        return
    if _libc().setns(fd, flag) != 0:
        error = ctypes.get_errno()
        raise NamespaceError(f"setns({kind}): {os.strerror(error)}")


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


@functools.cache
def namespaces_unavailable() -> str:
    """Why hosts cannot be made here ("" if they can): the system, a missing tool, or a
    refusal of the kernel, in one line."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux, this is {sys.platform}"
    missing = [tool for tool in ("unshare", "nsenter", "ip", "mount") if not shutil.which(tool)]
    if missing:
        return f"network namespaces need {', '.join(missing)} (util-linux, iproute2), not found"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    try:
        holder = Holder(("net", "uts", "mnt"), hostname="probe")
    except (NamespaceError, OSError) as ex:
        return f"cannot make network namespaces here: {ex}"
    try:
        holder.run(["ip", "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"])
    except NamespaceError as ex:
        return f"cannot make a virtual ethernet link in a network namespace: {ex}"
    finally:
        holder.close()
    return ""


def processes_in(inodes: Sequence[int], started_before: float | None = None) -> list[int]:
    """Processes that are in, or hold a file of, one of the namespaces ``inodes`` (network
    namespaces are compared by inode): what keeps them alive.

    The kernel gives a number of a namespace that is gone to the next one made, so a check
    made after a namespace's end must pass ``started_before``: a process in a newer
    namespace with the same number started after it.

    :param inodes: the namespaces' inode numbers.
    :param started_before: if given, only processes started before this reading of
        ``time.clock_gettime(time.CLOCK_BOOTTIME)`` (one clock tick's precision: a process
        started in the tick of the reading counts as later).
    """
    wanted = set(inodes)
    latest = None if started_before is None else int(started_before * _TICKS_PER_SECOND)
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if latest is not None and _start_tick(proc) >= latest:
                continue
            if any(os.stat(proc / "ns" / kind).st_ino in wanted for kind in HOST_KINDS):
                found.append(int(proc.name))
                continue
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    link = os.readlink(fd)
                    kind, _, inode = link.partition(":[")
                    if kind in HOST_KINDS and int(inode.rstrip("]")) in wanted:
                        found.append(int(proc.name))
                        break
    return found


_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""The unit of a process's start time in ``/proc/<pid>/stat``."""


def _start_tick(proc: Path) -> int:
    # Field 22 of stat, counted after the command's closing parenthesis (the command may
    # hold spaces): clock ticks from boot.
    fields = (proc / "stat").read_text().rpartition(")")[2].split()
    return int(fields[19])
