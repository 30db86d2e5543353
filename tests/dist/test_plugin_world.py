"""The plugin's gangmesh_world marker, used as a project uses it: each test runs a pytest
session in a temporary directory whose test runs in every process of a real gloo world."""

from __future__ import annotations

import os
import select
import shutil
from pathlib import Path

import pytest

from tests.unit.test_docs_examples_testing import EXAMPLES
from tests.unit.test_plugin import report_of, run_inline

pytestmark = pytest.mark.dist


def children_of(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def has_ended(pid: int) -> bool:
    """True once process ``pid`` has terminated (waits for it, up to a minute, if it has not)."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([handle], [], [], 60)
        return bool(ready)
    finally:
        os.close(handle)


needs_proc = pytest.mark.skipif(
    not (Path("/proc/self/stat").exists() and hasattr(os, "pidfd_open")),
    reason="looks for processes in /proc and waits on them with pidfd_open (Linux)",
)


@needs_proc
def test_a_world_runs_the_test_in_every_rank(pytester: pytest.Pytester, tmp_path: Path):
    before = children_of(os.getpid())
    recorder = run_inline(
        pytester,
        f"""
        import os
        from pathlib import Path

        import pytest
        import torch
        import gangmesh as gm

        OUT = Path({str(tmp_path)!r})

        @pytest.mark.gangmesh_world(3)
        def test_sum(root_gang):
            assert isinstance(root_gang, gm.ProcessGroupGang)
            (OUT / f"rank{{root_gang.rank}}").write_text(f"{{os.getpid()}} {{root_gang.size}}")
            total = torch.tensor(float(root_gang.rank + 1))
            root_gang.all_reduce(total, gm.ReduceOperation.SUM)
            assert total.item() == 6.0
        """,
    )
    recorder.assertoutcome(passed=1)
    written = {p.name: p.read_text().split() for p in tmp_path.iterdir()}
    assert sorted(written) == ["rank0", "rank1", "rank2"]
    assert {size for _, size in written.values()} == {"3"}
    pids = {int(pid) for pid, _ in written.values()}
    assert len(pids) == 3 and os.getpid() not in pids
    assert all(has_ended(pid) for pid in pids)
    assert children_of(os.getpid()) <= before


@needs_proc
def test_a_failing_rank_is_reported_once_with_its_message(pytester: pytest.Pytester):
    before = children_of(os.getpid())
    recorder = run_inline(
        pytester,
        """
        import pytest

        @pytest.mark.gangmesh_world(2)
        def test_refuse(root_gang):
            root_gang.barrier()
            assert root_gang.rank != 1, f"rank {root_gang.rank} refuses"
        """,
    )
    recorder.assertoutcome(failed=1)
    failure = report_of(recorder, "test_refuse")
    text = failure.longreprtext
    assert text.splitlines()[0] == "rank 1 of 2: AssertionError: rank 1 refuses"
    assert "passed: rank 0 of 2" in text
    assert " rank 1 of 2 " in text and "assert 1 != 1" in text  # rank 1's own traceback
    assert "rank 0 of 2:" not in text
    assert children_of(os.getpid()) <= before


@needs_proc
def test_a_hanging_rank_is_killed_with_what_it_started(pytester: pytest.Pytester, tmp_path: Path):
    before = children_of(os.getpid())
    # The world starts in a test of its own, so that the 10 s bound the hang (a new world's
    # start counts against its first test's timeout; a loaded machine can take that long).
    pytester.makepyfile(
        test_a_world_starts="""
        import pytest

        @pytest.mark.gangmesh_world(2)
        def test_start():
            pass
        """
    )
    recorder = run_inline(
        pytester,
        f"""
        import os
        import subprocess
        import sys
        from pathlib import Path

        import pytest

        OUT = Path({str(tmp_path)!r})

        @pytest.mark.gangmesh_world(2, timeout=10)
        def test_hang():
            (OUT / f"rank{{os.environ['RANK']}}").write_text(str(os.getpid()))
            if os.environ["RANK"] == "1":
                stuck = [sys.executable, "-c", "import threading; threading.Event().wait()"]
                started = subprocess.Popen(stuck)
                (OUT / "started").write_text(str(started.pid))
                started.wait()
        """,
    )
    recorder.assertoutcome(passed=1, failed=1)
    text = report_of(recorder, "test_hang").longreprtext
    assert "did not finish" in text.splitlines()[0]
    assert "rank 1 of 2: did not finish within 10 s" in text
    assert ", line 17 in test_hang" in text  # where rank 1 was stuck: started.wait()
    pids = [int(p.read_text()) for p in sorted(tmp_path.iterdir())]
    assert len(pids) == 3  # rank0, rank1 and the process rank 1 started
    assert all(has_ended(pid) for pid in pids)
    assert children_of(os.getpid()) <= before


def test_skip_and_xfail_apply_to_the_world(pytester: pytest.Pytester):
    recorder = run_inline(
        pytester,
        """
        import os
        import pytest

        @pytest.mark.gangmesh_world(2)
        def test_skipped_everywhere():
            pytest.skip("not on this machine")

        @pytest.mark.xfail(reason="known bug", strict=True)
        @pytest.mark.gangmesh_world(2)
        def test_known_bug():
            assert os.environ["RANK"] == "0"

        @pytest.mark.skip(reason="never started")
        @pytest.mark.gangmesh_world(2)
        def test_not_started():
            raise AssertionError("ran")
        """,
    )
    skipped = report_of(recorder, "test_skipped_everywhere")
    assert skipped.skipped and "not on this machine" in str(skipped.longrepr)
    known = report_of(recorder, "test_known_bug")
    assert known.skipped and known.wasxfail == "known bug"
    assert report_of(recorder, "test_not_started").skipped


def test_the_docs_examples_pass_in_a_project_of_their_own(pytester: pytest.Pytester):
    for name in ("batch_slicing.py", "test_batch_slicing.py"):
        shutil.copy(EXAMPLES / name, pytester.path / name)
    result = pytester.runpytest("-p", "no:cacheprovider", "test_batch_slicing.py")
    result.assert_outcomes(passed=2)


@needs_proc
def test_a_test_that_breaks_its_world_does_not_reach_the_next(
    pytester: pytest.Pytester, tmp_path: Path
):
    before = children_of(os.getpid())
    recorder = run_inline(
        pytester,
        f"""
        import os
        import signal
        import subprocess
        import sys
        import threading
        from pathlib import Path

        import pytest
        import torch
        import torch.distributed as dist
        import gangmesh as gm

        OUT = Path({str(tmp_path)!r})

        def note(test, *more):
            (OUT / f"{{test}}-rank{{os.environ['RANK']}}").write_text(f"{{os.getpid()}} {{os.getppid()}}")
            for name, pid in more:
                (OUT / name).write_text(str(pid))

        def summed(gang):
            total = torch.tensor(float(gang.rank + 1))
            gang.all_reduce(total, gm.ReduceOperation.SUM)
            return total.item()

        @pytest.mark.gangmesh_world(2)
        def test_1_leaves_groups_behind():
            note("1")
            root = gm.setup_root_gang()
            gm.create_gangs(root, tp=2).tp.barrier()  # never closed, nor is the default group
            dist.new_group([0, 1])

        @pytest.mark.gangmesh_world(2)
        def test_2_starts_clean():
            note("2")
            assert not dist.is_initialized()
            root = gm.setup_root_gang()
            assert summed(root) == 3.0
            assert summed(gm.create_gangs(root, tp=2).tp) == 3.0
            root.close()

        @pytest.mark.gangmesh_world(2)
        def test_3_leaves_a_process_running(root_gang):
            stuck = [sys.executable, "-c", "import threading; threading.Event().wait()"]
            note("3", (f"started-by-rank{{root_gang.rank}}", subprocess.Popen(stuck).pid))

        @pytest.mark.gangmesh_world(2, timeout=60)
        def test_4_kills_a_rank(root_gang):
            note("4")
            if root_gang.rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            root_gang.barrier()
            threading.Event().wait()

        @pytest.mark.gangmesh_world(2, timeout=10)
        def test_5_hangs_a_collective(root_gang):
            note("5")
            if root_gang.rank == 0:
                summed(root_gang)  # rank 1 never joins
            threading.Event().wait()

        @pytest.mark.gangmesh_world(2)
        def test_6_root_gang_still_works(root_gang):
            note("6")
            assert dist.get_world_size() == 2
            assert summed(root_gang) == 3.0
        """,
    )
    recorder.assertoutcome(passed=4, failed=2)
    killed = report_of(recorder, "test_4_kills_a_rank").longreprtext
    assert "rank 1 of 2: exited with code -9 before the test finished" in killed.splitlines(), (
        killed
    )
    hung = report_of(recorder, "test_5_hangs_a_collective").longreprtext
    assert hung.splitlines()[0] == "timed out after 10 s: ranks 0, 1 of 2 did not finish", hung
    notes = {p.name: [int(n) for n in p.read_text().split()] for p in tmp_path.iterdir()}
    ran = sorted(name for name in notes if not name.startswith("started"))
    assert ran == [f"{test}-rank{rank}" for test in "123456" for rank in (0, 1)]
    world = {test: tuple(notes[f"{test}-rank{rank}"][0] for rank in (0, 1)) for test in "123456"}
    assert world["1"] == world["2"] == world["3"], "a world whose test left groups runs the next"
    assert len({world["3"], world["4"], world["5"], world["6"]}) == 4, (
        "a test that leaves a process, kills a rank or hangs ends its world"
    )
    assert len({pid for pids in world.values() for pid in pids}) == 8
    parents = {notes[name][1] for name in ran}
    assert len(parents) == 1 and os.getpid() not in parents, "forked from one warm interpreter"
    started = [notes[f"started-by-rank{rank}"][0] for rank in (0, 1)]
    pids = [pid for pids in world.values() for pid in pids]
    assert all(has_ended(pid) for pid in pids + started + list(parents))
    assert children_of(os.getpid()) <= before


def test_fresh_ranks_run_the_same_tests_as_new_interpreters(
    pytester: pytest.Pytester, tmp_path: Path
):
    pytester.makepyfile(
        test_user=f"""
        import os
        from pathlib import Path

        import pytest
        import torch
        import gangmesh as gm

        @pytest.mark.gangmesh_world(2)
        def test_sum(root_gang):
            Path({str(tmp_path)!r}, f"rank{{root_gang.rank}}").write_text(str(os.getppid()))
            total = torch.tensor(float(root_gang.rank + 1))
            root_gang.all_reduce(total, gm.ReduceOperation.SUM)
            assert total.item() == 3.0
        """
    )
    recorder = pytester.inline_run("-p", "no:cacheprovider", "--gangmesh-fresh-ranks")
    recorder.assertoutcome(passed=1)
    assert {p.read_text() for p in tmp_path.iterdir()} == {str(os.getpid())}


@needs_proc
def test_a_world_means_cpu_also_where_cuda_looks_available(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    # the user's suite sets nothing; inside the world, code under test that leaves the device
    # to setup_root_gang takes cpu even where torch says CUDA is there (stand-ins here)
    monkeypatch.delenv("GANGMESH_DEVICE", raising=False)
    recorder = run_inline(
        pytester,
        """
        import os

        import pytest
        import torch
        import gangmesh as gm

        @pytest.mark.gangmesh_world(2)
        def test_default_device(monkeypatch):
            monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
            monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
            assert os.environ["GANGMESH_DEVICE"] == "cpu"
            root = gm.setup_root_gang()
            assert root.device == torch.device("cpu")
            root.barrier()
            root.close()

        @pytest.mark.gangmesh_world(2, device="cuda")
        def test_on_gpus(root_gang):
            assert root_gang.device.type == "cuda"
        """,
    )
    recorder.assertoutcome(passed=1, skipped=1 if not torch_sees_two_gpus() else 0)
    if not torch_sees_two_gpus():
        skipped = report_of(recorder, "test_on_gpus")
        assert "gangmesh_world(2, device='cuda'): 2 GPUs wanted" in str(skipped.longrepr)


def torch_sees_two_gpus() -> bool:
    import torch

    return torch.cuda.device_count() >= 2
