"""Gangs take another library's reduce operations (fairseq2's enum) by their member names."""

import re
from enum import Enum

import pytest
import torch

from gangmesh import FakeGang, ReduceOperation
from gangmesh.runtime.gang import as_reduce_operation
from gangmesh.runtime.ops import all_reduce_dict

CPU = torch.device("cpu")


class OtherReduceOperation(Enum):
    """fairseq2 0.8.1's members, numbered otherwise: only the names may match them up."""

    MAX = 1
    MIN = 2
    PRODUCT = 3
    MEAN = 4
    SUM = 5


class Unrelated(Enum):
    AVG = 1


@pytest.mark.parametrize("own", list(ReduceOperation))
def test_a_member_of_another_enum_reduces_as_gangmeshs_member_of_its_name(own):
    gang = FakeGang(CPU, rank=1, size=3)
    by_name, expected = torch.tensor([2.0, -1.0]), torch.tensor([2.0, -1.0])
    gang.all_reduce(by_name, OtherReduceOperation[own.name])
    gang.all_reduce(expected, own)
    assert by_name.tolist() == expected.tolist()
    out, expected_out = torch.empty(2), torch.empty(2)
    gang.reduce_scatter(out, torch.arange(6.0), OtherReduceOperation[own.name])
    gang.reduce_scatter(expected_out, torch.arange(6.0), own)
    assert out.tolist() == expected_out.tolist()
    assert as_reduce_operation(OtherReduceOperation[own.name]) is own


def test_all_reduce_dict_takes_them_too():
    gang = FakeGang(CPU, size=4)
    assert all_reduce_dict(gang, {"n": 3}, OtherReduceOperation.MEAN) == {"n": 3.0}
    assert all_reduce_dict(gang, {"n": 3}, OtherReduceOperation.SUM) == {"n": 12}


@pytest.mark.parametrize("op", [Unrelated.AVG, "SUM", 1, ["SUM"], None])
def test_anything_else_is_refused_naming_the_argument_and_the_names(op):
    gang = FakeGang(CPU, size=2)
    expected = (
        r"^op: expected a ReduceOperation, or a member of an enum named like one of its "
        r"\(SUM, MEAN, PRODUCT, MIN, MAX\), got "
    )
    with pytest.raises(TypeError, match=expected + re.escape(repr(op))):
        gang.all_reduce(torch.zeros(1), op)
    with pytest.raises(ValueError, match=expected):
        gang.reduce_scatter(torch.zeros(1), torch.zeros(2), op)


def test_mean_of_integers_is_refused_whichever_enum_asks():
    gang = FakeGang(CPU, size=2)
    with pytest.raises(TypeError, match=r"^tensor: ReduceOperation\.MEAN needs a floating-point"):
        gang.all_reduce(torch.zeros(1, dtype=torch.int64), OtherReduceOperation.MEAN)
