"""FakeGang simulates a gang of identical processes exactly, and validates like a real one."""

import re

import pytest
import torch

from gangmesh import FakeGang, ReduceOperation

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (ReduceOperation.SUM, [8.0, -4.0]),
        (ReduceOperation.PRODUCT, [16.0, 1.0]),
        (ReduceOperation.MEAN, [2.0, -1.0]),
        (ReduceOperation.MIN, [2.0, -1.0]),
        (ReduceOperation.MAX, [2.0, -1.0]),
    ],
)
def test_all_reduce_is_what_four_identical_processes_would_get(op, expected):
    gang = FakeGang(CPU, rank=3, size=4)
    tensor = torch.tensor([2.0, -1.0])
    gang.all_reduce(tensor, op)
    assert tensor.tolist() == expected


@pytest.mark.parametrize("op", [ReduceOperation.SUM, ReduceOperation.PRODUCT])
def test_a_parameter_is_reduced_as_a_process_group_writes_it(op):
    # as on a real gang of that size (a gang of one in a job stands in for a dimension)
    parameter = torch.nn.Parameter(torch.tensor([2.0]))
    FakeGang(CPU, size=3).all_reduce(parameter, op)
    assert parameter.item() == (6.0 if op is ReduceOperation.SUM else 8.0)
    assert parameter.requires_grad and parameter.grad_fn is None


def test_all_gather_accepts_stacked_concatenated_and_flat_outputs():
    gang = FakeGang(CPU, rank=1, size=3)
    inp = torch.tensor([[1, 2], [3, 4]])
    for shape in [(3, 2, 2), (6, 2), (12,)]:
        out = torch.zeros(shape, dtype=inp.dtype)
        gang.all_gather(out, inp)
        assert out.view(3, 2, 2).tolist() == [inp.tolist()] * 3


def test_all_gather_to_list_fills_every_slot():
    gang = FakeGang(CPU, size=2)
    outs = [torch.zeros(2), torch.zeros(2)]
    gang.all_gather_to_list(outs, torch.tensor([5.0, 6.0]))
    assert [o.tolist() for o in outs] == [[5.0, 6.0], [5.0, 6.0]]


def test_broadcast_from_any_valid_source_keeps_the_tensor():
    gang = FakeGang(CPU, rank=0, size=4)
    tensor = torch.tensor([7.0])
    gang.broadcast(tensor, source_rank=3)
    objects = [{"a": [1, 2]}]
    gang.broadcast_objects(objects, source_rank=2)
    assert tensor.tolist() == [7.0]
    assert objects == [{"a": [1, 2]}]


def test_create_gang_gives_position_in_ranks_or_none():
    gang = FakeGang(CPU, rank=5, size=8)
    sub = gang.create_gang([7, 5, 1])
    assert sub is not None
    assert (sub.rank, sub.size) == (1, 3)
    assert gang.create_gang([0, 1]) is None
    assert gang.make_gang([5]) is not None


@pytest.mark.parametrize(
    ("ranks", "needle"),
    [([0, 0], "duplicates [0]"), ([0, 4], "ranks[1]"), ([-1], "ranks[0]"), ([], "at least one")],
)
def test_create_gang_rejects_bad_ranks(ranks, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        FakeGang(CPU, size=4).create_gang(ranks)


def test_rank_equal_to_size_is_rejected():
    with pytest.raises(ValueError, match=r"ranks\[0\]: expected an int in \[0, 4\), got 4"):
        FakeGang(CPU, size=4).create_gang([4])


@pytest.mark.parametrize(("rank", "size"), [(0, 0), (2, 2), (-1, 2)])
def test_constructor_rejects_bad_rank_or_size(rank, size):
    with pytest.raises(ValueError, match=r"rank|size"):
        FakeGang(CPU, rank=rank, size=size)


def test_source_rank_out_of_range_names_the_argument():
    gang = FakeGang(CPU, size=2)
    with pytest.raises(ValueError, match=r"source_rank: expected an int in \[0, 2\), got 2"):
        gang.broadcast(torch.zeros(1), source_rank=2)
    with pytest.raises(ValueError, match="source_rank"):
        gang.broadcast_objects([1], source_rank=-1)


def test_wrong_shapes_types_and_devices_are_rejected():
    gang = FakeGang(CPU, size=2)
    with pytest.raises(ValueError, match=r"output_tensor: expected shape \[2, 3\]"):
        gang.all_gather(torch.zeros(3, 3), torch.zeros(3))
    with pytest.raises(TypeError, match="output_tensor: expected dtype"):
        gang.all_gather(torch.zeros(2, 3, dtype=torch.int64), torch.zeros(3))
    with pytest.raises(ValueError, match="output_tensors: expected 2 tensors"):
        gang.all_gather_to_list([torch.zeros(3)], torch.zeros(3))
    with pytest.raises(ValueError, match=r"output_tensors\[1\]: expected shape \[3\]"):
        gang.all_gather_to_list([torch.zeros(3), torch.zeros(4)], torch.zeros(3))
    with pytest.raises(TypeError, match="op: expected a ReduceOperation"):
        gang.all_reduce(torch.zeros(1), "sum")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"tensor: ReduceOperation\.MEAN needs a floating-point"):
        gang.all_reduce(torch.zeros(1, dtype=torch.int64), ReduceOperation.MEAN)
    with pytest.raises(TypeError, match=r"tensor: expected a torch\.Tensor"):
        gang.all_reduce([1.0], ReduceOperation.SUM)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tensor: expected a tensor on the gang's device cpu"):
        gang.all_reduce(torch.zeros(1, device="meta"), ReduceOperation.SUM)
    with pytest.raises(TypeError, match="objects: expected a list"):
        gang.broadcast_objects((1, 2))  # type: ignore[arg-type]


def test_fake_gang_has_no_process_group():
    gang = FakeGang(CPU)
    assert not gang.supports_process_group
    with pytest.raises(NotImplementedError):
        gang.as_process_group()
    gang.close()
    gang.close()
