"""torchft's lighthouse, started as torchft documents it (``torchft_lighthouse``), for local
runs and tests of replica groups."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from types import TracebackType

from typing_extensions import override

from gangmesh.plan._checks import check_duration, check_positive
from gangmesh.runtime.gang import GangError
from gangmesh.runtime.replica_group import INSTALL_HINT, torchft

SCRIPT = "torchft_lighthouse"


class Lighthouse:
    """A running ``torchft_lighthouse`` process; a context manager that stops it.

    :param process: the lighthouse's process.
    """

    address: str
    """Where the replica groups reach it: ``http://host:port``."""
    log_path: Path
    """The file its output goes to, until :meth:`close` removes it."""

    def __init__(self, process: subprocess.Popen[bytes], address: str, log_path: Path) -> None:
        self.process, self.address, self.log_path = process, address, log_path

    def close(self) -> None:
        """Stop the lighthouse, wait for it to end and remove its log."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> Lighthouse:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @override
    def __repr__(self) -> str:
        return f"Lighthouse({self.address}, pid {self.process.pid})"


def start_lighthouse(
    min_replicas: int = 1,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    heartbeat_timeout: timedelta = timedelta(seconds=5),
    join_timeout: timedelta = timedelta(seconds=60),
    timeout: timedelta = timedelta(seconds=30),
) -> Lighthouse:
    """Start ``torchft_lighthouse`` on ``host`` and wait until it accepts connections.

    :param min_replicas: the fewest replica groups a quorum forms with.
    :param host: the address it listens on and is reached at.
    :param port: its port; default: a free one.
    :param heartbeat_timeout: how long a silent replica group stays in the quorum: the
        stall of the others when one is lost.
    :param join_timeout: how long a quorum waits for groups that heartbeat but have not
        asked to join.
    :param timeout: how long to wait for it to listen.
    :raises ImportError: torchft is not installed.
    :raises ValueError: a size below 1, or a timeout that is not a positive timedelta
        (TypeError too where it is no timedelta).
    :raises GangError: it did not start listening within ``timeout``.
    """
    torchft()
    min_replicas = check_positive("min_replicas", min_replicas)
    heartbeat_timeout = check_duration("heartbeat_timeout", heartbeat_timeout)
    join_timeout = check_duration("join_timeout", join_timeout)
    timeout = check_duration("timeout", timeout)
    port = port or _free_port(host)
    command = lighthouse_command(min_replicas, f"{host}:{port}", heartbeat_timeout, join_timeout)
    log_path = Path(tempfile.mkstemp(prefix="gangmesh-lighthouse-", suffix=".log")[1])
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    lighthouse = Lighthouse(process, f"http://{host}:{port}", log_path)
    deadline = time.monotonic() + timeout.total_seconds()
    while not _accepts(host, port):
        try:
            code = process.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            if time.monotonic() < deadline:
                continue
            said = _tail(log_path)
            lighthouse.close()
            raise GangError(
                f"start_lighthouse: {SCRIPT} did not listen on {host}:{port} within "
                f"{timeout.total_seconds():g} s; its output: {said}"
            ) from None
        said = _tail(log_path)
        lighthouse.close()
        raise GangError(f"start_lighthouse: {SCRIPT} ended with {code}: {said}")
    return lighthouse


def _tail(log_path: Path) -> str:
    """The end of the lighthouse's output, for an error's message."""
    return log_path.read_text(errors="replace")[-2000:].strip() or "(none)"


def lighthouse_command(
    min_replicas: int, bind: str, heartbeat_timeout: timedelta, join_timeout: timedelta
) -> list[str]:
    """The ``torchft_lighthouse`` command line that :func:`~gangmesh.start_lighthouse` runs.

    :param min_replicas: the fewest replica groups a quorum forms with.
    :param bind: where it listens, ``host:port``.
    :param heartbeat_timeout: how long a silent replica group stays in the quorum.
    :param join_timeout: how long a quorum waits for groups that have not asked to join.
    :raises ImportError: the script is not installed.
    """
    script = shutil.which(SCRIPT, path=str(Path(sys.executable).parent)) or shutil.which(SCRIPT)
    if script is None:
        raise ImportError(f"{SCRIPT} is not on PATH: {INSTALL_HINT}")
    return [script, "--min_replicas", str(min_replicas), "--bind", bind,
            "--heartbeat_timeout_ms", _ms(heartbeat_timeout),
            "--join_timeout_ms", _ms(join_timeout), "--quorum_tick_ms", "20"]  # fmt: skip


def _ms(duration: timedelta) -> str:
    return str(max(1, round(duration.total_seconds() * 1000)))


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False
