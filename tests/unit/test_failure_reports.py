"""The job's failure reports: what an earlier attempt left is passed over, and a store that
does not answer costs a survivor a few seconds, not its error."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
import torch.distributed as dist

from gangmesh.runtime.faults import failure_reports, peer_state, report_reading, store_line
from gangmesh.runtime.faults.culprits import Call, Culprit
from gangmesh.runtime.faults.report_channel import Channel
from gangmesh.runtime.faults.report_reading import Reading
from gangmesh.runtime.faults.store_line import line_to


@pytest.fixture(autouse=True)
def no_line_left():
    """Each test's store connections end with it."""
    yield
    failure_reports.shut_down()


def served_store() -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False, multi_tenant=True)


def report_entry(rank: int, what: str, seconds: float) -> str:
    entry = {"rank": rank, "host": "h1", "pid": 4242, "what": what, "seconds": seconds}
    return json.dumps(entry) + "\n"


def test_a_report_of_an_earlier_attempt_is_passed_over_and_one_of_this_attempt_named():
    server = served_store()
    line = line_to("127.0.0.1", server.port, timedelta(seconds=30), "gangmesh/failures")
    channel = Channel(line, 0, 2)
    # A rank of an earlier attempt (before this process started) reported itself.
    server.append("gangmesh/failures/reports", report_entry(1, "raised OldError: gone", 1.0))
    found = channel.explain([0, 1], 0, timedelta(seconds=0.2))
    assert found.culprits == ()
    assert found.absent == (1,) and found.absent_global == (1,)
    # Rank 1 of this attempt reports itself: it is named, with what it raised.
    server.append(
        "gangmesh/failures/reports", report_entry(1, "raised ValueError: nan", time.time())
    )
    found = channel.explain([0, 1], 0, timedelta(seconds=0.2))
    assert [str(c) for c in found.culprits] == [
        "global rank 1 on host h1 (pid 4242) raised ValueError: nan"
    ]


def test_the_absent_ranks_host_is_named_and_called_silent_when_none_of_its_ranks_answers():
    server = served_store()
    line = line_to("127.0.0.1", server.port, timedelta(seconds=30), "gangmesh/failures")
    channel = Channel(line, 0, 4)
    store = dist.PrefixStore("gangmesh/failures", server)
    now = time.time()
    for rank, host in enumerate([channel.host, channel.host, "far", "far"]):
        record = {"rank": rank, "pid": 1, "seconds": now}
        report_reading.register(store, rank, host, record)
    report_reading.count_in(store, report_reading.gang_of([0, 1, 2, 3]), "failed", 1)  # rank 1 too
    found = channel.explain([0, 1, 2, 3], 0, timedelta(seconds=0.2))
    assert found.absent == (2, 3) and found.absent_hosts == ("far",)
    assert str(found).endswith(
        "on far did not take part and have not said why; host far is unreachable or down: "
        "none of its ranks in the gang answers"
    )


def test_a_store_that_does_not_answer_leaves_the_survivor_its_plain_error():
    # A port that takes connections and never answers: the store's host is cut off.
    mute = socket.create_server(("127.0.0.1", 0))
    try:
        port = mute.getsockname()[1]
        failure_reports.open_channel(object(), ("127.0.0.1", port), 0, 2, timedelta(seconds=1))
        assert failure_reports.channel() is not None
        assert failure_reports.explain([0, 1], 0, timedelta(seconds=0.5), time.time()) is None
    finally:
        mute.close()
        # torch logs the client's timeout: let it happen inside the test, whose output
        # is shown only if it fails
        store_line.end_all(30)


