"""Who broke a push across a join, as a survivor names it from the join's store and /proc:
real processes of this host, gone or hung; what a process said as it ended; the error file
and the stop line that follow."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import timedelta

import pytest
import torch.distributed as dist

from gangmesh.assembly.join_blame import Transfer, blame, mark, report
from gangmesh.assembly.join_sides import Epoch, Member, Side
from gangmesh.assembly.store_calls import BoundedStore, release
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime import faults
from gangmesh.runtime.faults import STOPPED_BY_LAUNCHER, outside, stop_notice

EPOCH = Epoch(2, 3)
TIMEOUT = timedelta(seconds=3)
TIMED_OUT = RuntimeError("Timed out waiting 3000ms for recv operation to complete")
CLOSED = RuntimeError("Connection closed by peer [127.0.0.1]:4242")


@pytest.fixture
def store() -> Iterator[BoundedStore]:
    """A store of this process, its calls bounded as the join's are."""
    kept = dist.HashStore()
    yield BoundedStore(kept, 2.0)
    release(kept)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes of this host standing in for another job's ranks; ended after the test."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()
    outside.note("")


def member(rank: int, processes: list[subprocess.Popen[bytes]], *, gone: bool = False) -> Member:
    """A rank of the generator: a process of this host, alive or gone."""
    process = subprocess.Popen(["sleep", "60"])
    processes.append(process)
    started = faults.process_start(process.pid)
    if gone:
        process.kill()
        process.wait()
    return Member(rank, Member.this_process(0).host, process.pid, started, None, None)


def sides(generator: list[Member]) -> dict[str, Side]:
    me = Member.this_process(0)
    return {
        "trainer": Side("trainer", 2, MeshTopology(1), {}, (me,)),
        "generator": Side("generator", 3, MeshTopology(len(generator)), {}, tuple(generator)),
    }


def named(store: BoundedStore, joined: dict[str, Side], cause: RuntimeError) -> str:
    members = (("trainer", 0), *(("generator", m.rank) for m in joined["generator"].members))
    transfer = Transfer(EPOCH, 5, members)
    error = blame(store, "broadcast failed on bridge 'push trainer 0'", cause, joined,
                  ("trainer", 0), transfer, TIMEOUT)  # fmt: skip
    return f"{error.job} {list(error.culprits)}: {error}"


def test_a_rank_gone_without_a_word_is_named_not_the_rank_its_launcher_stopped(store, processes):
    generator = [member(0, processes, gone=True), member(1, processes, gone=True)]
    report(store, "generator", generator[1], STOPPED_BY_LAUNCHER)
    said = named(store, sides(generator), CLOSED)
    pid = generator[0].pid
    assert said.startswith(f"generator [0]: broadcast failed on bridge 'push trainer 0': rank 0 "
                           f"of job generator on host {generator[0].host} (pid {pid}) is gone"), said  # fmt: skip
    assert "(a peer's connection closed)" in said and "rank 1" not in said


def test_a_rank_that_said_what_it_raised_is_named_by_its_words(store, processes):
    generator = [member(0, processes), member(1, processes, gone=True)]
    report(store, "generator", generator[1], "raised ValueError: the rollout buffer is corrupt")
    said = named(store, sides(generator), CLOSED)
    assert said.startswith("generator [1]: ") and "raised ValueError: the rollout buffer is" in said


def test_a_rank_alive_that_never_entered_the_push_is_named_hung_after_the_timeout(store, processes):
    generator = [member(0, processes), member(1, processes)]
    mark(store, "generator", 0, Transfer(EPOCH, 5, ()))  # rank 0 is in the push; rank 1 is not
    said = named(store, sides(generator), TIMED_OUT)
    assert said.startswith("generator [1]: "), said
    assert "is alive but never entered it (hung, or busy elsewhere) (timed out after 3 s)" in said


def test_the_error_file_and_the_stop_line_say_who_broke_it(store, processes, tmp_path, monkeypatch):
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    generator = [member(0, processes, gone=True)]
    said = named(store, sides(generator), CLOSED)
    message = json.loads(path.read_text())["message"]["message"]
    assert message == "GangError: " + said.split(": ", 1)[1]
    line = stop_notice._across_a_join()
    assert (
        line.startswith("after a joined job broke: broadcast failed on bridge")
        and "is gone" in line
    )
