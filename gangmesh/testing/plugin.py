"""pytest plugin: simulated gangs, and tests that run in every process of a real gloo world.

pytest loads it whenever gangmesh is installed (entry point ``gangmesh`` in the
``pytest11`` group); no conftest is needed, and ``-p no:gangmesh`` turns it off.
Loading it imports neither torch nor the rest of gangmesh: that happens in the
tests that use it.

The ``simulated_gangs`` fixture builds the gangs of one rank of a large world through
the real ``create_gangs`` path, on torch's fake process group, and tears them down
after the test::

    def test_tp_rank(simulated_gangs):
        gangs = simulated_gangs(65536, 65535, pp=8, tp=8)
        assert (gangs.tp.rank, gangs.pp.rank) == (7, 7)

One process holds one simulated rank at a time: calling the factory again closes the
gangs of the previous call (using them afterwards fails) and builds the new ones, so a
test may visit several ranks in a loop. After the test, torch.distributed is shut down.

The marker ``@pytest.mark.gangmesh_world(n, timeout=120)`` runs the test once in each
of ``n`` local processes that form a real gloo world on 127.0.0.1; the fixture
``root_gang`` is the root gang of that world, a :class:`~gangmesh.ProcessGroupGang` on
gloo (also in a world of one), closed after the test::

    import torch
    import gangmesh as gm

    @pytest.mark.gangmesh_world(4)
    def test_all_reduce(root_gang):
        tensor = torch.tensor(float(root_gang.rank))
        root_gang.all_reduce(tensor, gm.ReduceOperation.SUM)
        assert tensor.item() == 6.0

The test is reported once. It passes when every rank passes and is skipped when every
rank skips it. Otherwise it fails with one line for each rank that did not pass, the
first failure first, such as ``rank 2 of 4: AssertionError: ...``, then a line for the
ranks that passed, then the traceback and captured output of each failing rank.

Each rank is a ``python -m pytest`` run of that one test (same rootdir, configuration
file, ``-p`` plugins, import mode, ``-o`` and ``-W`` options) in a session of its own,
with the variables torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1``, a free ``MASTER_PORT``) and gloo bound to
the loopback interface, so code under test may call ``gm.setup_root_gang()`` itself
(after ``root_gang`` it wraps the same default group). ``root_gang`` meets its peers
through a file store in a private temporary folder; its collectives time out after
``timeout`` seconds. Fixtures, module setup and ``tmp_path`` run in the ranks'
processes only, never in the process that reports; skip and xfail marks apply to the
test as a whole.

The ranks run in a pool of long-lived worlds, one per size (``gangmesh.testing.pool``),
forked from a warm interpreter that already imported torch: a world collects the tests
of its size once and then runs one test after another, each with a process group of its
own, for the cost of the test's own work. After each test every rank shuts
torch.distributed down; a world whose test left anything behind (a group some object
still holds, a thread, a process), or in which a rank failed to finish, crashed or was
killed, is ended with everything its ranks started, and the next test gets a new one:
a test that leaves a group behind, kills a rank or hangs a collective never reaches the
next test. Module-level state of test files lives as long as the world, as in any
pytest session. ``--gangmesh-fresh-ranks`` starts each rank of each test as a new
interpreter instead; a test of what happens at interpreter exit, or one that must own
its processes, belongs in processes of its own.

``gangmesh_world(n, hosts=H)`` spreads the n processes over H hosts made on this machine
(:class:`~gangmesh.testing.hostbed.HostBed`: network namespaces with the hostnames
``host0``, ``host1``, ..., their own addresses and an ``/etc/hosts`` naming every host,
on one private link), n // H on each: consecutive ranks on a host as torchrun numbers
them, or with ``numbering="round_robin"`` dealt out host by host. Each rank gets the
variables torchrun would give it there (``MASTER_ADDR`` is host0's address, ``GROUP_RANK``
its host; no ``GANGMESH_HOST`` nor ``GLOO_SOCKET_IFNAME``), and ``root_gang`` meets
through a TCP store on host0. :mod:`gangmesh.testing.hosts` lets a rank cut its host off
the link; after each test the link is whole again. The world's hosts are removed with
it. Where hosts cannot be made (not Linux, not root, no ``unshare``, ``nsenter``, ``ip``
or ``mount``, or the kernel refuses), such a test is skipped with the reason.

``device`` (default ``"cpu"``) is the device the world means, said to every rank in
``GANGMESH_DEVICE``: with ``"cpu"`` the world is gloo on CPU also on a machine with GPUs, so
code under test that calls ``gm.setup_root_gang()`` without a device takes cpu too; with
``"cuda"`` each rank takes ``cuda:LOCAL_RANK`` and NCCL, and the test is skipped where a host
has fewer GPUs than processes.

``timeout`` (seconds, default 120) bounds the whole run, process start included. When
it expires, the ranks still running are killed with every process they started, and the
test fails naming them, with the stack of each, written just before the deadline. Once a
rank has failed, the others get :data:`FAILURE_GRACE` more seconds to finish. No process
outlives the test. The marker needs a POSIX system.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from typing_extensions import override

from gangmesh.testing.forkserver import ForkServer
from gangmesh.testing.netns import namespaces_unavailable
from gangmesh.testing.outcome import WorldFailed, report_outcomes
from gangmesh.testing.pool import WorldPool
from gangmesh.testing.rank import PooledRank, RankReporter
from gangmesh.testing.shape import WorldShape
from gangmesh.testing.world import (
    FAILURE_GRACE,
    POOL_VARIABLE,
    WORLD_VARIABLE,
    World,
    rank_server,
    run_world,
    target_of,
)

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr, TracebackStyle

    from gangmesh.assembly.gangs import Gangs
    from gangmesh.runtime.gang import Gang

__all__ = ["DEFAULT_TIMEOUT", "FAILURE_GRACE", "MARKER", "SimulatedGangs", "WorldFailed"]

MARKER = "gangmesh_world"
"""Name of the marker that runs a test in every process of a gloo world."""

DEFAULT_TIMEOUT = 120.0
"""Seconds a ``gangmesh_world`` test may run, process start included, unless the marker says."""

_REPORTER = pytest.StashKey[RankReporter | None]()
"""In a rank's process: its reporter, which knows the test being run."""
_SERVER = pytest.StashKey["ForkServer | None"]()
_POOL = pytest.StashKey["WorldPool | None"]()
_TARGETS = pytest.StashKey[dict[WorldShape, list[str]]]()
_FRESH_OPTION = "--gangmesh-fresh-ranks"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("gangmesh").addoption(
        _FRESH_OPTION,
        action="store_true",
        default=False,
        help=f"start each rank of a {MARKER} test as a new interpreter instead of forking "
        "it from a warm one",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(n, hosts=1, numbering='consecutive', device='cpu', "
        f"timeout={DEFAULT_TIMEOUT:g}): run the test once in each of n processes that form a "
        "gloo world (device='cuda': NCCL, one GPU per process), on that many hosts "
        "(network namespaces; ranks numbered consecutive or round_robin over them); fixture "
        "root_gang: that world's root gang; see gangmesh.testing.plugin",
    )
    one_test, pooled = os.environ.pop(WORLD_VARIABLE, None), os.environ.pop(POOL_VARIABLE, None)
    reporter = RankReporter() if one_test or pooled else None
    config.stash[_REPORTER] = reporter
    if reporter is not None:
        config.pluginmanager.register(reporter, "gangmesh-world-rank")
    if one_test:
        assert reporter is not None
        reporter.begin(World(**json.loads(one_test)))
    if pooled:
        assert reporter is not None
        place = json.loads(pooled)
        rank = PooledRank(reporter, place["control"], place["rank"])
        config.pluginmanager.register(rank, "gangmesh-pooled-rank")


def pytest_unconfigure(config: pytest.Config) -> None:
    reporter = config.stash.get(_REPORTER, None)
    if reporter is not None:
        reporter.end()
    pool = config.stash.get(_POOL, None)
    if pool is not None:
        config.stash[_POOL] = None
        pool.close()
    server = config.stash.get(_SERVER, None)
    if server is not None:
        config.stash[_SERVER] = None
        server.close()


# --- the simulated_gangs fixture ------------------------------------------------------------


class SimulatedGangs:
    """The ``simulated_gangs`` fixture: call it for the gangs of one simulated rank.

    ``simulated_gangs(world_size, rank, **dims)`` takes the arguments of
    :func:`gangmesh.testing.simulate_gangs` and returns the rank's
    :class:`~gangmesh.Gangs`. A second call closes the gangs of the first.

    :raises ValueError: bad sizes or ranks (from ``create_gangs``).
    :raises RuntimeError: torch.distributed was initialised by something else.
    """

    def __init__(self) -> None:
        self._open: contextlib.ExitStack | None = None

    def __call__(self, world_size: int, rank: int, **dims: Any) -> Gangs:
        from gangmesh.testing.simulate import simulate_gangs

        self.close()
        with contextlib.ExitStack() as stack:
            gangs = stack.enter_context(simulate_gangs(world_size, rank, **dims))
            self._open = stack.pop_all()
        return gangs

    def close(self) -> None:
        """Close the gangs of the last call and shut torch.distributed down; idempotent."""
        stack, self._open = self._open, None
        if stack is not None:
            stack.close()


@pytest.fixture
def simulated_gangs() -> Iterator[SimulatedGangs]:
    """A factory: ``simulated_gangs(world_size, rank, **dims)`` -> the Gangs of that rank,
    built by ``create_gangs`` on torch's fake process group and closed after the test."""
    factory = SimulatedGangs()
    try:
        yield factory
    finally:
        factory.close()


# --- the gangmesh_world marker: in each rank's process --------------------------------------


@pytest.fixture
def root_gang(request: pytest.FixtureRequest) -> Iterator[Gang]:
    """The root gang of the world of a test marked ``gangmesh_world(n)``, closed after it."""
    reporter = request.config.stash.get(_REPORTER, None)
    world = None if reporter is None else reporter.world
    if world is None or request.node.nodeid != world.nodeid:
        pytest.fail(
            f"root_gang: only tests marked @pytest.mark.{MARKER}(n) have a root gang; "
            f"{request.node.nodeid} is not one",
            pytrace=False,
        )
    from datetime import timedelta

    import torch

    from gangmesh.runtime.process_group_gang import ProcessGroupGang

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = os.environ.get("GANGMESH_DEVICE") == "cuda"
    gang = ProcessGroupGang.create_default_process_group(
        torch.device("cuda", local_rank) if cuda else torch.device("cpu"),
        timeout=timedelta(seconds=world.timeout),
        init_method=world.init_method or f"file://{world.store}",
        rank=world.rank,
        world_size=world.size,
    )
    try:
        gang.barrier()  # every rank's side of the group is up before any test can close it
        yield gang
    finally:
        gang.close()


# --- the gangmesh_world marker: in the process that reports ---------------------------------


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.stash.get(_REPORTER, None) is not None:
        return  # a rank runs its tests as they are
    targets: dict[WorldShape, list[str]] = {}
    for index, item in enumerate(items):
        if isinstance(item, pytest.Function) and item.get_closest_marker(MARKER) is not None:
            items[index] = GangmeshWorldItem.from_function(item)
            with contextlib.suppress(WorldFailed):  # its run reports the bad marker
                shape, _ = _marker_arguments(item.get_closest_marker(MARKER))
                targets.setdefault(shape, []).append(target_of(item))
    config.stash[_TARGETS] = targets


class GangmeshWorldItem(pytest.Item):
    """A test marked ``gangmesh_world(n)``, as the process that reports it sees it:
    running it starts the n ranks and collects their results. It has no fixtures."""

    def __init__(self, *, function: pytest.Function, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.function = function
        self.own_markers.extend(function.own_markers)
        self.keywords.update({mark.name: mark for mark in function.own_markers})

    @classmethod
    def from_function(cls, function: pytest.Function) -> GangmeshWorldItem:
        assert function.parent is not None
        item: GangmeshWorldItem = cls.from_parent(
            function.parent, name=function.name, function=function
        )
        return item

    @override
    def reportinfo(self) -> tuple[os.PathLike[str] | str, int | None, str]:
        return self.function.reportinfo()

    @override
    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: TracebackStyle | None = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, WorldFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    @override
    def runtest(self) -> None:
        shape, timeout = _marker_arguments(self.get_closest_marker(MARKER))
        if shape.device == "cuda":
            import torch

            gpus = torch.cuda.device_count()
            if gpus < shape.per_host:
                pytest.skip(f"{shape.describe()}: {shape.per_host} GPUs wanted, {gpus} seen")
        if shape.hosts > 1:
            why = namespaces_unavailable()
            if why:
                pytest.skip(f"{shape.describe()}: {why}")
        if self.config.getoption(_FRESH_OPTION, False):
            outcomes = run_world(self.config, self.function, shape, timeout)
        else:
            outcomes = _pool(self.config).run(self.function, shape, timeout)
        report_outcomes(outcomes, shape.size, timeout)


def _pool(config: pytest.Config) -> WorldPool:
    """The session's pool of worlds (made on first use)."""
    pool = config.stash.get(_POOL, None)
    if pool is None:
        targets = config.stash.get(_TARGETS, {})
        pool = config.stash[_POOL] = WorldPool(config, lambda: _server(config), targets)
    return pool


def _server(config: pytest.Config) -> ForkServer:
    """The session's fork server (started on first use, replaced if it died)."""
    server = config.stash.get(_SERVER, None)
    if server is None or not server.alive:
        if server is not None:
            server.close()
        server = config.stash[_SERVER] = rank_server(config)
    return server


def _marker_arguments(marker: pytest.Mark | None) -> tuple[WorldShape, float]:
    """The shape and timeout of a ``gangmesh_world`` marker; the test fails on bad ones."""
    assert marker is not None
    unknown = sorted(set(marker.kwargs) - {"timeout", "hosts", "numbering", "device"})
    size = marker.args[0] if len(marker.args) == 1 else None
    timeout = marker.kwargs.get("timeout", DEFAULT_TIMEOUT)
    if unknown or not (isinstance(size, int) and not isinstance(size, bool) and size >= 1):
        raise WorldFailed(
            f"{MARKER}: expected {MARKER}(n, hosts=1, numbering='consecutive', device='cpu', "
            f"timeout=seconds) with an int n >= 1, got args={marker.args!r} "
            f"kwargs={marker.kwargs!r}"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise WorldFailed(
            f"{MARKER}: timeout: expected a positive number of seconds, got {timeout!r}"
        )
    if not math.isfinite(timeout):
        raise WorldFailed(
            f"{MARKER}: timeout: expected a finite number of seconds, got {timeout!r}"
        )
    try:
        shape = WorldShape(
            size,
            hosts=marker.kwargs.get("hosts", 1),
            numbering=marker.kwargs.get("numbering", "consecutive"),
            device=marker.kwargs.get("device", "cpu"),
        )
    except ValueError as ex:
        raise WorldFailed(f"{MARKER}({size}, ...): {ex}") from None
    return shape, float(timeout)
