"""Faults become bounded GangErrors: a hung peer, a killed peer, ranks absent from a barrier."""

from __future__ import annotations

import pytest

from tests.dist.launch import bare_jobs, sessions_alive
from tests.dist.test_check import processes_mentioning

pytestmark = pytest.mark.dist

TIMEOUT_S = 5.0
WAITED_OUT = TIMEOUT_S - 0.5
"""An error raised after at least this long waited out the timeout (clocks differ by ms)."""
MODES = ("absent", "sigkill", "monitored", "monitored_mesh")


@pytest.fixture(scope="module")
def launched(tmp_path_factory, quiet_host):
    """Every mode's job, launched at the same time: most of each is waiting out a timeout."""
    return bare_jobs("faults.py", 4, tmp_path_factory.mktemp("faults"), MODES, host=quiet_host)


@pytest.fixture
def run_fault(launched):
    def run_fault(mode: str):
        run, out = launched[mode]
        assert processes_mentioning(str(out)) == [], "a process was left behind"
        assert sessions_alive(run.pids) == [], "a process was left behind"
        return run, run.results(out)

    return run_fault


def test_a_peer_that_never_enters_a_sub_gang_all_reduce(run_fault):
    run, results = run_fault("absent")
    assert run.returncode == 0, run.output
    for rank, local in ((1, 0), (2, 1)):
        got = results[rank]
        assert got["error"].startswith(
            f"all_reduce(SUM) failed on gang 'root[1,2,3]' (size 3, rank {local}, global rank {rank})"
        )
        assert got["cause"] == "RuntimeError", "torch's error is chained"
        assert WAITED_OUT <= got["seconds"] < 20
        assert got["closed_twice"] is True
    assert "error" not in results[0] and "error" not in results[3]


def test_a_peer_killed_mid_loop(run_fault):
    run, results = run_fault("sigkill")
    assert run.returncode == -9, "only the killed process fails"
    killed_at = results[2]["killed_at"]
    for rank in (0, 1, 3):
        got = results[rank]
        assert got["error"].startswith(
            f"all_reduce(SUM) failed on gang 'root' (size 4, rank {rank}"
        )
        assert got["errored_at"] - killed_at < TIMEOUT_S + 5, "within the timeout and 5 s more"
        assert got["closed_twice"] is True


def test_a_monitored_barrier_names_every_absent_rank(run_fault):
    run, results = run_fault("monitored")
    assert run.returncode == 0, run.output
    error = results[0]["error"]
    assert error.startswith("barrier failed on gang 'root' (size 4, rank 0, global rank 0)")
    assert "gang ranks [2, 3] (global ranks [2, 3]) did not arrive in 5 s" in error
    assert results[0]["culprits"] == [2, 3]
    assert WAITED_OUT <= results[0]["seconds"] < 20
    assert results[1]["error"].endswith(
        "gang rank 0 (global rank 0) did not confirm it in 5 s: it is gone or stuck, "
        "or a rank did not arrive and rank 0 names it"
    ), "rank 1 arrived but hears of the failure too"
    assert results[1]["culprits"] == [], "rank 1 cannot tell who"


def test_a_monitored_barrier_on_a_mesh_gang_names_the_absent_rank(run_fault):
    run, results = run_fault("monitored_mesh")
    assert run.returncode == 0, run.output
    error = results[2]["error"]
    assert error.startswith("barrier failed on gang 'tp' (size 2, rank 0, global rank 2)")
    assert error.endswith("gang ranks [1] (global ranks [3]) did not arrive in 5 s")
    assert results[2]["culprits"] == [3]
    assert WAITED_OUT <= results[2]["seconds"] < 20
    assert "error" not in results[0] and "error" not in results[1]