def test_a_stopped_culprit_killed_by_a_survivor_is_named_as_that_survivor_saw_it():
    # Rank 1 (a real process on this host) was stopped; survivor rank 2 named it so, then
    # killed it on its way out, as under torchrun. Rank 0's gang is {0, 1}: rank 2 is no peer
    # of it, and /proc shows a process killed by SIGKILL. Rank 0 names what rank 2 saw first.
    server = served_store()
    line = line_to("127.0.0.1", server.port, timedelta(seconds=30), "gangmesh/failures")
    channel = Channel(line, 0, 3)
    victim = subprocess.Popen(["sleep", "60"])
    try:
        now = time.time()
        host = f"gangmesh/failures/host/{channel.host}"
        started = peer_state.start_time(victim.pid)
        for rank, pid in ((1, victim.pid), (2, os.getpid())):
            record = {"rank": rank, "pid": pid, "started": started, "seconds": now}
            server.append(host, json.dumps(record) + "\n")
        stopped = Culprit(1, channel.host, victim.pid, peer_state.STOPPED, now)
        store = dist.PrefixStore("gangmesh/failures", server)
        report_reading.set_state(store, 2, {"failed": now})
        named = {"seconds": now, "by": 2, "found": [json.dumps(dataclasses.asdict(stopped))]}
        report_reading.append_line(store, "named", named)
        os.kill(victim.pid, signal.SIGKILL)
        os.waitid(os.P_PID, victim.pid, os.WEXITED | os.WNOWAIT)  # ended, left a zombie
        assert peer_state.fate(victim.pid, started) == "was killed by SIGKILL"
        found = channel.explain([0, 1], 0, timedelta(seconds=0.2))
        assert found.culprits == (stopped,)
    finally:
        victim.kill()
        victim.wait()


