"""A misspelt dimension keyword or a size of the wrong type: a TypeError that says what to write."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch

import gangmesh as gm
from gangmesh.assembly.hand_built import GANG_DEFAULTS, GangKeywords
from gangmesh.plan.dim_keywords import closest
from gangmesh.plan.dims import FACTS, GANG_NAMES, ROOT, SIZE_NAMES
from gangmesh.plan.layout import LAYOUT_DEFAULTS, Layout, LayoutKeywords


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


def test_the_layout_keywords_are_the_registrys_sizes_and_the_layouts_fields():
    keywords = list(LayoutKeywords.__annotations__)
    assert keywords == [*map(str, SIZE_NAMES), "order", "expert"]
    assert keywords == [f.name for f in dataclasses.fields(Layout)]
    assert set(LAYOUT_DEFAULTS) == set(keywords)
    assert all(LAYOUT_DEFAULTS[dim] == FACTS[dim].default for dim in SIZE_NAMES)


@pytest.mark.parametrize("function", [Layout, gm.MeshTopology, gm.create_gangs])
def test_a_signature_shows_every_layout_keyword_with_its_default(function):
    parameters = inspect.signature(function).parameters
    shown = {name: p.default for name, p in parameters.items() if name in LAYOUT_DEFAULTS}
    assert shown == LAYOUT_DEFAULTS
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in shown)
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def test_the_gangs_keywords_are_root_and_the_registrys_gangs():
    assert list(GangKeywords.__annotations__) == [ROOT, *GANG_NAMES]
    parameters = inspect.signature(gm.Gangs).parameters
    assert [name for name in parameters if name in GangKeywords.__annotations__] == [
        ROOT,
        *GANG_NAMES,
    ]
    assert {name for name, p in parameters.items() if p.default is None} >= set(GANG_DEFAULTS)


def test_an_unknown_gang_keyword_names_the_valid_ones():
    gang = gm.FakeGang(torch.device("cpu"))
    with pytest.raises(TypeError, match=r"^Gangs: unknown keyword dq=; .* did you mean dp=\?$"):
        gm.Gangs(root=gang, dp=gang, rdp=gang, sdp=gang, tp=gang, pp=gang, dq=gang)
