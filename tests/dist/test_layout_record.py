"""Every group gangmesh creates is described, as torch shows it, and the layout record maps
torch's group names to gangs, the same on every rank, and reads back equal (4 gloo ranks)."""

from __future__ import annotations

import socket

import pytest

from tests.dist.launch import every_rank_results

pytestmark = pytest.mark.dist


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("record")
    return every_rank_results("layout_record.py", 4, out, timeout=180)


def test_torch_shows_each_group_described_by_its_gang_and_members(results):
    # pp=2, tp=2: tp [0,1] [2,3]; pp [0,2] [1,3]; dp of size 1; efsdp = 1, ep = 1, so edp = 1
    expected = {0: {"tp": "0,1", "pp": "0,2"}, 1: {"tp": "0,1", "pp": "1,3"},
                2: {"tp": "2,3", "pp": "0,2"}, 3: {"tp": "2,3", "pp": "1,3"}}  # fmt: skip
    for rank, got in results.items():
        for name, members in expected[rank].items():
            assert got["shown"][name]["group_desc"] == f"gangmesh:{name}:{members}"
    assert results[0]["shown"]["tp"]["group_name"] == results[1]["shown"]["tp"]["group_name"]
    assert results[0]["shown"]["tp"]["group_name"] != results[2]["shown"]["tp"]["group_name"]


def test_the_record_lists_every_group_with_the_name_torch_gave_it(results):
    record = results[0]["record"]
    assert all(r["record"] == record for r in results.values()), "the same on every rank"
    assert record["world_size"] == 4 and record["sizes"]["pp"] == 2
    assert record["ranks"] == [
        {"rank": r, "host": socket.gethostname(), "domain": "", "rack": ""} for r in range(4)
    ]
    tp = record["gangs"]["tp"]
    assert [g["members"] for g in tp] == [[0, 1], [2, 3]]
    assert [g["group_name"] for g in tp] == [
        results[0]["shown"]["tp"]["group_name"],
        results[2]["shown"]["tp"]["group_name"],
    ]
    assert {(g["backend"], g["timeout_s"]) for g in tp} == {("gloo", 47.0)}
    assert [g["members"] for g in record["gangs"]["pp"]] == [[0, 2], [1, 3]]
    (dp_of_0, *_) = record["gangs"]["dp"]
    assert dp_of_0 == {"members": [0], "group_name": None, "description": None,
                       "backend": None, "timeout_s": None}  # fmt: skip
    name = results[3]["shown"]["pp"]["group_name"]
    assert record["group_names"][name]["members"] == [1, 3]
    assert "pp" in record["group_names"][name]["gangs"]
    assert record["group_names"][name]["description"] == "gangmesh:pp:1,3"


def test_the_record_reads_back_equal(results):
    for got in results.values():
        assert got["read_back"] == got["record"]
