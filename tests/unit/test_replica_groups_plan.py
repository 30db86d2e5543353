"""Replica groups without processes: gangmesh plan --replica-groups, and the arguments that
join_replicas and start_lighthouse refuse before anything starts."""

from __future__ import annotations

import http.server
import json
import re
import socket
import threading
from datetime import timedelta

import pytest

import gangmesh as gm
from gangmesh.assembly.lighthouse_contact import Answer, ask_lighthouse, lighthouse_address
from gangmesh.assembly.replicas import _group_number
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
    ["http//127.0.0.1:29510", "127.0.0.1", "127.0.0.1 :29510", "ftp://host:1", "host:",
     "http://host:1/path", "host:port"],
)  # fmt: skip
def test_a_malformed_lighthouse_address_is_refused_before_anything_waits(address, monkeypatch):
    expected = "lighthouse: expected the lighthouse's address as host:port or http://host:port"
    with pytest.raises(ValueError, match="^" + re.escape(expected)):
        lighthouse_address(address)
    monkeypatch.setenv("TORCHFT_LIGHTHOUSE", address)
    with pytest.raises(ValueError, match=r"^TORCHFT_LIGHTHOUSE: expected"):
        lighthouse_address(None)
    assert main(["check", "--nproc", "1", "--lighthouse", address]) == 2


@pytest.mark.parametrize("port", ["0", "99999", "65536"])
def test_a_port_out_of_range_is_named_as_such(port, capsys):
    expected = f"lighthouse: expected a port in 1..65535, got {port} in 'localhost:{port}'"
    with pytest.raises(ValueError, match="^" + re.escape(expected) + "$"):
        lighthouse_address(f"localhost:{port}")
    assert main(["check", "--nproc", "1", "--lighthouse", f"localhost:{port}"]) == 2
    assert capsys.readouterr().err == f"gangmesh check: error: --{expected}\n"


def test_a_lighthouse_that_cannot_be_reached_is_said_at_once():
    assert "has no address" in ask_lighthouse("http://no-such-host.invalid:29510", 5.0).trouble
    with socket.socket() as closed:  # bound, not listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        refused = ask_lighthouse(f"http://127.0.0.1:{port}", 0.2)
        assert refused.trouble.startswith(f"nothing answers at 127.0.0.1:{port}")
        assert refused.via == ""


def test_a_server_that_takes_the_connection_and_never_answers_is_no_lighthouse():
    with socket.socket() as silent:  # the kernel takes connections for it; nothing answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        asked = ask_lighthouse(f"http://127.0.0.1:{silent.getsockname()[1]}", 0.5)
    assert asked.trouble == "it took the connection but did not answer within 0.5 s"
    assert asked.via == "127.0.0.1"


def test_another_server_that_answers_is_no_lighthouse():
    with http.server.HTTPServer(("127.0.0.1", 0), _NotFound) as other:
        serving = threading.Thread(target=other.serve_forever)
        serving.start()
        try:
            asked = ask_lighthouse(f"http://127.0.0.1:{other.server_address[1]}", 5.0)
        finally:
            other.shutdown()
            serving.join()
    assert asked.trouble == (
        "something answers there, but not as torchft's lighthouse (HTTP 404 Not Found to GET "
        "/status)"
    )


class _NotFound(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_error(404)

    def log_message(self, *args: object) -> None:
        """Quiet."""


def test_torchft_s_lighthouse_answers_and_shows_the_interface_it_was_asked_from():
    pytest.importorskip("torchft")
    with gm.start_lighthouse(heartbeat_timeout=timedelta(seconds=1)) as lighthouse:
        assert ask_lighthouse(lighthouse.address, 5.0) == Answer("", "127.0.0.1")
        assert lighthouse.log_path.exists()
    assert lighthouse.process.returncode is not None and not lighthouse.log_path.exists()


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
