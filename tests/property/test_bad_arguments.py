"""Every public entry point rejects generated bad arguments with ValueError or TypeError,
naming the argument, before any communication."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import gangmesh as gm
from gangmesh.runtime.environment import read_launch_environment
from gangmesh.testing import simulate_gangs

CPU = torch.device("cpu")
NOT_INTS = st.one_of(
    st.floats(), st.text(max_size=3), st.none(), st.booleans(), st.lists(st.integers(), max_size=2)
)


def rejects(call: Callable[[], Any], name: str) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert re.search(rf"(^|\b){re.escape(name)}", str(info.value)), str(info.value)


class Recorder(gm.Gang):
    """A gang that records every call that would communicate."""

    def __init__(self, size: int) -> None:
        self.calls: list[str] = []
        self._size = size

    rank = property(lambda self: 0)
    size = property(lambda self: self._size)
    device = property(lambda self: CPU)
    supports_process_group = property(lambda self: False)

    def close(self) -> None: ...
    def as_process_group(self) -> Any: ...

    def _record(self, *args: Any) -> None:
        self.calls.append("called")

    _create_gang = _barrier = _all_reduce = _all_gather = _record  # type: ignore[assignment]
    _all_gather_to_list = _broadcast = _broadcast_objects = _record  # type: ignore[assignment]
    _reduce_scatter = _all_to_all = _record  # type: ignore[assignment]


@pytest.fixture(scope="module")
def real_gangs():
    """ProcessGroupGangs of rank 3 in a simulated world of 8 (tp=2)."""
    with simulate_gangs(8, 3, tp=2) as gangs:
        yield gangs


def gangs_under_test(real_gangs) -> list[gm.Gang]:
    return [real_gangs.root, real_gangs.tp, gm.FakeGang(CPU, rank=1, size=4), Recorder(4)]


def bad_rank(size: int) -> st.SearchStrategy[Any]:
    return st.one_of(NOT_INTS, st.integers(max_value=-1), st.integers(min_value=size))


@given(data=st.data())
def test_source_ranks(real_gangs, data):
    for gang in gangs_under_test(real_gangs):
        source = data.draw(bad_rank(gang.size))
        rejects(lambda: gang.broadcast(torch.zeros(1), source_rank=source), "source_rank")
        rejects(lambda: gang.broadcast_objects([1], source_rank=source), "source_rank")
        rejects(lambda: gm.broadcast_flag(gang, True, source_rank=source), "source_rank")


@given(data=st.data())
def test_create_gang_ranks(real_gangs, data):
    for gang in gangs_under_test(real_gangs):
        good = st.integers(0, gang.size - 1)
        ranks = data.draw(
            st.one_of(
                st.lists(good, min_size=1).filter(lambda r: len(set(r)) < len(r)),
                st.lists(st.one_of(good, bad_rank(gang.size)), min_size=1).filter(
                    lambda r: any(
                        not isinstance(x, int) or isinstance(x, bool) or not 0 <= x < gang.size
                        for x in r
                    )
                ),
                st.just([]),
                st.text(max_size=3),
            )
        )
        rejects(lambda: gang.create_gang(ranks), "ranks")


@given(
    in_shape=st.lists(st.integers(1, 4), max_size=3),
    out_shape=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    data=st.data(),
)
def test_all_gather_shapes(real_gangs, in_shape, out_shape, data):
    for gang in gangs_under_test(real_gangs):
        inp = torch.zeros(in_shape)
        accepted = [[gang.size, *in_shape], [gang.size * inp.numel()]]
        if in_shape:
            accepted.append([gang.size * in_shape[0], *in_shape[1:]])
        assume(out_shape not in accepted)
        rejects(lambda: gang.all_gather(torch.zeros(out_shape), inp), "output_tensor")
        length = data.draw(st.integers(0, 9).filter(lambda n: n != gang.size))
        rejects(
            lambda: gang.all_gather_to_list([torch.zeros(in_shape)] * length, inp), "output_tensors"
        )


@given(op=st.one_of(st.integers(), st.text(max_size=4), st.none()))
def test_reduce_operations_and_tensors(real_gangs, op):
    for gang in gangs_under_test(real_gangs):
        rejects(lambda: gang.all_reduce(torch.zeros(1), op), "op")
        rejects(lambda: gang.all_reduce([1.0], gm.ReduceOperation.SUM), "tensor")
        rejects(
            lambda: gang.all_reduce(torch.zeros(1, device="meta"), gm.ReduceOperation.SUM), "tensor"
        )
        rejects(
            lambda: gang.all_gather(torch.zeros(gang.size, dtype=torch.int32), torch.zeros(1)),
            "output_tensor",
        )
        rejects(lambda: gang.broadcast_objects((1,)), "objects")


@given(
    rows=st.integers(0, 9),
    out_rows=st.integers(0, 9),
    trailing=st.lists(st.integers(1, 3), max_size=2),
    other_trailing=st.lists(st.integers(1, 3), max_size=2),
)
def test_reduce_scatter_shapes(real_gangs, rows, out_rows, trailing, other_trailing):
    for gang in gangs_under_test(real_gangs):
        out = torch.zeros([out_rows, *trailing])
        inp = torch.zeros([rows, *other_trailing])
        fits = (rows == gang.size * out_rows and other_trailing == trailing) or (
            rows == gang.size and other_trailing == [out_rows, *trailing]
        )
        assume(not fits)
        rejects(lambda: gang.reduce_scatter(out, inp, gm.ReduceOperation.SUM), "input_tensor")
        rejects(
            lambda: gang.reduce_scatter(
                out, torch.zeros(0, dtype=torch.int8), gm.ReduceOperation.SUM
            ),
            "output_tensor",
        )
        rejects(
            lambda: gang.reduce_scatter(
                torch.zeros(1, dtype=torch.int64),
                torch.zeros(gang.size, dtype=torch.int64),
                gm.ReduceOperation.MEAN,
            ),
            "input_tensor",
        )


SPLITS = st.one_of(
    st.lists(st.integers(-3, 5), max_size=6),
    st.text(max_size=3),
    st.lists(st.one_of(st.floats(), st.none()), min_size=1, max_size=4),
)


@given(inputs=SPLITS, outputs=SPLITS, rows=st.integers(0, 12))
def test_all_to_all_split_sizes(real_gangs, inputs, outputs, rows):
    for gang in gangs_under_test(real_gangs):

        def valid(splits: object) -> bool:
            return (
                isinstance(splits, list)
                and len(splits) == gang.size
                and all(isinstance(s, int) and s >= 0 for s in splits)
                and sum(splits) == rows
            )

        one_peer = [rows] + [0] * (gang.size - 1)
        if not valid(inputs):
            rejects(
                lambda: gang.all_to_all(torch.zeros(rows), torch.zeros(rows), one_peer, inputs),
                "input_",
            )
        if not valid(outputs):
            rejects(
                lambda: gang.all_to_all(torch.zeros(rows), torch.zeros(rows), outputs, one_peer),
                "output_",
            )


def test_all_to_all_tensors(real_gangs):
    for gang in gangs_under_test(real_gangs):
        n = gang.size
        rejects(lambda: gang.all_to_all(torch.zeros(n, 2), torch.zeros(n, 3)), "output_tensor")
        rejects(
            lambda: gang.all_to_all(torch.zeros(n), torch.zeros(n, dtype=torch.int64)),
            "output_tensor",
        )
        rejects(lambda: gang.all_to_all(torch.zeros(n), torch.zeros(n + 1)), "input_tensor")
        rejects(lambda: gang.all_to_all(torch.zeros(()), torch.zeros(())), "input_tensor")
        rejects(lambda: gang.all_to_all(torch.zeros(n), [0.0] * n), "input_tensor")  # type: ignore[arg-type]


@given(
    value=st.one_of(
        st.text(max_size=3), st.none(), st.lists(st.integers(), max_size=2), st.complex_numbers()
    )
)
def test_helpers_refuse_values_that_are_not_numbers(value):
    gang = gm.FakeGang(CPU, size=2)
    rejects(lambda: gm.all_sum(gang, value), "value")
    rejects(lambda: gm.all_reduce_dict(gang, {"m": value}), "data['m']")
    if not isinstance(value, (bool, int)):
        rejects(lambda: gm.broadcast_flag(gang, value), "flag")  # type: ignore[arg-type]


def test_bad_input_never_reaches_communication():
    gang = Recorder(4)
    for call in (
        lambda: gang.broadcast(torch.zeros(1), source_rank=4),
        lambda: gang.create_gang([0, 0]),
        lambda: gang.all_gather(torch.zeros(3), torch.zeros(1)),
        lambda: gang.all_reduce(torch.zeros(1, dtype=torch.int64), gm.ReduceOperation.MEAN),
        lambda: gang.reduce_scatter(torch.zeros(2), torch.zeros(7), gm.ReduceOperation.SUM),
        lambda: gang.all_to_all(torch.zeros(4), torch.zeros(4), [1, 1, 1], None),
        lambda: gang.all_to_all(torch.zeros(4), torch.zeros(4), None, [1, 1, 1, 2]),
    ):
        with pytest.raises((ValueError, TypeError)):
            call()
    assert gang.calls == []
    gang.all_reduce(torch.zeros(1), gm.ReduceOperation.SUM)
    gang.reduce_scatter(torch.zeros(2), torch.zeros(8), gm.ReduceOperation.SUM)
    gang.all_to_all(torch.zeros(5), torch.zeros(4), [2, 1, 1, 1], [1, 1, 1, 1])
    assert gang.calls == ["called"] * 3


def test_argument_errors_have_names_of_their_own():
    with pytest.raises(gm.InvalidTypeError) as info:
        gm.FakeGang(CPU, size=2).broadcast(torch.zeros(1), source_rank="0")  # type: ignore[arg-type]
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    assert type(info.value).__name__ == "InvalidTypeError"


@given(size=st.one_of(NOT_INTS, st.integers(max_value=0)), rank=st.integers())
def test_fake_gang_constructor(size, rank):
    rejects(lambda: gm.FakeGang(CPU, rank=0, size=size), "size")
    assume(not 0 <= rank < 4)
    rejects(lambda: gm.FakeGang(CPU, rank=rank, size=4), "rank")


NOT_FACTORS_OF_8 = st.one_of(
    NOT_INTS.filter(lambda v: v is not None),
    st.integers(max_value=0),
    st.integers(3, 100).filter(lambda v: v != 4 and v != 8),
)


@given(value=NOT_FACTORS_OF_8)
def test_parallel_and_fsdp_sizes(value):
    root = gm.FakeGang(CPU, rank=0, size=8)
    rejects(lambda: gm.create_parallel_gangs(root, tp_size=value), "tp_size")
    gangs = gm.create_parallel_gangs(root, tp_size=1)
    rejects(lambda: gm.create_fsdp_gangs(gangs, intra_node_size=value), "intra_node_size")


@given(
    dim=st.sampled_from(gm.DIM_NAMES),
    value=st.one_of(NOT_INTS, st.integers(max_value=-2), st.just(0), st.integers(3, 7)),
)
def test_create_gangs_sizes(dim, value):
    root = gm.FakeGang(CPU, rank=0, size=8)
    rejects(
        lambda: gm.create_gangs(
            root, **{dim: value, "dp_shard": 1 if dim != "dp_shard" else value}
        ),
        dim,
    )


@given(
    dim=st.sampled_from(["ep", "etp"]),
    value=st.one_of(NOT_INTS, st.integers(max_value=0), st.integers(3, 7)),
)
def test_expert_sizes(dim, value):
    root = gm.FakeGang(CPU, rank=0, size=8)
    rejects(lambda: gm.create_gangs(root, tp=2, ep=2, **{dim: value}), dim)


@given(
    order=st.one_of(
        st.permutations(["pp", "dp_replicate", "dp_shard", "cp", "xx"]),
        st.lists(st.sampled_from(gm.DIM_NAMES), max_size=6),
        st.text(max_size=8),
    )
)
def test_orders(order):
    assume(sorted(order) != sorted(gm.DIM_NAMES) if isinstance(order, list) else True)
    rejects(lambda: gm.MeshTopology(8, order=order), "order")


VARIABLES = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"]


@given(
    name=st.sampled_from(VARIABLES),
    value=st.one_of(st.text(max_size=4), st.integers(-5, -1).map(str)),
)
def test_launch_environments(name, value):
    env = {
        "RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "2950",
    }
    assume(not value.strip().isdigit())
    env[name] = value
    if value == "" and name not in ("RANK", "WORLD_SIZE"):
        return  # an empty optional variable means "not set"
    rejects(lambda: read_launch_environment(env), name)


@given(rank=st.integers(4, 100))
def test_ranks_beyond_the_world_in_the_environment(rank):
    env = {"RANK": str(rank), "WORLD_SIZE": "4", "MASTER_ADDR": "h"}
    rejects(lambda: read_launch_environment(env), "RANK")
    rejects(
        lambda: read_launch_environment({**env, "RANK": "0", "LOCAL_RANK": str(rank)}), "LOCAL_RANK"
    )


@given(world=st.integers(max_value=0), rank=st.integers())
def test_simulate_gangs_arguments(world, rank):
    with pytest.raises(ValueError, match="world_size"):
        with simulate_gangs(world, 0):
            pass
    assume(not 0 <= rank < 4)
    with pytest.raises(ValueError, match="rank"):
        with simulate_gangs(4, rank):
            pass


@given(
    timeout=st.one_of(
        st.integers(), st.floats(), st.just(timedelta(0)), st.just(timedelta(seconds=-1))
    )
)
def test_timeouts(timeout):
    rejects(lambda: gm.setup_root_gang(timeout=timeout), "timeout")
    rejects(lambda: gm.create_gangs(gm.FakeGang(CPU), timeout=timeout), "timeout")


@given(
    value=st.one_of(
        st.text(max_size=3), st.none(), st.booleans(), st.lists(st.integers(), max_size=2)
    )
)
def test_metric_dicts(value):
    rejects(lambda: gm.all_reduce_dict(gm.FakeGang(CPU), {"m": value}), "data['m']")
    rejects(lambda: gm.all_reduce_dict(gm.FakeGang(CPU), [("m", 1)]), "data")  # type: ignore[arg-type]
