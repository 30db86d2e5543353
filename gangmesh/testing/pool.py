"""Long-lived gloo worlds, one per shape, that run the ``gangmesh_world`` tests one after another.

Starting a world costs n forks of a warm interpreter and a pytest session per rank that
collects the tests of that shape; a pooled world pays it once and then runs each test
for the price of its own work. Each rank is a ``python -m pytest`` process
(:class:`gangmesh.testing.rank.PooledRank`) in a session of its own that connects to the
world's control socket and runs the tests it is sent, each with a process group of its
own (a new store, a new port). After a test, every rank shuts torch.distributed down and
says what the test left behind (:func:`gangmesh.testing.rank.left_behind`). A world runs the
next test only if every rank finished the last one and is clean; otherwise it is killed,
with everything its ranks started, and the next test of that shape gets a new world. So
a test that leaves a group behind, kills a rank or hangs a collective never reaches the
next test. A world whose processes are spread over several hosts runs on a
:class:`~gangmesh.testing.hostbed.HostBed` of its own, made with the world and removed
with it; each rank is forked straight into its host's namespaces, and after each test
every host is on the link again. Imports neither torch nor the rest of gangmesh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import queue
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gangmesh.testing.forkserver import ForkServer, Job
from gangmesh.testing.hostbed import HOSTS_VARIABLE, HostBed
from gangmesh.testing.outcome import Outcome, RankEnd, outcome_of
from gangmesh.testing.shape import WorldShape
from gangmesh.testing.world import (
    FAILURE_GRACE,
    POOL_VARIABLE,
    World,
    clean_environment,
    free_port,
    kill_session,
    pytest_command,
    rank_environment,
    target_of,
)

__all__ = ["WorldPool"]

log = logging.getLogger("gangmesh")

_HOST_PORTS = (20000, 30000)
"""Ports of host 0 that the tests of a world on hosts take in turn, for their store."""

_CLOSE_WAIT = 30.0
"""Seconds the ranks of a retired world get to end their pytest sessions before they are killed."""


@dataclass
class _Member:
    """One rank process of a pooled world."""

    rank: int
    pid: int
    log: Path  # its output outside the tests (start, collection, end)
    connection: socket.socket | None = None  # its control connection, once it is ready
    stream: io.BufferedIOBase | None = None  # the same, as the test loop writes to it
    code: int | None = None  # its exit code, once it has exited


@dataclass
class _Event:
    kind: str  # ready, reply, exited
    rank: int
    payload: Any = None


@dataclass
class _PooledWorld:
    """The ranks of one world shape, their control socket and what they report."""

    shape: WorldShape
    server: ForkServer
    folder: Path
    listener: socket.socket
    members: dict[int, _Member] = field(default_factory=dict)
    events: queue.Queue[_Event] = field(default_factory=queue.Queue)
    tests: int = 0
    reusable: bool = True
    bed: HostBed | None = None  # the hosts the ranks run on, for a world of several

    @property
    def size(self) -> int:
        return self.shape.size


class WorldPool:
    """Worlds of forked pytest ranks, one per shape, each running test after test.

    :param config: the session whose tests the worlds run.
    :param server: returns the fork server the ranks are forked from (started or
        replaced as needed).
    :param targets: per world shape, the tests of that shape (as :func:`target_of` names
        them): what a new world's ranks collect.
    """

    def __init__(
        self,
        config: pytest.Config,
        server: Callable[[], ForkServer],
        targets: dict[WorldShape, list[str]],
    ) -> None:
        self._config = config
        self._server = server
        self._targets = targets
        self._worlds: dict[WorldShape, _PooledWorld] = {}

    def run(self, function: pytest.Function, shape: WorldShape, timeout: float) -> list[Outcome]:
        """Run ``function`` in every rank of the world of ``shape`` within ``timeout``
        (a new world's start included); how each rank ended.

        :raises gangmesh.testing.netns.NamespaceError: the hosts of a new world could not
            be made.
        """
        deadline = time.monotonic() + timeout
        world = self._worlds.pop(shape, None)
        if world is None:
            world = self._start(shape, target_of(function))
        try:
            outcomes = _run(world, function, timeout, deadline)
            if world.bed is not None and world.reusable:
                world.bed.heal()  # a host the test cut joins the link again
        except BaseException:
            world.reusable = False
            raise
        finally:
            if world.reusable:
                self._worlds[shape] = world
            else:
                _close(world)
        return outcomes

    def close(self) -> None:
        """End every world: its ranks finish their sessions, then their sessions are killed."""
        worlds, self._worlds = list(self._worlds.values()), {}
        for world in worlds:
            _close(world)

    def _start(self, shape: WorldShape, target: str) -> _PooledWorld:
        folder = Path(tempfile.mkdtemp(prefix="gangmesh-pool-"))
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(folder / "control"))
        listener.listen(shape.size)
        world = _PooledWorld(shape, self._server(), folder, listener)
        if shape.hosts > 1:
            try:
                world.bed = HostBed(shape.hosts)
            except BaseException:
                _close(world)
                raise
        targets = self._targets.get(shape) or [target]
        if target not in targets:
            targets = [*targets, target]
        threading.Thread(target=_accept, args=(world,), daemon=True).start()
        for rank in range(shape.size):
            env = clean_environment(hosts=world.bed is not None)
            env[POOL_VARIABLE] = json.dumps({"control": str(folder / "control"), "rank": rank})
            enter: list[str] = []
            if world.bed is not None:
                host = world.bed.hosts[shape.host_of(rank)]
                env[HOSTS_VARIABLE] = host.to_env()
                enter = host.namespaces()
            command = pytest_command(self._config, targets, folder / f"rank{rank}-tmp")
            log = folder / f"rank{rank}.log"
            job = Job(
                target="pytest",
                module=True,
                argv=command[3:],
                env=env,
                cwd=str(self._config.rootpath),
                output=str(log),
                enter=enter,
            )
            member = _Member(rank, world.server.spawn(job), log)
            world.members[rank] = member
            threading.Thread(target=_await_exit, args=(world, member), daemon=True).start()
        return world


def _run(
    world: _PooledWorld, function: pytest.Function, timeout: float, deadline: float
) -> list[Outcome]:
    """Send the test to every rank (to those of a new world as each becomes ready), then
    wait for their replies; the ranks that do not reply in time are killed."""
    test = world.folder / f"test{world.tests}"
    test.mkdir()
    world.tests += 1
    if world.bed is None:
        port = free_port()
        master = ""
    else:  # the bed's hosts are this world's alone: any port of host 0 is free
        port = _HOST_PORTS[0] + world.tests % (_HOST_PORTS[1] - _HOST_PORTS[0])
        master = world.bed.hosts[0].address
    ends = {
        rank: RankEnd(
            rank, test / f"rank{rank}.log", test / f"rank{rank}.json", test / f"rank{rank}.stacks"
        )
        for rank in range(world.size)
    }

    def send(member: _Member) -> None:
        assert member.stream is not None
        end = ends[member.rank]
        place = World(
            nodeid=function.nodeid,
            rank=member.rank,
            size=world.size,
            timeout=timeout,
            deadline=deadline,
            store=str(test / "store"),
            result=str(end.result),
            stacks=str(end.stacks),
            init_method=f"tcp://{master}:{port}" if master else "",
        )
        env = (
            world.shape.environment(member.rank, master, port)
            if master
            else rank_environment(member.rank, world.size, port, world.shape.device)
        )
        command = {"world": dataclasses.asdict(place), "env": env, "log": str(end.log)}
        member.stream.write(json.dumps(command).encode() + b"\n")
        member.stream.flush()

    sent = {rank for rank, member in world.members.items() if member.stream is not None}
    for rank in sent:
        send(world.members[rank])
    finished: set[int] = set()
    why = f"did not finish within {timeout:g} s"
    first_failure: int | None = None
    while len(finished) < world.size:
        try:
            event = world.events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        member = world.members[event.rank]
        if event.kind == "ready":
            member.connection, member.stream = event.payload
            send(member)
            sent.add(member.rank)
            continue
        if event.rank in finished:  # the exit of a rank that replied
            world.reusable = False
            continue
        finished.add(event.rank)
        if event.kind == "reply":
            ends[event.rank].code = 0
            if event.payload["left"]:
                world.reusable = False
                log.debug("%s: rank %d left %s", function.nodeid, event.rank, event.payload["left"])
            failed = bool(event.payload["failed"])
        else:  # exited
            world.reusable = False
            ends[event.rank].code = member.code
            if event.rank not in sent:  # it never got the test: its start's output says why
                ends[event.rank].log = member.log
            failed = True
        if failed and first_failure is None:
            first_failure = event.rank
            if time.monotonic() + FAILURE_GRACE < deadline:
                deadline = time.monotonic() + FAILURE_GRACE
                why = f"did not finish within {FAILURE_GRACE:g} s after rank {event.rank} failed"
    for rank, member in world.members.items():
        if rank not in finished:
            world.reusable = False
            ends[rank].killed_after = why
            if rank not in sent:
                ends[rank].log = member.log
            kill_session(member.pid)
    return [outcome_of(ends[rank], world.size) for rank in range(world.size)]


def _accept(world: _PooledWorld) -> None:
    """Take each rank's connection; its first line names it, later lines are its replies."""
    for _ in range(world.size):
        try:
            connection, _ = world.listener.accept()
        except OSError:  # the world was closed
            return
        threading.Thread(target=_listen, args=(world, connection), daemon=True).start()


def _listen(world: _PooledWorld, connection: socket.socket) -> None:
    stream = connection.makefile("rwb")
    with contextlib.suppress(OSError, ValueError):
        rank = int(json.loads(stream.readline())["ready"])  # maybe before its spawn returned
        world.events.put(_Event("ready", rank, (connection, stream)))
        for line in stream:
            world.events.put(_Event("reply", rank, json.loads(line)))


def _await_exit(world: _PooledWorld, member: _Member) -> None:
    code = world.server.wait(member.pid)
    member.code = code
    world.events.put(_Event("exited", member.rank, code))


def _close(world: _PooledWorld) -> None:
    """End a world: a reusable one's ranks end their sessions (they see their control
    connection close); then every rank's session is killed and the rank reaped."""
    with contextlib.suppress(OSError):
        world.listener.close()
    for member in world.members.values():
        if member.connection is not None:  # the rank reads the end of its tests
            with contextlib.suppress(OSError):
                member.connection.shutdown(socket.SHUT_RDWR)
    if world.reusable:
        until = time.monotonic() + _CLOSE_WAIT
        for member in world.members.values():
            world.server.wait(member.pid, max(0.0, until - time.monotonic()))
    for member in world.members.values():
        kill_session(member.pid)
    for member in world.members.values():
        world.server.reap(member.pid)
    if world.bed is not None:
        world.bed.close()
    with contextlib.suppress(OSError):
        for path in sorted(world.folder.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        world.folder.rmdir()
