"""Helpers over a gang: flags, sums, metric dicts and objects."""

import pytest
import torch

from gangmesh import (
    FakeGang,
    ReduceOperation,
    all_gather_objects,
    all_reduce_dict,
    all_sum,
    broadcast_flag,
)

CPU = torch.device("cpu")


def test_all_sum_of_a_python_number_over_a_simulated_gang():
    assert all_sum(FakeGang(CPU, size=4), 2.5).item() == 10.0
    value = torch.tensor([1, 2])
    assert all_sum(FakeGang(CPU, size=3), value).tolist() == [3, 6]
    assert value.tolist() == [1, 2], "the caller's tensor is left alone"


def test_broadcast_flag_returns_a_bool():
    assert broadcast_flag(FakeGang(CPU, size=2), True, source_rank=1) is True
    assert broadcast_flag(FakeGang(CPU), False) is False


def test_all_reduce_dict_keeps_types_dtypes_and_shapes():
    data = {
        "loss": 1.5,
        "count": 3,
        "grad": torch.tensor([[1.0, 2.0]], dtype=torch.float16),
        "tokens": torch.tensor([4, 5]),
    }
    out = all_reduce_dict(FakeGang(CPU, size=2), data)
    assert out["loss"] == 3.0 and isinstance(out["loss"], float)
    assert out["count"] == 6 and isinstance(out["count"], int)
    assert out["grad"].dtype == torch.float16 and out["grad"].tolist() == [[2.0, 4.0]]
    assert out["tokens"].dtype == torch.int64 and out["tokens"].tolist() == [8, 10]
    assert data["tokens"].tolist() == [4, 5]


def test_all_reduce_dict_with_max_and_bad_values():
    assert all_reduce_dict(FakeGang(CPU, size=4), {"m": 2.0}, ReduceOperation.MAX) == {"m": 2.0}
    with pytest.raises(TypeError, match=r"data\[.s.\]: expected a real number or tensor"):
        all_reduce_dict(FakeGang(CPU), {"s": "text"})


def test_all_gather_objects_returns_one_object_per_rank():
    obj = {"rank": 1, "nested": [1, (2, 3)]}
    assert all_gather_objects(FakeGang(CPU, rank=1, size=3), obj) == [obj, obj, obj]


def test_all_reduce_dict_of_nothing_and_of_large_integers():
    assert all_reduce_dict(FakeGang(CPU, size=2), {}) == {}
    out = all_reduce_dict(FakeGang(CPU, size=2), {"n": 2**52, "t": torch.tensor([2**52])})
    assert out["n"] == 2**53 and out["t"].tolist() == [2**53]
