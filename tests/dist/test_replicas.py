"""Replica groups that fail alone (torchft): the recipe's local run, and bad input refused."""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

import gangmesh as gm
from tests.dist.launch import REPO, free_port, processes, run_command
from tests.shown import assert_output_shown

pytestmark = pytest.mark.dist

RECIPE = REPO / "docs/examples/fault_tolerant_hsdp.py"


@pytest.fixture
def lighthouse():
    with gm.start_lighthouse(heartbeat_timeout=timedelta(seconds=1)) as running:
        yield running


@pytest.fixture
def pair_lighthouse():
    """A lighthouse whose quorums wait for two groups: both groups meet in the first one."""
    with gm.start_lighthouse(2, heartbeat_timeout=timedelta(seconds=1)) as running:
        yield running


def groups_of(per_group: int, count: int = 2):
    """``env_of`` for ``count`` launches of ``per_group`` processes each, on 127.0.0.1."""
    ports = [free_port() for _ in range(count)]

    def env_of(index: int) -> dict[str, str]:
        env = {"GANGMESH_TEST_INDEX": str(index)}
        if per_group > 1:
            group, rank = divmod(index, per_group)
            env.update(RANK=str(rank), WORLD_SIZE=str(per_group), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(per_group), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=str(ports[group]))  # fmt: skip
        return env

    return env_of


def outcomes(tmp_path, scenario: str, where: str, per_group: int, count: int) -> dict:
    run = processes("replicas.py", per_group * count, str(tmp_path), scenario, where,
                    timeout=120, env_of=groups_of(per_group, count))  # fmt: skip
    results = run.results(tmp_path)
    assert sorted(results) == list(range(per_group * count)), run.output
    return results


def test_the_recipe_loses_a_replica_group_goes_on_and_heals_it(tmp_path):
    run = run_command([sys.executable, str(RECIPE), "--local", "--out", str(tmp_path)],
                      timeout=300, env={"RUST_LOG": "warn"})  # fmt: skip
    assert run.returncode == 0, run.output
    line = re.search(
        r"^replica group 1 lost at step (?P<lost>\d+): group 0 went on without a restart \(stalled "
        r"(?P<stall>[\d.]+) s\); group 1 rejoined at step (?P<back>\d+) in (?P<heal>[\d.]+) s "
        r"with group 0's weights; every committed step matches the reference within 1e-05 "
        r"\(worst (?P<worst>\S+)\)$",
        run.output,
        re.MULTILINE,
    )
    assert line, run.output
    assert int(line["lost"]) >= 4, "lost at the step asked for, or where group 1 joined late"
    assert int(line["back"]) > int(line["lost"]), "came back after steps group 0 took alone"
    assert float(line["worst"]) <= 1e-5
    assert_output_shown("fault_tolerance.rst", "$ python docs/examples/fault_tolerant_hsdp.py",
                        run.output, varying=[r"at step \d+"])  # fmt: skip


def test_a_broken_group_held_in_its_exit_no_longer_holds_the_others(tmp_path):
    """Group 1's code raises; its rank 0 (torchft's Manager server) is held at exit after
    gangmesh's exit handler: group 0 commits a step alone while that process still lives.
    (The lighthouse waits for a group that heartbeats longer than the process is held.)"""
    gate = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    with gm.start_lighthouse(heartbeat_timeout=timedelta(seconds=1),
                             join_timeout=timedelta(seconds=120)) as lighthouse:  # fmt: skip
        run = processes("replica_exit.py", 4, str(tmp_path), lighthouse.address,
                        str(gate.port), "held", timeout=120, env_of=groups_of(2),
                        finalize=True)  # fmt: skip
    assert run.returncode == 1 and "TIMED OUT" not in run.output, run.output
    assert run.output.count("RuntimeError: group 1's own code broke") == 2, run.output
    results = run.results(tmp_path)
    assert sorted(results) == [0, 1, 2], run.output
    for rank in (0, 1):
        assert results[rank]["together"] >= 1 and results[rank]["alone"] >= 1, run.output
    assert results[2] == {"others_went_on": True}, run.output


def test_a_group_s_process_stopped_by_its_launcher_stops_torchft_s_manager_first(
    tmp_path, lighthouse
):
    gate = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)

    def stop() -> None:  # as torchrun stops a worker
        gate.wait(["pid"], timedelta(seconds=60))
        os.kill(int(gate.get("pid")), signal.SIGTERM)

    stopper = threading.Thread(target=stop, daemon=True)
    stopper.start()
    run = processes("replica_exit.py", 2, str(tmp_path), lighthouse.address, str(gate.port),
                    "stopped", timeout=120, env_of=groups_of(2, 1))  # fmt: skip
    stopper.join(5)
    assert "TIMED OUT" not in run.output, run.output
    rank0 = run.output.split("Starting rank 1 of 2")[0]  # each process's output in turn
    assert "Replica group left: torchft's Manager of this process stopped" in rank0, run.output


def test_an_unreachable_lighthouse_is_named_within_the_timeout(tmp_path):
    closed = free_port()
    (result,) = outcomes(tmp_path, "unreachable", str(closed), 1, 1).values()
    assert result["kind"] == "GangError"
    assert result["error"].startswith(
        f"join_replicas: replica group 0: the lighthouse at http://127.0.0.1:{closed} cannot be "
        f"reached: nothing answers at 127.0.0.1:{closed} (Connection refused)"
    ), result["error"]
    assert result["waited"] < 3 + 5  # refused for its quorum timeout at most (here 3 s)


