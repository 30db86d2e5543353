"""Parts of a job: bad sizes, names, bridges, layouts and pairings are refused naming the
argument; gangmesh plan --part shows each part in global ranks as a table, JSON or SVG."""

from __future__ import annotations

import doctest
import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from gangmesh.plan import multipart, parts, parts_locality
from gangmesh.plan.dims import ALIASES, ROOT, Dim
from gangmesh.plan.layout import Layout
from gangmesh.plan.multipart import MultiPartPlan
from gangmesh.plan.parts import RESERVED_NAMES, PartsPlan
from gangmesh.tools import parts_command
from gangmesh.tools.cli import main
from tests.unit.test_cli_plan import NO_TORCH

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(
    ("world", "sizes", "error", "said"),
    [
        (8, {"a": 4, "b": 2}, ValueError, "sizes: expected sizes that add up to world_size 8, got a=4 + b=2 = 6"),
        (8, {"a": -1, "b": -1}, ValueError, "sizes: at most one size may be -1"),
        (8, {"a": 0, "b": 8}, ValueError, "sizes['a']: expected a positive int or -1, got 0"),
        (8, {"a": -3, "b": 8}, ValueError, "sizes['a']: expected a positive int or -1, got -3"),
        (8, {"a": 4.0, "b": 4}, TypeError, "sizes['a']: expected a positive int or -1, got 4.0"),
        (8, {"a": True, "b": 7}, TypeError, "sizes['a']: expected a positive int or -1"),
        (8, {}, ValueError, "sizes: expected at least one part, got none"),
        (8, [], ValueError, "sizes: expected at least one part, got none"),
        (8, {"a-b": 8}, ValueError, "sizes: expected part names that are Python identifiers"),
        (8, {"lambda": 8}, ValueError, "got 'lambda'"),
        (8, {"tp": 8}, ValueError, "sizes: part name 'tp' is the name of a dimension or gang"),
        (8, {"sdp": 8}, ValueError, "part name 'sdp'"),
        (8, {ROOT: 8}, ValueError, f"part name '{ROOT}'"),
        (8, [("a", 4), ("a", 4)], ValueError, "sizes: expected each part named once, got a twice"),
        (8, [("a", 4, 1)], TypeError, "sizes: expected a mapping or (name, size) pairs"),
        (8, "a", TypeError, "sizes: expected a mapping or (name, size) pairs"),
        (8, {"a": 8, "b": -1}, ValueError, "leaving none for b=-1"),
        (0, {"a": 0}, ValueError, "world_size: expected an int >= 1, got 0"),
        ("8", {"a": 8}, TypeError, "world_size: expected an int"),
    ],
)  # fmt: skip
def test_bad_sizes_are_refused_naming_the_argument(world, sizes, error, said):
    with pytest.raises(error) as raised:
        PartsPlan(world, sizes)
    assert said in str(raised.value)


def test_every_dimension_and_alias_of_the_registry_is_reserved():
    assert {dim.value for dim in Dim} | set(ALIASES) | {ROOT} <= RESERVED_NAMES
    for name in RESERVED_NAMES:
        with pytest.raises(ValueError, match="is the name of a dimension or gang"):
            PartsPlan(4, {name: 4})


def test_parts_take_consecutive_ranks_in_the_order_given_and_infer_the_minus_one():
    plan = PartsPlan(10, [("trainer", 6), ("reward", -1), ("generator", 2)])
    assert plan.names == ("trainer", "reward", "generator")
    assert plan.sizes == {"trainer": 6, "reward": 2, "generator": 2}
    assert [plan.offset(name) for name in plan.names] == [0, 6, 8]
    assert plan.ranks("generator") == [8, 9]
    assert [plan.part_of(rank) for rank in (0, 5, 6, 9)] == [
        "trainer",
        "trainer",
        "reward",
        "generator",
    ]
    assert plan == PartsPlan(10, {"trainer": 6, "reward": 2, "generator": 2})
    assert plan != PartsPlan(10, {"reward": 2, "trainer": 6, "generator": 2}), "order matters"
    assert repr(plan) == "PartsPlan(10, trainer=6, reward=2, generator=2)"
    with pytest.raises(ValueError, match=r"rank: expected a rank in \[0, 10\), got 10"):
        plan.part_of(10)
    with pytest.raises(ValueError, match="name: unknown part 'critic'; expected one of trainer"):
        plan.ranks("critic")


