"""gangmesh plan: the table, JSON and SVG of a layout; one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from gangmesh.cli import main
from gangmesh.topology import MeshTopology


def test_table_lists_each_dimension_the_rank_and_locality(capsys):
    code = main(["plan", "--world-size", "16", "--tp", "2", "--pp", "2", "--rank", "5",
                 "--ranks-per-node", "8"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "tp                 2        8  [0,1] [2,3] [4,5] [6,7] ..." in out
    assert "dp                 4        4  [0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]" in out
    assert "rank 5: pp=0 dp_replicate=0 dp_shard=2 cp=0 tp=1" in out
    assert "every gang is node-local" in out


def test_table_reports_a_tp_group_crossing_nodes(capsys):
    assert main(["plan", "--world-size", "12", "--tp", "4", "--ranks-per-node", "6"]) == 0
    assert (
        "tp: 1 of 3 groups span nodes, e.g. [4, 5, 6, 7] on nodes [0, 1]" in capsys.readouterr().out
    )


def test_json_has_every_group_of_every_dimension(tmp_path):
    out = tmp_path / "plan.json"
    assert main(["plan", "--world-size", "8", "--dp-replicate", "2", "--format", "json",
                 "--output", str(out), "--rank", "3", "--ranks-per-node", "4"]) == 0  # fmt: skip
    document = json.loads(out.read_text())
    plan = MeshTopology(8, dp_replicate=2)
    assert document["dims"] == plan.dims
    for dim, groups in document["groups"].items():
        assert groups == plan.groups(dim).tolist()
    assert document["rank"]["groups"]["dp_shard"] == [0, 1, 2, 3]
    assert document["locality_findings"] == []


def test_svg_draws_one_cell_per_rank_and_frames_tp_groups(tmp_path):
    out = tmp_path / "plan.svg"
    assert main(["plan", "--world-size", "8", "--tp", "2", "--ranks-per-node", "4",
                 "--format", "svg", "--output", str(out)]) == 0  # fmt: skip
    root = ET.fromstring(out.read_text())
    ns = {"s": "http://www.w3.org/2000/svg"}
    titles = [t.text for t in root.iterfind(".//s:g/s:title", ns)]
    assert titles == [f"rank {r}: dp group {r % 2}" for r in range(8)]
    frames = [r for r in root.iterfind("s:rect", ns) if r.get("fill") == "none"]
    assert len(frames) == 4
    assert sorted(t.text for t in root.iterfind("s:text", ns) if t.text.startswith("node")) == [
        "node 0",
        "node 1",
    ]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (
            ["--world-size", "32", "--tp", "3"],
            "tp: tp=3 does not divide world_size 32, so dp_shard cannot",
        ),
        (["--world-size", "8", "--tp", "-1"], "at most one size may be -1"),
        (["--world-size", "8", "--rank", "8"], "rank: expected a rank in [0, 8), got 8"),
        (["--world-size", "0"], "world_size: expected an int >= 1, got 0"),
        (["--world-size", "4096", "--format", "svg"], "at most 1024 ranks"),
        (["--world-size", "8", "--ranks-per-node", "0"], "--ranks-per-node must be >= 1"),
        (["--world-size", "eight"], "argument --world-size: invalid int value"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_code_2(args, needle):
    run = subprocess.run(
        [sys.executable, "-m", "gangmesh.cli", "plan", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert run.stderr.startswith("gangmesh plan: error: ")
    assert needle in run.stderr


def test_help_works():
    run = subprocess.run(
        [sys.executable, "-m", "gangmesh.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0 and "plan" in run.stdout
