"""A rank that dies or stops during setup is named by every survivor within the timeout
and 5 s: killed as the default group connects, stopped before create_gangs' meeting,
ended before it reached the job's store (the ranks with a longer timeout hear it from rank
0), and rank 0, which serves that store, ended (4 gloo processes, timeout 4 s;
workers/setup_deaths.py). The errors docs/howto.rst shows
are these runs' own."""

from __future__ import annotations

import re
import socket

import pytest

from tests.dist.launch import bare_jobs, sessions_alive, torchrun
from tests.shown import assert_line_shown

pytestmark = pytest.mark.dist

TIMEOUT_S = 4.0
MODES = ("connecting", "stopped", "never", "rank0")
DOCS_BLOCK = "# killed while the default group connects"


@pytest.fixture(scope="module")
def found(tmp_path_factory, quiet_host):
    """Every mode's job, launched at the same time: each waits out a timeout."""
    jobs = bare_jobs("setup_deaths.py", 4, tmp_path_factory.mktemp("setup_deaths"), MODES,
                     host=quiet_host)  # fmt: skip
    results = {}
    for mode, (run, out) in jobs.items():
        assert sessions_alive(run.pids) == [], "a process was left behind"
        results[mode] = run.results(out)
        assert sorted(results[mode]) == [0, 1, 2, 3], run.output
    return results


def errors_of(got: dict[int, dict], victim: int) -> list[str]:
    """The survivors' errors, each checked to name only the victim, in time."""
    errors = []
    for rank, result in got.items():
        if rank == victim:
            assert "error" not in result, result
            continue
        assert result["culprits"] == [victim], result
        assert result["seconds"] <= TIMEOUT_S + 5, result
        errors.append(result["error"])
    return errors


@pytest.fixture
def host(quiet_host) -> str:
    return socket.gethostname() if quiet_host is None else quiet_host.name


def test_a_rank_killed_as_the_default_group_connects_is_named_with_how_it_ended(found, host):
    errors = errors_of(found["connecting"], 2)
    pid = found["connecting"][2]["pid"]
    for error in errors:
        assert error.startswith(
            "the default process group (gloo) failed to start: "
            f"global rank 2 on host {host} (pid {pid}) was killed by SIGKILL"
        ), error
    assert_line_shown("howto.rst", DOCS_BLOCK, "(gloo) failed", errors, hosts=[host])


def test_a_rank_stopped_before_create_gangs_is_named_as_stopped(found, host):
    errors = errors_of(found["stopped"], 2)
    pid = found["stopped"][2]["pid"]
    for error in errors:
        assert error.startswith(
            f"create_gangs: global rank 2 on host {host} (pid {pid}) is stopped (SIGSTOP"
        ), error
    assert_line_shown("howto.rst", DOCS_BLOCK, "is stopped", errors, hosts=[host])


def test_a_rank_that_never_reached_the_store_is_named_by_its_rank(found, host):
    # ranks 1 and 3 wait 60 s: they end with rank 0's finding, in rank 0's time
    errors = errors_of(found["never"], 2)
    for error in errors:
        assert error.startswith("setup_root_gang: rank 2 did not arrive within 4 s"), error
    assert_line_shown("howto.rst", DOCS_BLOCK, "did not arrive", errors, hosts=[host])


def test_rank_0_ended_with_the_store_it_serves_is_named_by_every_other_rank(found, host):
    errors = errors_of(found["rank0"], 0)
    for rank, error in zip((1, 2, 3), errors, strict=True):
        assert error.startswith(f"rank {rank}: no setup number from rank 0 "), error
        assert "rank 0 is gone" in error, error
    assert_line_shown("howto.rst", DOCS_BLOCK, "no setup number", errors, hosts=[host])


@pytest.mark.parametrize("late", [0, 3])
def test_a_rank_alive_but_late_to_setup_is_named_as_late_not_gone(tmp_path, late):
    # under torchrun each rank can tell, from /proc, that the rank which has not come runs
    # beside it: a loaded machine's slow import is not a death
    run = torchrun("late.py", 4, str(tmp_path), str(late), timeout=120)
    assert run.returncode != 0, run.output
    found = run.results(tmp_path)
    assert found and late not in found, run.output
    for got in found.values():
        assert got["culprits"] == [late], got
        if late == 0:
            said = r"rank 0 \(alive, pid \d+: late, not gone\) has not started setup_root_gang"
        else:
            said = r"rank 3 \(alive, pid \d+: late, not gone\) did not arrive within 4 s"
        assert re.search(said, got["error"]), got
