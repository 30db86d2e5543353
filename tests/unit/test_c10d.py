"""The torch internals gangmesh relies on behave as it expects, on this torch version.

Each test pins one helper of gangmesh.runtime._c10d (or gangmesh.runtime._backend) to what torch does, so
that a torch release that moves them fails here, not as a hang in a multi-process job.
"""

from __future__ import annotations

import inspect
import threading
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gangmesh.runtime import _backend, _c10d
from gangmesh.runtime.gang import ReduceOperation


@pytest.fixture
def gloo_world():
    """A real gloo default group of one process, torn down after the test."""
    dist.init_process_group(
        "gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=timedelta(seconds=33)
    )
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_a_named_group_gets_the_name_and_leaves_torchs_counter_alone(gloo_world):
    world = dist.distributed_c10d._world
    before = world.group_count
    group = _c10d.new_group_named(
        [0],
        2**62 + 7,
        backend="gloo",
        timeout=timedelta(seconds=21),
        options=_c10d.backend_options("gloo", timedelta(seconds=21)),
    )
    assert group.group_name == str(2**62 + 7)
    assert world.group_count == before
    assert _c10d.group_timeout(group, torch.device("cpu")) == timedelta(seconds=21)
    assert _c10d.group_timeout(gloo_world, torch.device("cpu")) == timedelta(seconds=33)
    # torch's own job-wide naming carries on where it was.
    assert dist.new_group([0]).group_name == str(before)


def test_a_named_group_carries_its_description_and_takes_ascending_ranks_only(gloo_world):
    group = _c10d.new_group_named(
        [0], 2**62 + 9, backend="gloo", timeout=timedelta(seconds=5), options=None,
        description="gangmesh:tp:0",
    )  # fmt: skip
    assert group.group_name == str(2**62 + 9)
    if "group_desc" in inspect.signature(dist.new_group).parameters:
        assert group.group_desc == "gangmesh:tp:0"
    with pytest.raises(ValueError, match=r"ranks: expected distinct ranks in ascending order"):
        _c10d.new_group_named(
            [0, 0], 2**62 + 10, backend="gloo", timeout=timedelta(seconds=5), options=None
        )


def test_the_fake_backend_registers_and_reports_no_timeout(gloo_world):
    _c10d.ensure_fake_backend()
    fake = dist.new_group([0], backend="fake")
    assert dist.get_backend(fake) == "fake"
    assert _c10d.group_timeout(fake, torch.device("cpu")) is None


def test_undecorated_collectives_are_torchs_functions(gloo_world):
    all_reduce = _c10d.undecorated(dist.all_reduce)
    tensor = torch.ones(2)
    all_reduce(tensor, dist.ReduceOp.SUM, gloo_world)
    assert tensor.tolist() == [1.0, 1.0]
    assert all_reduce.__name__ == "all_reduce"


def test_process_group_methods_and_allgather_options_exist_on_this_torch(gloo_world):
    gather = _c10d.process_group_method("all_gather_single", "_allgather_base")
    out = torch.zeros(3)
    gather(gloo_world, out, torch.arange(3.0), _c10d.allgather_options()).wait()
    assert out.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(AttributeError):
        _c10d.process_group_method("no_such_method", "_no_such_method")


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.complex64])
def test_backend_calls_give_what_torchs_functions_give(gloo_world, dtype):
    """Plain tensors go straight to the backend, the others through torch: same results."""
    tensor = torch.arange(4).to(dtype)
    assert _backend.plain(tensor) == (not dtype.is_complex)
    assert not _backend.plain(torch.zeros(1, dtype=torch.float8_e4m3fn))
    out = torch.zeros(4, dtype=dtype)
    _backend.all_gather_single(gloo_world, out, tensor)
    assert torch.equal(out, tensor)
    _backend.all_reduce(gloo_world, out, ReduceOperation.SUM)
    _backend.broadcast(gloo_world, out, 0)
    _backend.all_to_all_single(gloo_world, out, tensor, [4], [4])
    assert torch.equal(out, tensor)
    outs = [torch.zeros(4, dtype=dtype)]
    _backend.all_gather(gloo_world, outs, tensor)
    assert torch.equal(outs[0], tensor)
    if not dtype.is_complex:
        scattered = torch.zeros(4, dtype=dtype)
        _backend.reduce_scatter_single(gloo_world, scattered, tensor, ReduceOperation.MAX)
        assert torch.equal(scattered, tensor)


def test_torch_splits_no_gloo_group_bound_or_not(gloo_world):
    # gloo's constructor makes a new group even where torch hands it a parent to split.
    assert _c10d.splits_new_groups("gloo") is False
    dist.destroy_process_group()
    try:
        dist.init_process_group(
            "gloo", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cpu", 0)
        )
    except ValueError:  # torch before 2.15 binds accelerators only
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    assert _c10d.splits_new_groups("gloo") is False


def test_a_split_group_carries_its_description_and_leaves_torchs_counter_alone(gloo_world):
    world = dist.distributed_c10d._world
    before = world.group_count
    try:
        group = _c10d.split_group(
            gloo_world, [[0]], 2**62 + 11, timeout=timedelta(seconds=7), options=None,
            description="gangmesh:tp:0",
        )  # fmt: skip
    except RuntimeError as ex:  # torch before 2.15 splits only groups bound to an accelerator
        assert "device" in str(ex)
        return
    assert isinstance(group, dist.ProcessGroup)
    assert dist.get_process_group_ranks(group) == [0]
    assert group.group_desc == "gangmesh:tp:0"
    assert world.group_count == before
    assert _c10d.group_timeout(group, torch.device("cpu")) == timedelta(seconds=7)


