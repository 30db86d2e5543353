"""A meeting's store calls end where the store's server is stopped: torch's client alone would
wait for its answer without end, whatever timeout it was given."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from gangmesh.assembly.store_calls import BoundedStore, given_up, margin, peek

EXTRA = margin(timedelta(seconds=10))

SERVER = (
    "import sys, torch.distributed as d; "
    "s = d.TCPStore('127.0.0.1', 0, 1, True, wait_for_workers=False, multi_tenant=True); "
    "print(s.port, flush=True); sys.stdin.read()"
)


@pytest.fixture
def stopped_server():
    """The port of a store server whose process is stopped once a client has connected."""
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert server.stdout is not None
        yield server, int(server.stdout.readline())
    finally:
        server.kill()
        server.wait()


def test_a_call_to_a_stopped_server_is_given_up_on_and_later_calls_raise_at_once(stopped_server):
    server, port = stopped_server
    client = dist.TCPStore("127.0.0.1", port, 1, False, timeout=timedelta(seconds=1))
    store = BoundedStore(dist.PrefixStore("meet/", client), EXTRA)
    store.set("a", "1")
    assert store.get("a") == b"1"  # answered while the server runs
    server.send_signal(signal.SIGSTOP)
    raised: list[BaseException] = []

    def wait() -> None:
        try:
            store.wait(["never"], timedelta(seconds=0.5))
        except RuntimeError as ex:
            raised.append(ex)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(60)  # without the bound it would never end: the test fails, it does not hang
    assert [str(e) for e in raised] == [f"the job's store did not answer within {0.5 + EXTRA:g} s"]
    # the connection is held by the call given up on: another store over it fails at once,
    # and the job's next setup takes a new connection
    with pytest.raises(RuntimeError, match="did not answer an earlier call"):
        BoundedStore(client, EXTRA).add("b", 1)
    assert given_up(client) and given_up(dist.PrefixStore("other/", client))


def test_what_the_store_raises_reaches_the_caller():
    store = BoundedStore(dist.HashStore(), EXTRA)
    store.set("a", "1")
    assert store.add("n", 2) == 2
    with pytest.raises(RuntimeError):
        store.wait(["never"], timedelta(seconds=0.1))


def test_the_calls_of_one_connection_are_made_by_one_thread():
    store = dist.HashStore()
    before = {t for t in threading.enumerate() if t.name == "gangmesh-store-calls"}
    for key in range(20):
        BoundedStore(dist.PrefixStore(f"meet{key}/", store), EXTRA).add("n", 1)
    made = {t for t in threading.enumerate() if t.name == "gangmesh-store-calls"} - before
    assert len(made) == 1


def test_the_margin_of_a_store_call_grows_with_the_job_s_timeout():
    assert margin(timedelta(seconds=10)) == 2.0
    assert margin(timedelta(seconds=200)) == 10.0
    assert margin(timedelta(minutes=15)) == 30.0


def test_a_peek_neither_waits_for_an_absent_key_nor_sets_it():
    # a TCPStore whose get would wait a minute for a key another process deleted
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(minutes=1))
    store = BoundedStore(server, EXTRA)
    assert peek(store, "gone") is None
    assert not server.check(["gone"]) and server.num_keys() == 0
    store.set("here", "value")
    assert peek(store, "here") == "value"
    store.set("empty", "")
    assert peek(store, "empty") == ""
    store.delete_key("here")
    assert peek(store, "here") is None and not given_up(server)
