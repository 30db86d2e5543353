"""A bridge's meeting is bounded where the store it meets in stops answering; a closed bridge
refuses its collectives as the caller's mistake."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gangmesh.runtime.bridge_gang import BridgeGang
from gangmesh.runtime.gang import GangError

SERVER = """
import time, torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
print(store.port, flush=True)
time.sleep(120)
"""
MEMBER = """
import sys, time, torch, torch.distributed as dist
from datetime import timedelta
from gangmesh.runtime.bridge_gang import BridgeGang
from gangmesh.runtime.gang import GangError
client = dist.TCPStore("127.0.0.1", int(sys.argv[1]), is_master=False, timeout=timedelta(seconds=1))
print("connected", flush=True)
sys.stdin.readline()  # the server is stopped now
try:
    BridgeGang(dist.PrefixStore("bridge/", client), 0, 2, torch.device("cpu"), timedelta(seconds=1),
               name="bridge", members=(("a", 0), ("b", 0)), blame=lambda what, ex: GangError(what))
except GangError as error:
    print(error, flush=True)
"""


def test_a_bridge_whose_store_server_is_stopped_fails_within_its_timeout_and_a_margin():
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    member = None
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        member = subprocess.Popen(
            [sys.executable, "-c", MEMBER, port],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert member.stdout is not None and member.stdin is not None
        assert member.stdout.readline() == "connected\n"
        server.send_signal(signal.SIGSTOP)  # holds its connections, answers nothing
        said, _ = member.communicate("go\n", timeout=60)  # without the bound: held for good
        assert said.startswith("creating bridge 'bridge'"), said
        assert "its store did not answer within 6 s (the join server stopped?)" in said, said
    finally:
        for process in (member, server):
            if process is not None:
                process.send_signal(signal.SIGCONT)
                process.kill()
                process.wait(30)


def test_a_closed_bridge_refuses_a_collective_without_blaming_anyone():
    blamed: list[str] = []

    def blame(what: str, cause: BaseException) -> GangError:
        blamed.append(what)
        return GangError(what)

    store = dist.HashStore()
    bridge = BridgeGang(store, 0, 1, torch.device("cpu"), timedelta(seconds=5), name="b",
                        members=(("a", 0),), blame=blame)  # fmt: skip
    data = torch.ones(2)
    bridge.broadcast(data, 0)
    bridge.close()
    with pytest.raises(
        GangError, match=r"^broadcast\(source_rank=0\): bridge 'b' \(size 1, rank 0\) is closed$"
    ):
        bridge.broadcast(data, 0)
    assert blamed == []