def test_split_options_are_new_for_nccl_and_the_parents_for_others():
    assert _c10d.split_options("gloo", timedelta(seconds=3), False) is None
    if dist.is_nccl_available():
        options = _c10d.split_options("nccl", timedelta(seconds=3), True)
        assert options._timeout == timedelta(seconds=3)
        assert options.is_high_priority_stream is True


def test_backend_calls_tell_the_backend_they_are_waited_for(gloo_world):
    # as torch's functions do with async_op=False: NCCL then runs them on the current stream
    tensor = torch.ones(2)
    _backend.broadcast(gloo_world, tensor, 0)
    options = [
        *_backend._ALL_REDUCE.values(),
        *_backend._REDUCE_SCATTER.values(),
        _backend._ALL_GATHER,
        _backend._ALL_TO_ALL,
        *_backend._BROADCAST.values(),
    ]
    assert [o.asyncOp for o in options] == [False] * len(options)


@pytest.mark.parametrize(
    ("backend", "bound"),
    [("cpu:fake,cuda:gloo", True), ("cpu:gloo,cuda:fake", True), ("cpu:fake,cuda:gloo", False)],
)
def test_splits_new_groups_answers_as_torch_splits_a_bound_world(backend, bound):
    # Stand-ins for a bound NCCL WORLD on a machine without CUDA: a mixed world whose CUDA
    # leg is gloo (which can split on every supported torch) or the fake backend (which can
    # from 2.15 on). Bound, gangmesh answers as torch's own choice of a split source; not
    # bound, NCCL connects each group lazily and nothing splits.
    _c10d.ensure_fake_backend()
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        world = dist.group.WORLD
        if bound:
            world.bound_device_id = torch.device("cuda", 0)
        source = dist.distributed_c10d._get_split_source
        takes_backend = len(inspect.signature(source).parameters) > 1
        torch_splits = (source(world, backend) if takes_backend else source(world)) is not None
        assert _c10d.splits_new_groups(backend) is (bound and torch_splits)
        if backend.endswith("cuda:gloo"):
            assert _c10d.splits_new_groups(backend) is bound  # both answers, on every torch
        assert _c10d.splits_new_groups("gloo") is False  # another backend: members alone
    finally:
        dist.destroy_process_group()


def test_torch_counts_every_collective_of_a_group_and_the_count_is_read(gloo_world):
    # the call number a failure of torch's own collective is named with (FSDP2's, DTensor's)
    group = dist.new_group([0])
    before = _c10d.sequence_number(group)
    for _ in range(3):
        dist.all_reduce(torch.ones(2), group=group)
    dist.barrier(group=group)
    assert _c10d.sequence_number(group) == before + 4
    assert _c10d.sequence_number(None) == _c10d.sequence_number(dist.group.WORLD)
    dist.destroy_process_group(group)


def test_functional_collectives_take_a_group_by_name(gloo_world):
    # what a gang calls in code torch.compile traces (gangmesh.runtime._traced)
    name, tensor = gloo_world.group_name, torch.arange(4.0)
    all_reduce = _c10d.functional_collective("all_reduce")
    reduce_scatter = _c10d.functional_collective("reduce_scatter_single", "reduce_scatter_tensor")
    for reduction in ("sum", "avg", "product", "min", "max"):
        assert torch.equal(all_reduce(tensor, reduction, name), tensor)
        assert torch.equal(reduce_scatter(tensor, reduction, 0, name), tensor)
    all_gather = _c10d.functional_collective("all_gather_single", "all_gather_tensor")
    assert torch.equal(all_gather(tensor, 0, name), tensor)
    assert torch.equal(_c10d.functional_collective("broadcast")(tensor, 0, name), tensor)
    all_to_all = _c10d.functional_collective("all_to_all_single")
    assert torch.equal(all_to_all(tensor, [4], [4], name), tensor)
    with pytest.raises(AttributeError):
        _c10d.functional_collective("no_such_collective", "no_older_one")


def test_a_standalone_backend_meets_in_its_store_and_leaves_the_keys_gangmesh_deletes():
    # two members in two threads of this process, no default group: gloo's public constructor
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    clients = [dist.TCPStore("127.0.0.1", server.port, is_master=False) for _ in range(2)]
    cpu = torch.device("cpu")
    made: dict[int, object] = {}

    def member(rank: int) -> None:
        store = dist.PrefixStore("epoch/route", clients[rank])
        made[rank] = _c10d.standalone_backend(store, rank, 2, cpu, timedelta(seconds=20))

    threads = [threading.Thread(target=member, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    values = [torch.full((3,), float(rank)) for rank in (0, 1)]
    works = [made[rank].broadcast([values[rank]], dist.BroadcastOptions()) for rank in (0, 1)]  # type: ignore[attr-defined]
    for work in works:
        work.wait()
    assert torch.equal(values[1], torch.zeros(3))
    keys = [f"epoch/route/{key}" for rank in (0, 1) for key in _c10d.rendezvous_keys(cpu, rank)]
    assert server.check(keys)
    before = server.num_keys()
    for key in keys:
        server.delete_key(key)
    assert server.num_keys() == before - len(keys)
