"""What /proc tells a survivor about a process on its host: running, stopped, killed, exited, gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from gangmesh.runtime.faults import peer_state

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture
def child():
    """A process that waits for its stdin to close; killed and reaped afterwards."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def _until_ended(proc: subprocess.Popen) -> None:
    """Wait until ``proc`` has ended without reaping it (it stays a zombie)."""
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)


def test_a_running_process_has_no_fate(child):
    assert peer_state.fate(child.pid, peer_state.start_time(child.pid)) is None


def test_a_stopped_process_is_stopped(child):
    started = peer_state.start_time(child.pid)
    os.kill(child.pid, signal.SIGSTOP)
    os.waitid(os.P_PID, child.pid, os.WSTOPPED | os.WNOWAIT)
    assert peer_state.fate(child.pid, started) == (
        "is stopped (SIGSTOP, SIGTSTP or a debugger) and does not answer"
    )
    os.kill(child.pid, signal.SIGCONT)


def test_a_killed_process_names_the_signal(child):
    started = peer_state.start_time(child.pid)
    child.kill()
    _until_ended(child)
    assert peer_state.fate(child.pid, started) == "was killed by SIGKILL"


def test_an_exited_process_names_its_exit_code():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    started = peer_state.start_time(proc.pid)
    _until_ended(proc)
    try:
        assert peer_state.fate(proc.pid, started) == "exited with code 3"
    finally:
        proc.wait(timeout=30)
    assert peer_state.fate(proc.pid, started).startswith("is gone")


def test_another_process_under_the_same_pid_is_not_the_one_asked_about(child):
    started = peer_state.start_time(child.pid)
    assert started is not None
    assert peer_state.fate(child.pid, started + 1).startswith("is gone")


def test_only_a_process_of_this_job_that_started_when_said_is_acted_on(monkeypatch, tmp_path):
    import subprocess
    import sys

    from gangmesh.runtime.faults.error_files import ours
    from gangmesh.runtime.faults.peer_state import sibling, start_time

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29777")
    wait = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    same = subprocess.Popen(wait, stdin=subprocess.PIPE)
    other = subprocess.Popen(wait, stdin=subprocess.PIPE, env={**os.environ, "MASTER_PORT": "1"})
    try:
        started = start_time(same.pid)
        assert sibling(same.pid, started)
        assert not sibling(same.pid, None)  # a pid alone may be another process's by now
        assert not sibling(same.pid, (started or 0) + 1)  # a later process of that pid
        assert not sibling(other.pid, start_time(other.pid))  # another job's
    finally:
        for process in (same, other):
            process.kill()
            process.wait(30)
    attempt = tmp_path / "run" / "attempt_0"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(attempt / "0" / "error.json"))
    assert ours(str(attempt / "3" / "error.json"))
    assert not ours(str(tmp_path / "elsewhere" / "3" / "error.json"))
    assert not ours(str(attempt / "3" / "notes.txt"))