@pytest.mark.parametrize(
    ("asked", "error", "said"),
    [
        ({}, ValueError, "ranks_by_part: expected ranks of at least one part of trainer, generator"),
        ({"critic": [1]}, ValueError, "ranks_by_part: unknown part critic; expected parts of trainer, generator"),
        ({"trainer": [5]}, ValueError, "trainer: rank 5 is not a rank of part trainer; expected ranks 0-3"),
        ({"generator": [4, 4]}, ValueError, "generator: expected each rank once, got [4] more than once"),
        ({"trainer": []}, ValueError, "trainer: expected at least one rank of the part, got none"),
        ({"trainer": 1}, TypeError, "trainer: expected a sequence of global ranks, got 1"),
        ({"trainer": [0.0]}, TypeError, "trainer[0]: expected an int, got 0.0"),
    ],
)  # fmt: skip
def test_bad_bridges_are_refused_naming_the_part(asked, error, said):
    plan = PartsPlan(8, {"trainer": 4, "generator": 4})
    with pytest.raises(error) as raised:
        plan.bridge_ranks(**asked)
    assert said in str(raised.value)


def test_a_bridge_takes_numpy_ranks_and_sorts_them():
    plan = PartsPlan(8, {"trainer": 4, "generator": 4})
    assert plan.bridge_ranks(generator=np.array([7, 4]), trainer=[2]) == (2, 4, 7)


def test_layouts_that_do_not_fit_their_part_are_refused_naming_it():
    plan = PartsPlan(8, {"trainer": 4, "generator": 4})
    with pytest.raises(ValueError, match="layouts: unknown part critic; expected parts of"):
        MultiPartPlan(plan, {"critic": Layout()})
    with pytest.raises(ValueError, match=r"layouts\['generator'\]: part generator has 4 ranks: tp"):
        MultiPartPlan(plan, {"generator": Layout(tp=3)})
    with pytest.raises(TypeError, match=r"layouts\['trainer'\]: expected a Layout"):
        MultiPartPlan(plan, {"trainer": {"tp": 2}})  # type: ignore[dict-item]


def test_a_part_without_a_layout_is_fully_sharded_and_groups_are_global():
    plan = MultiPartPlan(PartsPlan(8, {"trainer": 4, "generator": 4}), {"trainer": Layout(tp=2)})
    assert plan.plan("generator").dims["dp_shard"] == 4
    assert plan.groups("generator", "dp").tolist() == [[4, 5, 6, 7]]
    assert plan.groups("trainer", "tp").tolist() == [[0, 1], [2, 3]]
    assert plan.group_of(6, "sdp") == [4, 5, 6, 7]
    assert plan.coordinate(6)["dp_shard"] == 2


def test_pairing_along_a_flattened_dimension_goes_by_the_place_in_its_group():
    plan = MultiPartPlan(
        PartsPlan(8, {"trainer": 4, "generator": 4}),
        {
            "trainer": Layout(dp_shard=2, tp=2),
            "generator": Layout(dp_replicate=2, dp_shard=1, tp=2),
        },
    )
    assert plan.pair_by_coordinate("dp", where={"generator": {"tp": 0}}) == [
        {"trainer": [0, 1], "generator": [4]},
        {"trainer": [2, 3], "generator": [6]},
    ]


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"dim": "dp_sharded"}, "dim: expected one dimension of the mesh"),
        ({"dim": "tensor"}, "dim: expected one dimension of the mesh"),
        ({"dim": "dp_shard"}, "dim: dp_shard has different sizes in the parts paired: trainer 2, generator 1"),
        ({"dim": "tp", "parts": ["critic"]}, "parts: unknown part 'critic'"),
        ({"dim": "tp", "parts": ["trainer", "trainer"]}, "parts: expected distinct part names"),
        ({"dim": "tp", "where": {"generator": {"tp": 0}}}, "where['generator']: cannot fix tp, the dimension paired"),
        ({"dim": "tp", "parts": ["trainer"], "where": {"generator": {}}}, "where: part generator is not paired"),
        ({"dim": "tp", "where": {"trainer": {"dp_shard": 2}}}, "where['trainer']['dp_shard']: expected a coordinate in [0, 2), got 2"),
        ({"dim": "tp", "where": {"trainer": {"shard": 0}}}, "where['trainer']: expected one dimension of the mesh"),
    ],
)  # fmt: skip
def test_bad_pairings_are_refused_naming_the_argument(kwargs, said):
    plan = MultiPartPlan(
        PartsPlan(8, {"trainer": 4, "generator": 4}),
        {"trainer": Layout(tp=2), "generator": Layout(tp=2, dp_replicate=2)},
    )
    with pytest.raises(ValueError) as raised:
        plan.pair_by_coordinate(**kwargs)
    assert said in str(raised.value)


