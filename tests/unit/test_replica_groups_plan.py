"""Replica groups without processes: gangmesh plan --replica-groups, and the arguments that
join_replicas and start_lighthouse refuse before anything starts."""

from __future__ import annotations

import json
import re
import socket
from datetime import timedelta

import pytest

import gangmesh as gm
from gangmesh.assembly.replicas import _check_reachable, _group_number, lighthouse_address
from gangmesh.tools.cli import main


def test_the_table_says_it_is_one_of_the_replica_groups_and_how_many_ranks_in_all(capsys):
    assert main(["plan", "--world-size", "4", "--tp", "2", "--replica-groups", "3"]) == 0
    out = capsys.readouterr().out
    first, second = out.splitlines()[:2]
    assert first == (
        "each of 3 replica groups (dp_replicate managed by torchft): 4 ranks, 12 in all:"
    )
    assert second == "MeshTopology(4, pp=1, dp_replicate=1, dp_shard=2, cp=1, tp=2)"


def test_the_json_and_the_picture_name_the_replica_groups(capsys):
    assert main(["plan", "--world-size", "4", "--replica-groups", "2", "--format", "json",
                 "--json-content", "counts"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["replica_groups"] == 2
    assert main(["plan", "--world-size", "4", "--replica-groups", "2", "--format", "svg"]) == 0
    svg = capsys.readouterr().out
    assert (
        "<title>gangmesh plan: each of 2 replica groups (dp_replicate managed by torchft): 4" in svg
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--replica-groups", "0"], "--replica-groups: expected an int >= 1, got 0"),
        (["--replica-groups", "2", "--dp-replicate", "2"],
         "--dp-replicate: expected 1 with --replica-groups"),
    ],
)  # fmt: skip
def test_a_replica_group_count_that_cannot_be_is_one_line(capsys, extra, message):
    assert main(["plan", "--world-size", "4", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gangmesh plan: error: {message}") and err.count("\n") == 1


def test_replica_groups_are_refused_beside_parts(capsys):
    assert main(["plan", "--part", "a=2", "--part", "b=2", "--replica-groups", "2"]) == 2
    assert "--replica-groups: not with --part" in capsys.readouterr().err


def test_the_lighthouse_address_comes_from_the_argument_or_torchft_s_variable(monkeypatch):
    monkeypatch.setenv("TORCHFT_LIGHTHOUSE", "host0:29510")
    assert lighthouse_address(None) == "http://host0:29510"
    assert lighthouse_address("http://other:1") == "http://other:1"
    monkeypatch.delenv("TORCHFT_LIGHTHOUSE")
    with pytest.raises(ValueError, match=r"^lighthouse: expected the lighthouse's address"):
        lighthouse_address(None)


@pytest.mark.parametrize(
    "address",
    ["http//127.0.0.1:29510", "127.0.0.1", "127.0.0.1 :29510", "ftp://host:1", "host:0",
     "host:99999", "http://host:1/path"],
)  # fmt: skip
def test_a_malformed_lighthouse_address_is_refused_before_anything_waits(address, monkeypatch):
    expected = "lighthouse: expected the lighthouse's address as host:port or http://host:port"
    with pytest.raises(ValueError, match="^" + re.escape(expected)):
        lighthouse_address(address)
    monkeypatch.setenv("TORCHFT_LIGHTHOUSE", address)
    with pytest.raises(ValueError, match=r"^TORCHFT_LIGHTHOUSE: expected"):
        lighthouse_address(None)
    assert main(["check", "--nproc", "1", "--lighthouse", address]) == 2


def test_a_lighthouse_that_cannot_be_reached_is_said_at_once():
    assert "has no address" in _check_reachable("http://no-such-host.invalid:29510", 5.0)
    with socket.socket() as closed:  # bound, not listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        assert "nothing answers at 127.0.0.1:" in _check_reachable(f"http://127.0.0.1:{port}", 0.2)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert _check_reachable(f"http://127.0.0.1:{listening.getsockname()[1]}", 0.2) == ""


def test_the_group_number_comes_from_the_argument_or_the_variable(monkeypatch):
    monkeypatch.setenv("GANGMESH_REPLICA_GROUP", "3")
    assert _group_number(None) == 3
    assert _group_number(1) == 1
    with pytest.raises(ValueError, match=r"^group: expected an int >= 0, got -1"):
        _group_number(-1)
    monkeypatch.setenv("GANGMESH_REPLICA_GROUP", "one")
    with pytest.raises(ValueError, match=r"GANGMESH_REPLICA_GROUP set, got 'one'"):
        _group_number(None)


def test_start_lighthouse_refuses_a_count_below_one_before_starting():
    with pytest.raises(ValueError, match=r"^min_replicas: expected an int >= 1, got 0"):
        gm.start_lighthouse(0)
    with pytest.raises(ValueError, match=r"^heartbeat_timeout: expected a positive"):
        gm.start_lighthouse(1, heartbeat_timeout=timedelta(0))


def test_a_lighthouse_started_here_listens_and_stops():
    with gm.start_lighthouse(heartbeat_timeout=timedelta(seconds=1)) as lighthouse:
        assert lighthouse.address.startswith("http://127.0.0.1:")
        assert lighthouse.process.poll() is None
    assert lighthouse.process.poll() is not None
