"""Where a stuck rank stands, asked by a survivor on its host: the program's own signal
handlers are kept, nothing is left on disk, and a probe after the dumps ended kills nothing.

Each test runs a real second process (the rank asked) that installs the dumps as a rank of a
job does, and answers on its stdout; this process asks it as a survivor would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed.distributed_c10d
import torch.distributed.pipelining.schedules

from gangmesh.runtime.faults import stacks

REPO = Path(__file__).resolve().parents[2]

# The rank asked: sets up what the test names, installs the dumps, says its dump and main
# thread, then waits on stdin for commands ("uninstall", "exit"), each answered with a line.
# Asked with a bound far above a dump's milliseconds: the machine may be busy.
BOUND = 30.0
RANK = """
import faulthandler, os, signal, sys, threading
from gangmesh.runtime.faults import stacks
own_dump = open(sys.argv[1], "w")
setup = sys.argv[2]
if setup == "own-sigusr2":
    faulthandler.register(signal.SIGUSR2, file=own_dump, all_threads=False)
    signal.signal(signal.SIGUSR1, lambda *_: print("usr1", flush=True))
if setup == "own-faulthandler-on-the-signal":
    faulthandler.register(stacks.SIGNAL, file=own_dump)
def wait_for_orders(got):
    print("installed", *(got or (-1, 0)), flush=True)
    for line in sys.stdin:
        if line.strip() == "uninstall":
            stacks.uninstall()
            print("uninstalled", flush=True)
        if line.strip() == "exit":
            print("exiting", flush=True)
            return
wait_for_orders(stacks.install())
"""


class Rank:
    """The second process, and what it said."""

    def __init__(self, setup: str, tmp_path: Path) -> None:
        self.own_dump = tmp_path / "own.txt"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop(stacks.SWITCH, None)
        self.process = subprocess.Popen(
            [sys.executable, "-c", RANK, str(self.own_dump), setup],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        said = self.line().split()
        assert said[0] == "installed", said
        self.fd, self.main = int(said[1]), int(said[2])

    def line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def order(self, order: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(order + "\n")
        self.process.stdin.flush()
        return self.line()

    def alive(self) -> bool:
        return self.process.poll() is None

    def end(self) -> None:
        if self.alive():
            self.process.kill()
        self.process.wait(30)


@pytest.fixture
def rank(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Rank]:
    asked = Rank(request.param, tmp_path)
    yield asked
    asked.end()


@pytest.mark.parametrize("rank", ["plain"], indirect=True)
def test_a_rank_in_its_own_code_says_where_it_stands_from_memory_not_disk(rank):
    standing = stacks.ask(rank.process.pid, rank.fd, rank.main, BOUND)
    assert standing is not None
    assert "<string>" in standing.where and "wait_for_orders" in standing.where, standing
    assert not standing.in_collective  # reading stdin: the program's own code
    assert os.readlink(f"/proc/{rank.process.pid}/fd/{rank.fd}").startswith("/memfd:")
    assert rank.order("exit") == "exiting"
    rank.process.wait(30)  # nothing of it outlives it: the dump was in memory


@pytest.mark.parametrize("rank", ["own-sigusr2"], indirect=True)
def test_the_program_s_own_sigusr1_and_sigusr2_handlers_are_kept(rank):
    assert rank.fd >= 0  # gangmesh's dumps are installed beside them
    os.kill(rank.process.pid, signal.SIGUSR1)
    assert rank.line() == "usr1"  # the program's own Python handler ran
    os.kill(rank.process.pid, signal.SIGUSR2)
    assert rank.order("uninstall") == "uninstalled"  # answers after its own dump
    assert "wait_for_orders" in rank.own_dump.read_text()  # faulthandler wrote its file
    assert rank.alive()


@pytest.mark.parametrize("rank", ["own-faulthandler-on-the-signal"], indirect=True)
def test_nothing_is_installed_where_the_program_handles_the_signal_itself(rank):
    # faulthandler's registration shows only at the C level: it is seen there
    assert rank.fd == -1
    os.kill(rank.process.pid, stacks.SIGNAL)
    assert rank.order("exit") == "exiting"
    assert "wait_for_orders" in rank.own_dump.read_text()  # the program's dump, not gangmesh's


@pytest.mark.parametrize("rank", ["plain"], indirect=True)
def test_a_probe_after_the_dumps_ended_finds_nothing_to_ask_and_kills_nothing(rank):
    pid, fd = rank.process.pid, rank.fd
    assert rank.order("uninstall") == "uninstalled"
    assert stacks.dump_of(pid, fd) is None  # the report's descriptor is no dump any more
    assert stacks.ask(pid, fd, rank.main) is None
    os.kill(pid, stacks.SIGNAL)  # a survivor that read the report just before: ignored
    assert rank.order("exit") == "exiting"
    assert rank.process.wait(30) == 0


def test_dumps_can_be_switched_off(tmp_path):
    script = textwrap.dedent("""
        import signal
        from gangmesh.runtime.faults import stacks
        before = signal.getsignal(stacks.SIGNAL)
        assert stacks.install() is None
        assert signal.getsignal(stacks.SIGNAL) is before
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO), stacks.SWITCH: "0"}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)


def test_a_thread_is_in_a_collective_where_its_innermost_frame_past_the_stdlib_is_torch_s():
    c10d = torch.distributed.distributed_c10d.__file__
    schedules = torch.distributed.pipelining.schedules.__file__
    waits = threading.__file__  # the standard library's: looked through
    own = "/work/train.py"
    frames = {
        "in a collective": [(c10d, 1, "all_reduce"), (own, 9, "step")],
        "waiting on one": [(waits, 1, "wait"), (c10d, 1, "wait"), (own, 9, "step")],
        "own code in a hook of torch's": [
            (own, 3, "hang"),
            (schedules, 1, "step"),
            (own, 9, "main"),
        ],
        "own code, through the stdlib": [(waits, 1, "wait"), (own, 3, "load"), (c10d, 1, "x")],
        "the stdlib alone": [(waits, 1, "wait"), ("<frozen runpy>", 1, "_run_code")],
    }
    found = {what: stacks._in_collective(f) for what, f in frames.items()}
    assert found == {
        "in a collective": True,
        "waiting on one": True,
        "own code in a hook of torch's": False,
        "own code, through the stdlib": False,
        "the stdlib alone": True,
    }
