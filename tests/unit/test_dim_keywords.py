"""A misspelt dimension keyword or a size of the wrong type: a TypeError that says what to write."""

from __future__ import annotations

import pytest
import torch

import gangmesh as gm
from gangmesh.plan.dim_keywords import closest


@pytest.mark.parametrize(
    ("call", "where", "meant"),
    [
        (lambda: gm.MeshTopology(8, dp_sharding=2), "MeshTopology", "dp_shard"),
        (lambda: gm.MeshTopology(8, tensor_parallel=2), "MeshTopology", "tp"),
        (
            lambda: gm.create_gangs(gm.FakeGang(torch.device("cpu")), tensor_parallel=2),
            "create_gangs",
            "tp",
        ),
        (
            lambda: gm.create_gangs(gm.FakeGang(torch.device("cpu")), pipeline_parallel=2),
            "create_gangs",
            "pp",
        ),
    ],
)
def test_an_unknown_dimension_keyword_names_the_valid_ones_and_the_closest(call, where, meant):
    with pytest.raises(TypeError) as raised:
        call()
    message = str(raised.value)
    assert message.startswith(f"{where}: unknown keyword ")
    assert "pp, dp_replicate, dp_shard, cp, tp, ep, etp" in message
    assert message.endswith(f"did you mean {meant}=?")


def test_a_keyword_like_no_dimension_suggests_none():
    with pytest.raises(TypeError, match=r"unknown keyword zzz=; expected one of [^?]*$"):
        gm.MeshTopology(8, zzz=2)


@pytest.mark.parametrize("size", ["2", 2.0])
def test_a_size_of_the_wrong_type_is_a_type_error_naming_the_argument(size):
    with pytest.raises(TypeError, match=r"^tp: expected a positive int or -1, got "):
        gm.MeshTopology(8, tp=size)


@pytest.mark.parametrize(
    ("name", "meant"), [("tensor", "tp"), ("pipeline", "pp"), ("context", "cp"), ("world", None)]
)
def test_one_word_naming_a_dimension_suggests_its_keyword(name, meant):
    assert closest(name, ["pp", "dp_replicate", "dp_shard", "cp", "tp", "ep", "etp"]) == meant
