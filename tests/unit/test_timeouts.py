"""Timeouts are datetime.timedelta: a number is a TypeError saying so, one not above zero a
ValueError in seconds; ``gangmesh check`` names the option that is wrong, before it imports
torch."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest
import torch

import gangmesh as gm
from gangmesh.testing import simulate_gangs

CPU = torch.device("cpu")


def calls_with(value: object) -> dict[str, object]:
    """Each public call that takes a timeout, given ``value``, by the argument's name."""
    return {
        "setup_root_gang": lambda: gm.setup_root_gang(timeout=value),
        "create_gangs": lambda: gm.create_gangs(gm.FakeGang(CPU, size=2), timeout=value),
        "create_parts": lambda: gm.create_parts(gm.FakeGang(CPU, size=2), a=1, b=1, timeout=value),
    }


@pytest.mark.parametrize("seconds", [5, 2.5])
def test_a_number_of_seconds_is_a_type_error_naming_timedelta(seconds):
    for name, call in calls_with(seconds).items():
        with pytest.raises(TypeError, match=r"^timeout: expected a datetime\.timedelta") as info:
            call()
        assert f"got {seconds!r}" in str(info.value), name


def test_a_negative_timeout_is_said_in_seconds():
    for name, call in calls_with(timedelta(seconds=-5)).items():
        with pytest.raises(ValueError) as info:
            call()
        said = str(info.value)
        assert said == "timeout: expected a positive datetime.timedelta, got -5 s", name


def test_the_replica_groups_name_each_timeout():
    pytest.importorskip("torchft")
    with pytest.raises(TypeError, match=r"^heartbeat_timeout: expected a datetime\.timedelta"):
        gm.start_lighthouse(heartbeat_timeout=5)  # type: ignore[arg-type]
    with simulate_gangs(1, 0) as gangs:
        with pytest.raises(ValueError, match=r"^quorum_timeout: .* got -5 s$"):
            gm.join_replicas(gangs.root, lighthouse="127.0.0.1:1", group=0,
                             quorum_timeout=timedelta(seconds=-5))  # fmt: skip


CHECK = """
import sys
from gangmesh.tools.cli import main
code = main(sys.argv[1:])
print(code, "torch" in sys.modules)
"""


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--timeout", "-1"], "--timeout: expected a positive number of seconds, got -1"),
        (["--timeout", "nan"], "--timeout: expected a positive number of seconds, got nan"),
        (["--iters", "0"], "--iters: expected an int >= 1, got 0"),
        (["--nproc", "0"], "--nproc: expected an int >= 1, got 0"),
        (["--nproc", "6", "--tp", "4"], "--tp: --tp=4 does not divide --nproc 6"),
        (["--ranks-per-node", "3"], "--ranks-per-node: expected a factor of --nproc 4"),
        (["--sizes", "1"], "--sizes: expected sizes of at least 4 bytes"),
        (["--lighthouse", "localhost:99999"],
         "--lighthouse: expected a port in 1..65535, got 99999 in 'localhost:99999'"),
        (["--part", "a=2", "--part", "b=-3"], "--part"),
    ],
)  # fmt: skip
def test_check_names_the_wrong_option_before_it_imports_torch(args, said):
    run = subprocess.run(
        [sys.executable, "-c", CHECK, "check", *args], capture_output=True, text=True, timeout=60
    )
    assert run.stdout.split() == ["2", "False"], (run.stdout, run.stderr)
    assert run.stderr.startswith(f"gangmesh check: error: {said}"), run.stderr
    assert run.stderr.count("\n") == 1, run.stderr
