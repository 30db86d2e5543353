"""A compiled training loop fails as an eager one does (workers/compiled_faults.py, 2 processes,
tp = 2, timeout 10 s): a rank killed in the middle of a compiled step is named by the survivor;
an error of torch.compile's own while it compiles the gang calls is the process's own, never
a collective's that names a gang or a peer."""

from __future__ import annotations

import re
import socket

import pytest

from tests.dist.launch import bare_jobs, sessions_alive
from tests.dist.test_check import processes_mentioning
from tests.shown import assert_line_shown

pytestmark = pytest.mark.dist

TIMEOUT = 10.0
MODES = ("sigkill", "compile_error")
DOCS_BLOCK = "# rank 1 SIGKILLed between its two compiled blocks"  # docs/howto.rst shows it


@pytest.fixture(scope="module")
def launched(tmp_path_factory, quiet_host):
    """Both jobs, launched at the same time."""
    return bare_jobs("compiled_faults.py", 2, tmp_path_factory.mktemp("faults"), MODES,
                     host=quiet_host)  # fmt: skip


@pytest.fixture
def run_fault(launched):
    def run_fault(mode: str):
        run, out = launched[mode]
        assert processes_mentioning(str(out)) == [], "a process was left behind"
        assert sessions_alive(run.pids) == [], "a process was left behind"
        return run, run.results(out)

    return run_fault


def test_a_rank_killed_mid_step_of_a_compiled_loop_is_named_by_the_survivor(run_fault, quiet_host):
    run, found = run_fault("sigkill")
    assert run.returncode == -9, run.output
    survivor, victim = found[0], found[1]
    assert survivor["type"] == "GangError", run.output
    assert survivor["culprits"] == [1], survivor["error"]
    killed = r"(was killed by SIGKILL|is gone: it exited or was killed)"
    assert re.search(rf"global rank 1 on host \S+ \(pid {victim['pid']}\) {killed}",
                     survivor["error"]), survivor["error"]  # fmt: skip
    assert survivor["at"] - victim["broke_at"] <= TIMEOUT + 5, survivor["error"]
    host = socket.gethostname() if quiet_host is None else quiet_host.name
    alike = {"is gone: it exited or was killed": "was killed by SIGKILL"}
    assert_line_shown("howto.rst", DOCS_BLOCK, "killed by SIGKILL", [survivor["error"]],
                      hosts=[host], alike=alike)  # fmt: skip


def test_a_compile_error_in_gang_calls_is_the_process_own_error(run_fault):
    run, found = run_fault("compile_error")
    assert run.returncode == 1, run.output
    for rank in (0, 1):
        got = found[rank]
        assert got["type"] == "InductorError", got["error"]
        assert got["error"].startswith("InvalidCxxCompiler: No working C++ compiler"), got["error"]
        assert got["culprits"] == []
    assert "GangError" not in run.output, "neither the error nor the last words blame a gang"