def in_function(thread: threading.Thread, name: str) -> bool:
    """Whether ``thread`` is running, somewhere inside a function called ``name``."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None and frame.f_code.co_name != name:
        frame = frame.f_back
    return frame is not None


def test_rank_0_whose_store_closed_before_proc_shows_it_ended_is_still_named():
    # Rank 0 serves the store and exits: its sockets close before /proc shows it ended, so a
    # survivor whose store calls fail may find it still running. It looks again until it ends.
    server = served_store()
    rank_0 = subprocess.Popen(["sh", "-c", "read line; exit 3"], stdin=subprocess.PIPE)
    try:
        started = peer_state.start_time(rank_0.pid)
        record = {"pid": rank_0.pid, "started": started, "seconds": time.time()}
        server.set("gangmesh/failures/rank/0", json.dumps({**record, "host": socket.gethostname()}))
        line = line_to("127.0.0.1", server.port, timedelta(seconds=30), "gangmesh/failures")
        channel = Channel(line, 1, 2)
        channel.fates([0], 5)  # the line's calls run in order: rank 0's record is known now
        found: list[object] = []
        survivor = threading.Thread(target=lambda: found.append(channel.without_store(30)))
        survivor.start()
        while survivor.is_alive() and not in_function(survivor, "without_store"):
            time.sleep(0.01)
        assert survivor.is_alive(), f"gave up on a rank 0 that still ran: {found}"
        assert rank_0.stdin is not None
        rank_0.stdin.close()  # rank 0 ends, a zombie until reaped: /proc tells how
        survivor.join(30)
        assert [str(c) for c in found[0].culprits] == [  # type: ignore[attr-defined]
            f"global rank 0 on host {channel.host} (pid {rank_0.pid}) exited with code 3"
        ]
    finally:
        rank_0.kill()
        rank_0.wait()


def set_call(server: dist.TCPStore, rank: int, call: Call) -> None:
    store = dist.PrefixStore("gangmesh/failures", server)
    report_reading.set_state(store, rank, {"failed": time.time(), "call": dataclasses.asdict(call)})


def reading(server: dist.TCPStore, rank: int) -> Reading:
    store = dist.PrefixStore("gangmesh/failures", server)
    return Reading(store, rank, "h1", time.time() - 60)


TP01, TP23 = ("tp", (0, 1)), ("tp", (2, 3))
DP02, DP13 = ("dp", (0, 2)), ("dp", (1, 3))


def call(gang: tuple[str, tuple[int, ...]], op: str = "all_reduce(SUM)", number: int = 4) -> Call:
    return Call(gang[0], gang[1], number, op, (8,), "torch.float32")


def test_another_call_of_the_same_gang_is_a_mismatch_whatever_the_others_do():
    server = served_store()
    set_call(server, 3, call(TP23, "broadcast(source_rank=0)"))
    found = reading(server, 2).mismatched(2, call(TP23))
    assert found == (((3, call(TP23, "broadcast(source_rank=0)")),), (3,))
    set_call(server, 3, call(TP23, number=5))  # one call ahead on the gang
    assert reading(server, 2).mismatched(2, call(TP23)) == (((3, call(TP23, number=5)),), (3,))


def test_waits_in_other_gangs_are_a_mismatch_only_where_they_come_back_in_a_cycle():
    server = served_store()
    # rank 0 waits in tp for rank 1, which waits in dp for rank 3, which waits in tp ...
    set_call(server, 1, call(DP13))
    set_call(server, 3, call(TP23))
    assert reading(server, 0).mismatched(0, call(TP01)) is None  # rank 2 has not said yet
    set_call(server, 2, call(DP02))  # every rank waits for one: nobody is singled out
    assert reading(server, 0).mismatched(0, call(TP01)) == (((1, call(DP13)),), ())


def test_a_wait_that_leads_to_a_rank_in_no_collective_is_no_mismatch():
    # rank 0 waits in dp for rank 2, which waits in tp for rank 3, which entered nothing
    # (it hangs): rank 3 is to be named as not taking part, not rank 2 as mismatched
    server = served_store()
    set_call(server, 2, call(TP23))
    assert reading(server, 0).mismatched(0, call(DP02)) is None


def test_a_wait_behind_a_blocked_rank_follows_the_chain_to_the_calls_that_differ():
    # rank 0 waits in dp for rank 2, which waits in tp for rank 3's odd broadcast: rank 0
    # names the two calls of tp that differ, not rank 2 alone
    server = served_store()
    set_call(server, 2, call(TP23))
    set_call(server, 3, call(TP23, "broadcast(source_rank=0)"))
    found = reading(server, 0).mismatched(0, call(DP02))
    assert found == (((2, call(TP23)), (3, call(TP23, "broadcast(source_rank=0)"))), (2, 3))


WORLD = ("dp", (0, 1, 2, 3))


def test_a_call_of_its_own_on_a_gang_nobody_else_is_in_is_named_by_every_rank_behind_it():
    # FSDP2's HSDP 2 x 2: rank 1 makes an all-reduce of its own on the whole dp gang; rank 0
    # waits in dp_shard for rank 1, rank 2 in dp_replicate for rank 0, rank 3 in dp_replicate
    # for rank 1. Rank 1 waits for every member: it is the one named, also by rank 2
    server = served_store()
    shard01, replicate02, replicate13 = ("dp_shard", (0, 1)), ("dp_replicate", (0, 2)), (
        "dp_replicate", (1, 3))  # fmt: skip
    set_call(server, 0, call(shard01, "all_gather_single", 21))
    set_call(server, 1, call(WORLD, number=1))
    set_call(server, 3, call(replicate13, "all_reduce", 7))
    found = reading(server, 2).mismatched(2, call(replicate02, "all_reduce", 7))
    assert found == (((1, call(WORLD, number=1)),), (1,))
    # rank 1 itself learns that it is the one: alone in its call, beside the members it waits for
    set_call(server, 2, call(replicate02, "all_reduce", 7))
    pairs, root = reading(server, 1).mismatched(1, call(WORLD, number=1))
    assert root == (1,) and [rank for rank, _ in pairs] == [1, 0, 2, 3]


def test_a_survivor_s_error_file_starts_and_ends_with_the_gang_error_that_names_the_culprit():
    # torchrun's summary shows the first lines of each error file's traceback
    from gangmesh.runtime.faults.last_words import _callstack
    from gangmesh.runtime.gang import GangError

    try:
        raise RuntimeError("[gloo/pair.cc:553] Connection closed by peer [127.0.0.1]:4")
    except RuntimeError as ex:
        torch_s = ex
    named = GangError("all_reduce failed on process group 'tp': global rank 3 ... was killed")
    said = _callstack(torch_s, torch_s.__traceback__, named)  # torch's error went uncaught
    assert said.startswith(f"GangError: {named}\n"), said
    assert said.rstrip().endswith(f"GangError: {named}"), said
    assert "Connection closed by peer" in said  # torch's text stays, in between