def test_a_lighthouse_that_takes_connections_and_never_answers_fails_the_join(tmp_path):
    with socket.socket() as silent:  # the kernel takes the connections; nothing answers them
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        results = outcomes(tmp_path, "silent", str(port), 2, 1)
    for result in results.values():
        assert "joined" not in result, "refused by join_replicas, not at the first step"
        assert result["kind"] == "GangError"
        assert result["error"] == (
            f"join_replicas: replica group 0: the lighthouse at http://127.0.0.1:{port} does not "
            "answer as one: it took the connection but did not answer within 3 s; start one "
            "with torchft_lighthouse or gangmesh.start_lighthouse there"
        )


def test_no_quorum_names_the_lighthouse_and_the_group_and_the_stores_listen_on_one_interface(
    tmp_path, pair_lighthouse
):
    results = outcomes(tmp_path, "lonely", pair_lighthouse.address, 2, 1)
    port = pair_lighthouse.address.rsplit(":", 1)[1]
    for result in results.values():  # the lighthouse waits for a second group that never comes
        assert result["kind"] == "GangError"
        assert result["error"].startswith(
            f"replica group 0: no quorum from the lighthouse at http://127.0.0.1:{port}: "
        ), result["error"]
        assert "metadata" not in result["error"].lower(), "torchft's reason, not a gRPC dump"
    assert results[0]["job_store"] == ["127.0.0.1"], "MASTER_ADDR's interface, not every one"
    assert results[0]["manager_store"] == ["127.0.0.1"], "where the lighthouse was asked from"


def test_without_torchft_joining_says_how_to_install_it(tmp_path):
    (result,) = outcomes(tmp_path, "missing", "", 1, 1).values()
    assert result["kind"] == "ImportError"
    assert "pip install 'gangmesh[ft]'" in result["error"]


def test_a_replicate_size_beside_replica_groups_is_refused(tmp_path, lighthouse):
    (result,) = outcomes(tmp_path, "replicate", lighthouse.address, 1, 1).values()
    assert result["kind"] == "ValueError"
    assert result["error"].startswith("dp_replicate: expected 1 with replicas="), result["error"]


def test_two_launches_with_one_group_number_are_refused(tmp_path, pair_lighthouse):
    results = outcomes(tmp_path, "twice", pair_lighthouse.address, 1, 2)
    for result in results.values():
        assert result["kind"] == "ValueError", results
        assert result["error"].startswith("group: replica group 0 joined twice"), result["error"]


def test_replica_groups_laid_out_differently_are_refused_naming_both_layouts(
    tmp_path, pair_lighthouse
):
    results = outcomes(tmp_path, "layouts", pair_lighthouse.address, 2, 2)
    for index, result in results.items():
        assert result["kind"] == "ValueError", results
        mine, other = (0, 1) if index < 2 else (1, 0)
        assert result["error"].startswith(
            f"replica groups {mine} and {other} are laid out differently: "
        ), result["error"]
        assert "2 processes (dp_shard 2) and 2 processes (tp 2)" in result["error"] or (
            "2 processes (tp 2) and 2 processes (dp_shard 2)" in result["error"]
        ), result["error"]


def test_gangmesh_check_runs_replica_groups_and_checks_the_reduction_across_them():
    run = run_command([sys.executable, "-m", "gangmesh", "check", "--nproc", "2", "--tp", "2",
                       "--replica-groups", "2", "--sizes", "8", "--iters", "2"],
                      timeout=300, env={"RUST_LOG": "warn"})  # fmt: skip
    assert run.returncode == 0, run.output
    for group in (0, 1):
        assert re.search(
            rf"^replica groups: 2 in the step \(this one: group {group}, rank \d\); all_reduce "
            r"across them right in [\d.]+ ms; the step committed$",
            run.output,
            re.MULTILINE,
        ), run.output
    assert run.output.count("layout: pp=1, dp_replicate=1, dp_shard=1, cp=1, tp=2\n") == 2
    assert run.output.rstrip().endswith(
        "PASSED: 2 replica groups of 2 processes: each matches its plan, and the reduction "
        "across them is right"
    ), run.output


def test_gangmesh_check_of_replica_groups_prints_what_the_docs_show():
    run = run_command([sys.executable, "-m", "gangmesh", "check", "--nproc", "2",
                       "--replica-groups", "2"], timeout=300, env={"RUST_LOG": "warn"})  # fmt: skip
    assert run.returncode == 0, run.output
    assert_output_shown("fault_tolerance.rst", "$ gangmesh check --nproc 2 --replica-groups 2",
                        run.output, varying=[r"rank \d\)"])  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--replica-groups", "2", "--dp-replicate", "2"],
         "--dp-replicate: expected 1 with replica groups"),
        (["--replica-groups", "2", "--lighthouse", "h:1"],
         "--replica-groups: starts its own lighthouse; not with --lighthouse"),
        (["--replica-groups", "0"], "--replica-groups: expected an int >= 1, got 0"),
    ],
)  # fmt: skip
def test_gangmesh_check_refuses_replica_options_that_cannot_be_in_one_line(extra, message):
    run = run_command([sys.executable, "-m", "gangmesh", "check", "--nproc", "2", *extra],
                      timeout=60)  # fmt: skip
    assert run.returncode == 2, run.output
    assert run.output.startswith(f"gangmesh check: error: {message}"), run.output
    assert run.output.count("\n") == 1, run.output
