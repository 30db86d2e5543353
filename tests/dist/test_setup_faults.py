"""Processes that disagree about the layout, or never arrive, are named; setting up again works."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.dist.launch import bare_processes, sessions_alive, slurm_like
from tests.dist.test_check import processes_mentioning

pytestmark = pytest.mark.dist

TIMEOUT_S = 5.0
WAITED_OUT = TIMEOUT_S - 0.5
"""An error raised after at least this long waited out the timeout (clocks differ by ms)."""
MODES = ("mismatch", "invalid", "absent", "absent0", "again", "away3", "away0")


def lonely(out, host):
    # Rank 1 of 2 alone under SLURM's variables: rank 0, which would serve the store, never starts.
    return slurm_like("setup_faults.py", 2, str(out), "lonely", timeout=60, ranks=[1], host=host)


@pytest.fixture(scope="module")
def launched(tmp_path_factory, quiet_host):
    """Every mode's job, launched at the same time: several wait out a timeout."""
    folder = tmp_path_factory.mktemp("setup_faults")
    with ThreadPoolExecutor(len(MODES) + 1) as pool:
        runs = {
            mode: pool.submit(
                bare_processes,
                "setup_faults.py",
                4,
                str(folder / mode),
                mode,
                timeout=120,
                host=quiet_host,
            )
            for mode in MODES
        }
        runs["lonely"] = pool.submit(lonely, folder / "lonely", quiet_host)
    return {mode: (run.result(), folder / mode) for mode, run in runs.items()}


@pytest.fixture
def run_setup_fault(launched):
    def run_setup_fault(mode: str):
        run, out = launched[mode]
        assert processes_mentioning(str(out)) == [], "a process was left behind"
        assert sessions_alive(run.pids) == [], "a process was left behind"
        assert run.returncode == 0, run.output
        return run.results(out)

    return run_setup_fault


def test_a_different_layout_on_one_rank_is_named_on_every_rank_at_once(run_setup_fault):
    results = run_setup_fault("mismatch")
    for me in range(4):
        got = results[me]
        assert got["kind"] == "ValueError"
        assert got["error"].startswith("create_gangs: the processes asked for different things: ")
        assert (
            "ranks [0, 2, 3] asked for pp=1, dp_replicate=1, dp_shard=-1, cp=1, tp=1"
            in got["error"]
        )
        assert "ranks [1] asked for pp=1, dp_replicate=1, dp_shard=-1, cp=1, tp=2" in got["error"]
        assert got["seconds"] < TIMEOUT_S, "named at once, not after the timeout"


def test_an_invalid_layout_on_one_rank_fails_there_and_is_named_elsewhere(run_setup_fault):
    results = run_setup_fault("invalid")
    assert results[1]["error"].startswith("tp: tp=3 does not divide world_size 4")
    for me in (0, 2, 3):
        assert "ranks [1] asked for" in results[me]["error"] and "tp=3" in results[me]["error"]
        assert results[me]["seconds"] < TIMEOUT_S


@pytest.mark.parametrize(("mode", "absent"), [("absent", 3), ("absent0", 0)])
def test_a_rank_that_never_arrives_is_named_when_the_timeout_expires(run_setup_fault, mode, absent):
    results = run_setup_fault(mode)
    for me in range(4):
        if me == absent:
            assert "error" not in results[me]
            continue
        got = results[me]
        assert got["kind"] == "GangError"
        assert got["error"].startswith(f"create_gangs: rank {absent} on ")
        assert "did not arrive within 5 s" in got["error"]
        assert ("rank 0 is among them" in got["error"]) == (absent == 0)
        assert got["culprits"] == [absent]
        assert WAITED_OUT <= got["seconds"] < TIMEOUT_S + 5


def test_a_rank_that_never_sets_up_is_named_when_the_timeout_expires(run_setup_fault):
    results = run_setup_fault("away3")
    assert "error" not in results[3]
    for me in range(3):
        got = results[me]
        assert got["kind"] == "GangError"
        assert got["error"].startswith("setup_root_gang: rank 3 did not arrive within 5 s"), got
        assert got["culprits"] == [3], got
        assert WAITED_OUT <= got["seconds"] < TIMEOUT_S + 5


def test_a_rank_0_that_never_sets_up_is_named_by_every_other_rank_in_time(run_setup_fault):
    results = run_setup_fault("away0")
    assert "error" not in results[0]
    for me in range(1, 4):
        got = results[me]
        assert got["kind"] == "GangError"
        assert got["error"].startswith(f"rank {me}: no setup number from rank 0 within the "), got
        assert "rank 0 is gone or did not start setup_root_gang" in got["error"]
        assert got["culprits"] == [0], got
        assert WAITED_OUT <= got["seconds"] < TIMEOUT_S + 5


def test_setting_up_again_after_close_works(run_setup_fault):
    results = run_setup_fault("again")
    assert [results[me].get("sum") for me in range(4)] == [2.0] * 4


def test_a_store_that_never_answers_fails_within_the_timeout(launched):
    run, out = launched["lonely"]
    assert run.returncode == 0, run.output
    got = run.results(out)[1]
    assert got["kind"] == "GangError"
    assert got["error"].startswith("rank 1: the job's store at 127.0.0.1:")
    assert "served by rank 0, did not answer within the timeout" in got["error"]
    assert WAITED_OUT <= got["seconds"] < TIMEOUT_S + 5