def test_pairing_a_subset_of_parts_in_the_order_asked():
    plan = MultiPartPlan(
        PartsPlan(12, {"trainer": 4, "reward": 4, "generator": 4}),
        {"trainer": Layout(tp=2), "generator": Layout(tp=2)},
    )
    pairs = plan.pair_by_coordinate("tp", parts=["generator", "trainer"])
    assert pairs == [
        {"generator": [8, 10], "trainer": [0, 2]},
        {"generator": [9, 11], "trainer": [1, 3]},
    ]


def test_a_part_sharing_a_node_is_a_root_finding_in_global_ranks():
    plan = MultiPartPlan(
        PartsPlan(12, {"trainer": 4, "generator": 8}), {"generator": Layout(tp=4, dp_shard=2)}
    )
    findings = plan.check_locality(6)
    (shared,) = findings["trainer"]
    assert (shared.dim, shared.group, shared.nodes, shared.avoidable) == (
        ROOT,
        [0, 1, 2, 3],
        [0],
        True,
    )
    assert "shares node [0] with part generator" in shared.message
    root, tp = findings["generator"]
    assert root.dim == ROOT and tp.dim == "tp"
    assert (tp.group, tp.nodes) == ([4, 5, 6, 7], [0, 1]), "the tp group at ranks 4-7 crosses"
    assert tp.fix == {"tp": 2, "dp_shard": -1}
    with pytest.raises(ValueError, match="ranks_per_node: expected a factor of world_size 12"):
        plan.check_locality(5)


@pytest.mark.parametrize("module", [parts, multipart, parts_locality, parts_command])
def test_the_examples_in_the_docstrings_hold(module):
    result = doctest.testmod(module)
    assert result.failed == 0
    assert result.attempted > 0 or module is parts_locality


# gangmesh plan --part


