"""Where torch splits new groups off a parent's communicator (NCCL with the default group
bound to a device: every NCCL job on torch 2.15), every process of the parent must enter
each split, in the same order. For every rank of simulated worlds (fake backend), these
tests record what gangmesh asks torch for while it builds gangs, re-splits them for FSDP and
makes sub-gangs, and check that the requests form one schedule all processes can follow:
each split entered by every process of its parent, the members of each group made agreeing
on it, no split that makes no group, no two parents waited on in opposite orders, and each
process given its plan's group.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.distributed.device_mesh import init_device_mesh

import gangmesh as gm
from gangmesh.plan.topology import MeshTopology
from gangmesh.runtime import _c10d
from gangmesh.testing.strategies import layouts


@dataclass(frozen=True)
class Request:
    """One process's part in a collective creation: the parent (its name, alike on every
    process, and its ranks), the groups asked for, and the group this process gets (None: it
    takes part without one). ``one_group``: a group torch makes the way new_group does, which
    every process of the parent must make, for the same group."""

    parent: tuple[int, ...]
    groups: frozenset[tuple[int, ...]]
    mine: tuple[int, ...] | None
    one_group: bool = False
    parent_name: str = "world"


@dataclass
class Recording:
    """Requests per global rank, in the order each process made them."""

    requests: dict[int, list[Request]] = field(default_factory=lambda: defaultdict(list))

    def record(self, rank: int, request: Request) -> None:
        self.requests[rank].append(request)


@dataclass
class TorchStandIn:
    """What torch's group creation sees from one process of a fake world that gangmesh
    takes for one bound to a device: each split and each group torch makes (at
    ``_new_process_group_helper``, where every new_group ends), recorded; the fake backend
    cannot split, so each member of a split gets a fake group of its ranks.

    Every group made by a split is named by its parent's name, the split's number among
    that parent's and its ranks, the same on every process that follows one schedule; two
    groups of the same ranks stay two parents. Every split must carry a timeout: the new
    group's, or, without a colour, the parent's own (torch 2.9.1 resets the parent's
    timeout otherwise).
    """

    recording: Recording
    rank: int
    new_group: Callable[..., Any]
    make_group: Callable[..., Any]
    world: Any = None
    names: dict[int, str] = field(default_factory=dict)
    timeouts: dict[int, timedelta] = field(default_factory=dict)
    splits: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    splitting: bool = False

    def adopt_world(self, world: Any, timeout: timedelta) -> None:
        """The default group, once made: the first parent."""
        self.world = world
        self.names[id(world)] = "world"
        self.timeouts[id(world)] = timeout

    def split_group(
        self, parent: Any, split_ranks: list[list[int]], *, timeout: Any = None, **_: Any
    ) -> Any:
        parent_ranks = dist.get_process_group_ranks(parent)
        name = self.names.get(id(parent))
        assert name is not None, f"a split of ranks {parent_ranks}, not made by a split"
        groups = frozenset(tuple(sorted(parent_ranks[r] for r in g)) for g in split_ranks)
        mine = next((g for g in groups if self.rank in g), None)
        expected = self.timeouts[id(parent)] if mine is None else None
        assert isinstance(timeout, timedelta) and timeout == (expected or timeout), (
            f"a split of {name} without a colour carries timeout {timeout}, "
            f"not the parent's {expected}"
        )
        request = Request(tuple(parent_ranks), groups, mine, parent_name=name)
        self.recording.record(self.rank, request)
        number = self.splits[name]
        self.splits[name] += 1
        if mine is None:
            return None
        self.splitting = True
        try:
            group = self.new_group(list(mine), use_local_synchronization=True)
        finally:
            self.splitting = False
        self.names[id(group)] = f"{name}/{number}:{','.join(map(str, mine))}"
        self.timeouts[id(group)] = timeout
        return group

    def make(self, size: int, group_rank: Any, ranks: list[int], backend: Any, *a: Any,
             **k: Any) -> Any:  # fmt: skip
        """torch's _new_process_group_helper: where torch makes every group new_group asks
        for. Under a bound world every process of the world must make it; a monitored gang's
        gloo twin is made by its members, all of them, and stands in the schedule as a
        parent of its own (a fake group here: the simulated ranks have no peers)."""
        if str(backend) == "gloo":
            made = tuple(ranks)
            mine = made if self.rank in made else None
            twin = Request(made, frozenset([made]), mine, parent_name=f"gloo twin {made}")
            self.recording.record(self.rank, twin)
            return self.make_group(
                size, group_rank, ranks, "fake", *a, **{**k, "backend_options": None}
            )
        if self.world is None:  # the default group itself
            return self.make_group(size, group_rank, ranks, backend, *a, **k)
        if not self.splitting and str(backend) == dist.get_backend(self.world):
            made = tuple(ranks)
            mine = made if self.rank in made else None
            world = tuple(range(dist.get_world_size()))
            self.recording.record(self.rank, Request(world, frozenset([made]), mine, True))
        return self.make_group(size, group_rank, ranks, backend, *a, **k)


@dataclass
class Exchanges:
    """The all_reduces (MAX) by which the processes of a gang agree whether any of them lacks
    a group, in a simulated world whose ranks run one after another: a first pass records
    what each rank gives, by gang and call; a second gives each rank the maximum over its
    gang's members, as the collective does."""

    given: dict[tuple[tuple[int, ...], int], list[list[int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    answers: dict[tuple[tuple[int, ...], int], list[int]] | None = None

    def stand_in(self) -> Callable[..., None]:
        calls: dict[tuple[int, ...], int] = defaultdict(int)

        def all_reduce(gang: gm.ProcessGroupGang, tensor: torch.Tensor, op: Any) -> None:
            assert op is gm.ReduceOperation.MAX, op
            members = tuple(gang.global_ranks)
            call = (members, calls[members])
            calls[members] += 1
            if self.answers is None:
                self.given[call].append(tensor.tolist())
            else:
                tensor.copy_(torch.tensor(self.answers[call], dtype=tensor.dtype))

        return all_reduce

    def settle(self) -> None:
        self.answers = {call: [max(v) for v in zip(*given, strict=True)]
                        for call, given in self.given.items()}  # fmt: skip


@contextmanager
def bound_rank(
    recording: Recording,
    world_size: int,
    rank: int,
    monkeypatch: pytest.MonkeyPatch,
    exchanges: Exchanges,
    monitored: bool = False,
) -> Iterator[gm.ProcessGroupGang]:
    """The root gang of ``rank`` in a fake world that gangmesh takes for one bound to a
    device, torch's group creation recorded (:class:`TorchStandIn`), its gangs' agreements
    answered by ``exchanges``; with ``monitored``, the root is monitored (its gangs get
    gloo twins)."""
    _c10d.ensure_fake_backend()
    c10d = dist.distributed_c10d
    torch_side = TorchStandIn(recording, rank, dist.new_group, c10d._new_process_group_helper)
    with monkeypatch.context() as patch:
        patch.setattr(_c10d, "splits_new_groups", lambda backend: True)
        patch.setattr(dist, "split_group", torch_side.split_group)
        patch.setattr(c10d, "_new_process_group_helper", torch_side.make)
        patch.setattr(gm.ProcessGroupGang, "all_reduce", exchanges.stand_in())
        # A monitored barrier needs gloo; the twins here are fake, and the ranks run in turn.
        patch.setattr(dist, "monitored_barrier", lambda *args, **kwargs: None)
        root = gm.ProcessGroupGang.create_default_process_group(
            torch.device("cpu"), backend="fake", store=dist.HashStore(), rank=rank,
            world_size=world_size, monitored=monitored,
        )  # fmt: skip
        try:
            torch_side.adopt_world(dist.group.WORLD, root.timeout)
            yield root
        finally:
            root.close()


def simulate(
    world_size: int,
    monkeypatch: pytest.MonkeyPatch,
    body: Callable[[int, gm.ProcessGroupGang], None],
    monitored: bool = False,
) -> Recording:
    """``body(rank, root)`` for every rank of a simulated bound world, twice (what each rank
    gives its gangs' agreements, then the agreed answers); the second pass's recording."""
    exchanges = Exchanges()
    for answered in (False, True):
        if answered:
            exchanges.settle()
        recording = Recording()
        for rank in range(world_size):
            with bound_rank(recording, world_size, rank, monkeypatch, exchanges, monitored) as root:
                body(rank, root)
    return recording


def assert_one_schedule(recording: Recording, world_size: int) -> None:
    """Every request is entered by every process of its parent, the members of each group
    made agreeing on it; and some order of the requests lets every process make
    its own in its own order (no two parents waited on in opposite orders)."""
    steps: dict[tuple[str, int], dict[int, Request]] = defaultdict(dict)
    order: dict[int, list[tuple[str, int]]] = {}
    for rank in range(world_size):
        count: dict[str, int] = defaultdict(int)
        order[rank] = []
        for request in recording.requests[rank]:
            step = (request.parent_name, count[request.parent_name])
            count[request.parent_name] += 1
            steps[step][rank] = request
            order[rank].append(step)
    for (parent_name, index), entered in steps.items():
        parents = {request.parent for request in entered.values()}
        assert len(parents) == 1, f"split {index} of {parent_name} has parents {parents}"
        (parent,) = parents
        assert sorted(entered) == list(parent), (
            f"split {index} of parent {parent} entered by {sorted(entered)} only"
        )
        kinds = {(r.one_group, r.groups if r.one_group else None) for r in entered.values()}
        assert len(kinds) == 1, f"split {index} of parent {parent}: processes asked {kinds}"
        # A split that makes no group (every process holds its own) costs the whole parent
        # an ncclCommSplit for nothing.
        assert any(r.one_group or r.mine is not None for r in entered.values()), (
            f"split {index} of {parent_name} makes no group: every process took part "
            f"without a colour"
        )
        # A process that holds its group already asks for the others only: NCCL needs each
        # process's own group (or none), and the members of a group to agree on it.
        for rank, request in entered.items():
            assert request.mine is None or rank in request.mine
            for member in request.mine or ():
                assert entered[member].mine == request.mine, (parent, index, rank, member)
    # A schedule exists iff the steps, ordered by each process's sequence, form no cycle.
    after: dict[Any, set[Any]] = defaultdict(set)
    for sequence in order.values():
        for first, then in pairwise(sequence):
            after[first].add(then)
    done: set[Any] = set()
    waiting: set[Any] = set()

    def visit(step: Any) -> None:
        assert step not in waiting, f"processes wait on split {step} in opposite orders"
        if step in done:
            return
        waiting.add(step)
        for later in after[step]:
            visit(later)
        waiting.discard(step)
        done.add(step)

    for step in steps:
        visit(step)


def assert_gangs_match(gangs: gm.Gangs, plan: MeshTopology, rank: int) -> None:
    for name in gangs:
        gang = gangs[name]
        expected = plan.group_of(rank, name)
        got = gang.global_ranks if isinstance(gang, gm.ProcessGroupGang) else [rank]
        assert (got, gang.size) == (expected, len(expected)), (rank, name)


SCHEDULES = settings(max_examples=15, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
])  # fmt: skip


@SCHEDULES
@given(
    plan=layouts(max_world_size=16, orders=True, experts=True),
    data=st.data(),
    monitored=st.booleans(),
)
def test_gangs_refits_and_sub_gangs_split_as_every_process_of_the_parent_asks(
    plan: MeshTopology, data: st.DataObject, monitored: bool, monkeypatch: pytest.MonkeyPatch
):
    # monitored: every gang also gets a gloo twin for its monitored barriers, made by its
    # members between the splits; the twins must fit the one schedule too.
    picked = data.draw(st.integers(min_value=1, max_value=max(1, plan.size_of("dp"))))
    sub_ranks = list(range(picked))[::-1]  # out of order, as users may ask

    def body(rank: int, root: gm.ProcessGroupGang) -> None:
        gangs = gm.create_gangs(root, **plan.layout.keywords())
        assert_gangs_match(gangs, plan, rank)
        refit = gm.create_fsdp_gangs(gangs)  # tp, pp, cp and the experts held already
        sub = refit.dp.create_gang(sub_ranks)
        dp = refit.plan.group_of(rank, "dp")
        expected = [dp[r] for r in sub_ranks] if dp.index(rank) in sub_ranks else None
        if expected is None:
            assert sub is None
        else:
            assert sub is not None and (sub.rank, sub.size) == (
                expected.index(rank),
                len(expected),
            )
            assert not isinstance(sub, gm.ProcessGroupGang) or sub.global_ranks == expected
        for made in (sub, refit, gangs):
            if made is not None:
                made.close()

    recording = simulate(plan.world_size, monkeypatch, body, monitored)
    twins = any(r.parent_name.startswith("gloo twin") for rs in recording.requests.values()
                for r in rs)  # fmt: skip
    assert twins == monitored
    assert_one_schedule(recording, plan.world_size)


def test_members_alone_making_a_group_is_caught():
    # What gangmesh did before: a group made by its members only, under a bound world.
    recording = Recording()
    for rank in (0, 1):
        recording.record(rank, Request((0, 1, 2, 3), frozenset([(0, 1)]), (0, 1)))
    with pytest.raises(AssertionError, match=r"entered by \[0, 1\] only"):
        assert_one_schedule(recording, 4)
    # Each process making its own group of a dimension with new_group: all enter, but torch
    # needs every process to make every group.
    recording = Recording()
    for rank in range(4):
        pair = (0, 1) if rank < 2 else (2, 3)
        recording.record(rank, Request((0, 1, 2, 3), frozenset([pair]), pair, one_group=True))
    with pytest.raises(AssertionError, match=r"split 0 of parent \(0, 1, 2, 3\): processes asked"):
        assert_one_schedule(recording, 4)


def test_opposite_orders_and_splits_that_make_no_group_are_caught():
    recording = Recording()
    a = Request((0, 1), frozenset([(0, 1)]), (0, 1), parent_name="world/0:0,1")
    b, b2 = Request((0, 1, 2), frozenset([(2,)]), None), Request((0, 1, 2), frozenset([(2,)]), (2,))
    recording.requests.update({0: [a, b], 1: [b, a], 2: [b2]})
    with pytest.raises(AssertionError, match="opposite orders"):
        assert_one_schedule(recording, 3)
    recording = Recording()
    recording.requests.update({r: [Request((0, 1), frozenset([(1,)]), None)] for r in (0, 1)})
    with pytest.raises(AssertionError, match="split 0 of world makes no group"):
        assert_one_schedule(recording, 2)


@st.composite
def _parts_and_bridge(draw: st.DrawFn) -> tuple[dict[str, int], list[MeshTopology], list[int]]:
    """Two or three parts of a world of up to 12 processes, a plan per part, and a bridge:
    some ranks of every part."""
    sizes = draw(st.lists(st.integers(min_value=1, max_value=4), min_size=2, max_size=3))
    plans = [draw(layouts(world_sizes=[size], orders=True, experts=True)) for size in sizes]
    world = sum(sizes)
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    bridge = sorted(
        offset + draw(st.integers(min_value=0, max_value=size - 1))
        for offset, size in zip(offsets, sizes, strict=True)
    )
    extra = draw(st.lists(st.integers(min_value=0, max_value=world - 1), max_size=3))
    return {f"part{i}": size for i, size in enumerate(sizes)}, plans, sorted({*bridge, *extra})


@SCHEDULES
@given(drawn=_parts_and_bridge())
def test_parts_their_gangs_and_bridges_split_as_every_process_of_the_parent_asks(
    drawn: tuple[dict[str, int], list[MeshTopology], list[int]], monkeypatch: pytest.MonkeyPatch
):
    sizes, plans, bridge = drawn
    world = sum(sizes.values())

    def body(rank: int, root: gm.ProcessGroupGang) -> None:
        parts = gm.create_parts(root, **sizes)
        part = list(sizes).index(parts.name)
        offset, plan = parts.ranks(parts.name)[0], plans[part]
        assert parts.root.global_ranks == parts.ranks(parts.name)  # type: ignore[attr-defined]
        gangs = gm.create_gangs(parts.root, **plan.layout.keywords())
        for name in gangs:
            expected = [offset + r for r in plan.group_of(rank - offset, name)]
            gang = gangs[name]
            got = gang.global_ranks if isinstance(gang, gm.ProcessGroupGang) else [rank]
            assert got == expected, (rank, name)
        by_part = {n: [r for r in bridge if r in parts.ranks(n)] for n in sizes}
        gang = parts.bridge(**{n: ranks for n, ranks in by_part.items() if ranks})
        if rank in bridge:
            assert gang is not None and gang.size == len(bridge)
            assert not isinstance(gang, gm.ProcessGroupGang) or gang.global_ranks == bridge
        else:
            assert gang is None
        gangs.close()
        parts.close()

    recording = simulate(world, monkeypatch, body)
    assert_one_schedule(recording, world)


@SCHEDULES
@given(plan=layouts(max_world_size=12, orders=False), data=st.data())
def test_placed_gangs_and_wrapped_meshes_split_as_every_process_of_the_parent_asks(
    plan: MeshTopology, data: st.DataObject, monkeypatch: pytest.MonkeyPatch
):
    # placement (given sites, shuffled among hosts) and a user's mesh wrapped with from_mesh,
    # whose missing flattened groups gangmesh splits off the default group.
    world = plan.world_size
    hosts = data.draw(st.lists(st.sampled_from("abcd"), min_size=world, max_size=world))
    sites = [gm.Site(host) for host in hosts]
    dims = {name: plan.size_of(name) for name in ("pp", "dp_replicate", "dp_shard", "cp", "tp")}
    names = tuple(name for name, size in dims.items() if size > 1) or ("dp_shard",)

    def body(rank: int, root: gm.ProcessGroupGang) -> None:
        placed = gm.create_gangs(root, **plan.layout.keywords(), placement=sites)
        assert_gangs_match(placed, placed.plan, rank)
        mesh = init_device_mesh("cpu", tuple(dims.get(n, world) for n in names),
                                mesh_dim_names=names)  # fmt: skip
        wrapped = gm.Gangs.from_mesh(mesh, timeout=timedelta(seconds=40))
        assert_gangs_match(wrapped, wrapped.plan, rank)
        wrapped.close()
        placed.close()

    recording = simulate(world, monkeypatch, body)
    assert_one_schedule(recording, world)
