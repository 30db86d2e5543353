"""The pytest plugin, used as a project uses it: from a pytest run in a temporary directory.

The marker's tests start real processes and live in tests/dist/test_plugin_world.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch.distributed as dist


def run_inline(pytester: pytest.Pytester, source: str) -> pytest.HookRecorder:
    """Run a test file in this process, with the plugin loaded from its entry point."""
    pytester.makepyfile(test_user=textwrap.dedent(source))
    return pytester.inline_run("-p", "no:cacheprovider")


def report_of(recorder: pytest.HookRecorder, name: str) -> pytest.TestReport:
    """The one report of a test's call phase (or of the phase where it went wrong)."""
    reports = [
        r
        for r in recorder.getreports("pytest_runtest_logreport")
        if r.nodeid.endswith(f"::{name}") and (r.when == "call" or not r.passed)
    ]
    assert len(reports) == 1, reports
    return reports[0]


def test_the_plugin_loads_from_its_entry_point_without_torch():
    script = textwrap.dedent(
        """
        import importlib.metadata
        import sys

        (entry,) = importlib.metadata.entry_points(group="pytest11", name="gangmesh")
        assert entry.value == "gangmesh.testing.plugin", entry
        entry.load()
        heavy = sorted(name for name in ("torch", "numpy", "hypothesis") if name in sys.modules)
        assert not heavy, heavy
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def test_the_marker_is_registered(pytester: pytest.Pytester):
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.gangmesh_world(n, hosts=1, numbering='consecutive', device='cpu', "
            "timeout=120):*"
        ]
    )


# --- the simulated_gangs fixture ------------------------------------------------------------


def test_simulated_gangs_builds_a_rank_and_tears_it_down(pytester: pytest.Pytester):
    recorder = run_inline(
        pytester,
        """
        import pytest
        import torch.distributed as dist
        import gangmesh as gm

        def test_one_rank_of_a_large_world(simulated_gangs):
            gangs = simulated_gangs(4096, 4095, pp=4, tp=8)
            assert (gangs.tp.rank, gangs.pp.rank, gangs.dp.size) == (7, 3, 128)
            assert dist.get_world_size() == 4096

        def test_every_rank_in_turn(simulated_gangs):
            first = simulated_gangs(8, 0, tp=2)
            for rank in range(8):
                gangs = simulated_gangs(8, rank, tp=2)
                assert gangs.tp.rank == rank % 2
            assert dist.get_rank() == 7
            with pytest.raises(gm.GangError, match="closed"):
                first.root.barrier()

        def test_a_wrong_expectation(simulated_gangs):
            gangs = simulated_gangs(16, 13, tp=2)
            assert gangs.tp.rank == 0, "rank 13 should lead its tp pair"

        def test_nothing_is_left_after_a_failure():
            assert not dist.is_initialized()
        """,
    )
    recorder.assertoutcome(passed=3, failed=1)
    failure = report_of(recorder, "test_a_wrong_expectation")
    assert failure.failed
    assert "AssertionError: rank 13 should lead its tp pair" in failure.longreprtext
    assert "assert 1 == 0" in failure.longreprtext
    assert not dist.is_initialized()


def test_simulated_gangs_rejects_bad_arguments_and_leaves_nothing(pytester: pytest.Pytester):
    recorder = run_inline(
        pytester,
        """
        import pytest
        import torch.distributed as dist

        def test_bad_rank(simulated_gangs):
            with pytest.raises(ValueError, match="rank"):
                simulated_gangs(8, 8)
            assert not dist.is_initialized()
            assert simulated_gangs(8, 7).root.rank == 7
        """,
    )
    recorder.assertoutcome(passed=1)
    assert not dist.is_initialized()


def test_root_gang_outside_a_world_and_bad_markers_are_reported(pytester: pytest.Pytester):
    recorder = run_inline(
        pytester,
        """
        import pytest

        def test_root_gang_alone(root_gang):
            pass

        @pytest.mark.gangmesh_world(0)
        def test_empty_world():
            pass

        @pytest.mark.gangmesh_world(2, timeout=-1)
        def test_negative_timeout():
            pass
        """,
    )
    alone = report_of(recorder, "test_root_gang_alone")
    assert alone.when == "setup" and alone.failed
    assert "only tests marked @pytest.mark.gangmesh_world(n) have a root gang" in (
        alone.longreprtext
    )
    empty = report_of(recorder, "test_empty_world")
    assert "with an int n >= 1, got args=(0,)" in empty.longreprtext
    negative = report_of(recorder, "test_negative_timeout")
    assert "timeout: expected a positive number of seconds, got -1" in negative.longreprtext


# --- the gangmesh_world marker --------------------------------------------------------------