def test_the_table_shows_each_part_in_global_ranks(capsys):
    args = ["plan", "--part", "trainer=4:tp=2", "--part", "rollout=4:tp=2,dp_replicate=2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    trainer, rollout = out.split("\n\n")
    assert trainer.startswith("part trainer: ranks 0-3 of 8\nMeshTopology(4, ")
    assert rollout.startswith(
        "part rollout: ranks 4-7 of 8\nMeshTopology(4, pp=1, dp_replicate=2, "
    )
    assert "tp                 2        2  [4,5] [6,7]" in rollout
    assert "dp_replicate       2        2  [4,6] [5,7]" in rollout


def test_the_rank_and_locality_are_shown_in_the_part_that_holds_them(capsys):
    args = ["plan", "--part", "a=6:tp=2", "--part", "b=-1:tp=2", "--world-size", "12",
            "--ranks-per-node", "4", "--rank", "7"]  # fmt: skip
    assert main(args) == 0
    a, b = capsys.readouterr().out.split("\n\n")
    assert "rank 7" not in a
    assert "rank 7: pp=0 dp_replicate=0 dp_shard=0 cp=0 tp=1" in b
    assert "  tp            rank 1 in [6,7]" in b
    assert "4 ranks per node (2 nodes)" in b
    assert "  - to fix: root: part b (ranks 6-11) shares node [1] with part a" in b
    assert main([*args, "--strict"]) == 1
    assert (
        capsys.readouterr().err
        == "gangmesh plan: --strict: locality findings to fix: a root, b root\n"
    )


def test_json_lists_each_part_with_its_plan_in_global_ranks(capsys):
    assert main(["plan", "--part", "trainer=4:tp=2", "--part", "rollout=4:tp=2,dp_replicate=2",
                 "--format", "json", "--rank", "5", "--ranks-per-node", "4"]) == 0  # fmt: skip
    document = json.loads(capsys.readouterr().out)
    assert document["world_size"] == 8 and document["rank"] == {"rank": 5, "part": "rollout"}
    assert [(p["name"], p["offset"], p["size"]) for p in document["parts"]] == [
        ("trainer", 0, 4),
        ("rollout", 4, 4),
    ]
    rollout = document["parts"][1]["plan"]
    assert rollout["groups"]["tp"] == [[4, 5], [6, 7]]
    assert rollout["groups"]["dp_replicate"] == [[4, 6], [5, 7]]
    assert rollout["rank"]["groups"]["tp"] == [4, 5] and rollout["locality_findings"] == []
    assert "rank" not in document["parts"][0]["plan"]


def test_svg_is_one_document_with_each_part_labelled_in_global_ranks(tmp_path):
    out = tmp_path / "parts.svg"
    assert main(["plan", "--part", "a=6:tp=2", "--part", "b=10:tp=2", "--ranks-per-node", "4",
                 "--rank", "7", "--format", "svg", "--output", str(out)]) == 0  # fmt: skip
    root = ET.parse(out).getroot()
    assert root.tag == f"{SVG}svg"
    drawn = root.findall(f"{SVG}g[@class='part']")
    assert [g.get("data-part") for g in drawn] == ["a", "b"]
    assert drawn[1].find(f"{SVG}text").text == "part b: ranks 6-15 of 16 on 3 nodes of 4"
    tp = drawn[1].find(f"{SVG}g[@data-dim='tp']")
    titles = [g.find(f"{SVG}title").text for g in tp.iterfind(f"{SVG}g[@class='group']")]
    assert titles[0] == "tp group 0: ranks 6, 7; a group of rank 7"
    texts = " ".join(t.text for t in drawn[0].iter(f"{SVG}text"))
    assert "shares node [1] with part b" in texts


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--part", "a=4", "--tp", "2"], "--tp: not with --part; give each part its sizes in its spec"),
        (["--part", "a=4", "--order", "cp-tp-ep-dp-pp"], "--order: not with --part"),
        (["--part", "a=4", "--part", "b=4", "--world-size", "10"], "--world-size: expected the sum of the --part sizes, a=4 + b=4 = 8, got 10"),
        (["--part", "a=-1", "--part", "b=4"], "--part a=-1: a SIZE of -1 is inferred from --world-size"),
        (["--part", "a=x"], "--part a=x: expected SIZE to be an int, got 'x'"),
        (["--part", "a=0"], "--part a=0: expected SIZE to be a positive int or -1, got 0"),
        (["--part", "a"], "--part a: expected NAME=SIZE[:DIM=SIZE,...]"),
        (["--part", "tp=4"], "--part tp=4: part name 'tp' is the name of a dimension or gang"),
        (["--part", "a=4:tensor=2"], "--part a=4:tensor=2: unknown dimension tensor; expected one of pp, dp_replicate, dp_shard, cp, tp, ep, etp, order, expert; did you mean tp=?"),
        (["--part", "a=4:tp=3"], "--part a=4:tp=3: tp: tp=3 does not divide the part's size 4"),
        (["--part", "a=4:tp"], "--part a=4:tp: expected DIM=SIZE after the colon, got 'tp'"),
        (["--part", "a=4:tp=2,tp=2"], "--part a=4:tp=2,tp=2: expected tp once, got it twice"),
        (["--part", "a=4", "--part", "a=2"], "--part a=2: part a is named twice (--part a=4)"),
        (["--part", "a=-1", "--part", "b=-1", "--world-size", "8"], "--part: at most one size may be -1"),
        (["--part", "a=4", "--part", "b=2", "--ranks-per-node", "4"], "--ranks-per-node: expected a factor of --world-size 6"),
        (["--part", "a=4", "--rank", "4"], "--rank: expected a rank in [0, 4), got 4"),
        (["--part", "a=4", "--hosts-per-domain", "2"], "--hosts-per-domain: domains hold nodes, which needs --ranks-per-node"),
        ([], "the following arguments are required: --world-size (or --part, --job)"),
    ],
)  # fmt: skip
def test_bad_parts_give_one_line_and_exit_code_2(args, line):
    run = subprocess.run([sys.executable, "-m", "gangmesh.tools.cli", "plan", *args],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert (run.returncode, run.stdout) == (2, "")
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("gangmesh plan: error: ")
    assert line in run.stderr, run.stderr


def test_a_part_takes_the_order_comma_separated_too(capsys):
    assert main(["plan", "--part", "a=4:order=pp,dp_replicate,dp_shard,tp,cp,tp=2",
                 "--format", "json", "--json-content", "counts"]) == 0  # fmt: skip
    (part,) = json.loads(capsys.readouterr().out)["parts"]
    assert part["plan"]["order"] == ["pp", "dp_replicate", "dp_shard", "tp", "cp"]
    assert part["plan"]["dims"]["tp"] == 2 and "groups" not in part["plan"]


@pytest.mark.parametrize("fmt", ["table", "json", "svg"])
def test_parts_never_import_torch(fmt):
    args = ["plan", "--part", "a=8:tp=2", "--part", "b=8:ep=2", "--ranks-per-node", "4",
            "--rank", "9", "--format", fmt]  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "modules at exit: numpy", "numpy but never torch"


def test_parts_on_one_host_share_it_as_expected_not_as_something_to_fix():
    plan = MultiPartPlan(PartsPlan(8, {"trainer": 4, "rollout": 4}), {})
    for name, findings in plan.check_locality(8).items():
        (shared,) = findings
        assert shared.dim == ROOT and not shared.avoidable
        assert shared.message.startswith(f"{ROOT}: one host: part {name} (ranks ")
    # on nodes of 2 ranks the parts share none; of parts of 2 and 6 on nodes of 4, one is
    # to fix
    assert plan.check_locality(2) == {"trainer": [], "rollout": []}
    uneven = MultiPartPlan(PartsPlan(8, {"trainer": 2, "rollout": 6}), {})
    assert [f.avoidable for f in uneven.check_locality(4)["trainer"]] == [True]


def test_parts_are_checked_against_domains_and_racks_and_a_spec_asks_for_the_expert_view(capsys):
    argv = ["plan", "--part", "a=16:ep=16", "--part", "b=16:tp=2,expert=1",
            "--ranks-per-node", "4", "--hosts-per-domain", "2", "--domains-per-rack", "2"]  # fmt: skip
    assert main([*argv, "--format", "json", "--json-content", "counts"]) == 0
    document = json.loads(capsys.readouterr().out)
    a, b = document["parts"]
    levels = {(f["dim"], f["level"]) for f in a["plan"]["locality_findings"]}
    assert {("ep", "node"), ("ep", "domain")} <= levels
    assert "efsdp" in b["plan"]["counts"] and "expert_dims" in b["plan"]
    assert main(["plan", "--part", "a=8:expert=maybe", "--part", "b=8"]) == 2
    assert "--part a=8:expert=maybe: expected expert=1 or expert=0" in capsys.readouterr().err


def test_every_part_above_256_ranks_gets_its_overview_strip(capsys):
    argv = ["plan", "--part", "a=512:tp=8", "--part", "b=512:tp=4", "--ranks-per-node", "8"]
    assert main([*argv, "--format", "svg"]) == 0
    page = capsys.readouterr().out
    assert "structure: all 512 ranks<" in page
    assert "structure: all 512 ranks (global ranks 512-1023)" in page
