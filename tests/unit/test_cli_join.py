"""gangmesh plan --job: two jobs launched apart and the routes of a push between them; and
gangmesh join-server: it serves until stopped, and refuses a bad address in one line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import timedelta

import pytest
import torch.distributed as dist

from gangmesh.tools.cli import main

JOBS = ["--job", "trainer=2:dp_shard=2", "--job", "generator=4:dp_replicate=2,tp=2"]


def test_each_sender_sends_its_rows_to_the_ranks_that_hold_them(capsys):
    assert main(["plan", *JOBS, "--push", "8x4:float32"]) == 0
    out = capsys.readouterr().out
    assert "job trainer: 2 ranks, numbered from 0" in out and "job generator: 4 ranks" in out
    assert "  trainer rank 0 (dp_shard 0) -> generator ranks 0, 2: rows 0-3, 64 B" in out
    assert "  trainer rank 1 (dp_shard 1) -> generator ranks 1, 3: rows 4-7, 64 B" in out
    assert out.endswith(
        "2 senders, each its own shard: the busiest sends 64 B of 128 B; no rank gathers\n"
    )


def test_the_json_lists_each_route_and_the_svg_draws_a_line_per_receiver(capsys):
    assert main(["plan", *JOBS, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [job["name"] for job in document["jobs"]] == ["trainer", "generator"]
    routes = document["push"]["routes"]
    assert [(r["sender"], r["receivers"]) for r in routes] == [(0, [0, 2]), (1, [1, 3])]
    assert routes[1]["pieces"] == [{"start": [2048, 0], "size": [2048, 4096]}]
    assert main(["plan", *JOBS, "--format", "svg"]) == 0
    picture = capsys.readouterr().out
    assert picture.count('data-route="') == 4 and 'data-job="generator"' in picture


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--job", "trainer=2"],
            "--job: expected two jobs (the first pushes to the second), got 1",
        ),
        ([*JOBS, "--push", "8x:float32"], "--push: expected ROWSxCOLS[:DTYPE] with positive ROWS"),
        ([*JOBS, "--push", "8x4:float31"], "--push: expected a DTYPE of float64, float32"),
        ([*JOBS, "--world-size", "6"], "--job: not with --part or --world-size"),
        ([*JOBS, "--tp", "2"], "--tp: not with --job, which plans each job from its spec"),
        ([*JOBS, "--rank", "1"], "--rank: not with --job"),
        ([*JOBS, "--ranks-per-node", "2"], "--ranks-per-node: not with --job"),
        ([*JOBS, "--replica-groups", "2"], "--replica-groups: not with --job"),
        (["--job", "a=2", "--job", "a=2"], "--job a=2: job a is named twice"),
        (
            ["--job", "a=3:tp=2", "--job", "b=2"],
            "--job a=3:tp=2: tp: tp=2 does not divide the job size 3",
        ),
        (
            ["--job", "tp=2", "--job", "b=2"],
            "--job tp=2: part name 'tp' is the name of a dimension",
        ),
    ],
)
def test_bad_jobs_are_one_line_errors_with_status_2(capsys, args, words):
    assert main(["plan", *args]) == 2
    assert words in capsys.readouterr().err


def test_the_join_server_serves_until_sigterm():
    server = subprocess.Popen(
        [sys.executable, "-m", "gangmesh", "join-server", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("serving a join store at 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))
        client.set("k", "v")
        assert client.get("k") == b"v"
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--port", "70000"], "--port: expected a port in [0, 65536), got 70000"),
        (["--host", "192.0.2.1"], "--host: expected an address of this host to listen at"),
    ],
)
def test_the_join_server_refuses_a_bad_address_in_one_line(capsys, args, words):
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert main(["join-server", *args]) == 2
    assert words in capsys.readouterr().err
    # the caller's signals as they were: a blocked SIGTERM would pass to every child it starts
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
