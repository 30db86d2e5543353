"""gangmesh plan: table, JSON and locality report; exit codes, one-line errors, no torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import gangmesh
from gangmesh.plan.topology import MeshTopology
from gangmesh.tools.cli import build_parsers, help_text, main


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "gangmesh.tools.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_table_lists_each_dimension_the_rank_and_what_locality_checked(capsys):
    code = main(["plan", "--world-size", "16", "--tp", "2", "--pp", "2", "--rank", "5",
                 "--ranks-per-node", "8"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "tp                 2        8  [0,1] [2,3] [4,5] [6,7] ..." in out
    assert "dp                 4        4  [0,2,4,6] [1,3,5,7] [8,10,12,14] [9,11,13,15]" in out
    assert "rank 5: pp=0 dp_replicate=0 dp_shard=2 cp=0 tp=1" in out
    assert out.endswith(
        "locality: tp (size 2) groups each stay on one node of 8 ranks; pp and dp_shard "
        "groups are meant to cross nodes and were not checked\n"
    )


def test_dimensions_that_share_their_groups_are_named_once_under_the_table(capsys):
    assert main(["plan", "--world-size", "4096", "--pp", "4", "--tp", "8", "--ep", "8"]) == 0
    out = capsys.readouterr().out
    assert out.endswith(
        "same groups: dp, efsdp and edp have the groups of dp_shard; ep has the groups of tp "
        "(one communicator each)\n"
    )
    assert main(["plan", "--world-size", "16", "--tp", "2", "--dp-replicate", "2"]) == 0
    assert "same groups" not in capsys.readouterr().out  # dp spans two dimensions there


def test_the_all_clear_line_of_hsdp_names_what_was_checked(capsys):
    assert main(["plan", "--world-size", "16", "--tp", "2", "--dp-replicate", "2",
                 "--ranks-per-node", "8"]) == 0  # fmt: skip
    assert capsys.readouterr().out.endswith(
        "locality: tp (size 2) and dp_shard (size 4) groups each stay on one node of 8 ranks; "
        "dp_replicate groups are meant to cross nodes and were not checked\n"
    )


@pytest.mark.parametrize("format_", ["table", "json", "svg"])
def test_a_dense_plan_speaks_of_no_expert_dimension_and_a_moe_plan_does(capsys, format_):
    dense = ["plan", "--world-size", "64", "--pp", "2", "--dp-shard", "4", "--tp", "8",
             "--ranks-per-node", "8", "--rank", "13", "--format", format_]  # fmt: skip
    assert main(dense) == 0
    out = capsys.readouterr().out
    assert not re.search(r"efsdp|edp|\betp=|\bep=|expert_dims|[Ee]xpert weight", out), out
    assert main([*dense, "--ep", "4"]) == 0
    moe = capsys.readouterr().out
    assert "efsdp" in moe


def test_a_world_on_one_node_has_nothing_to_cross(capsys):
    assert main(["plan", "--world-size", "8", "--tp", "2", "--ranks-per-node", "16"]) == 0
    out = capsys.readouterr().out
    assert "16 ranks per node (1 node)" in out
    assert "locality: one node holds all 8 ranks, so no gang crosses a node" in out


def test_a_finding_to_fix_is_labelled_and_fails_strict(capsys):
    args = ["plan", "--world-size", "12", "--tp", "4", "--ranks-per-node", "6"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "locality findings: 1 to fix\n" in out
    assert (
        "  - to fix: tp: 1 of 3 groups span nodes, e.g. [4, 5, 6, 7] on nodes [0, 1]; tp=4 fits"
        in out
    )
    assert "  - not checked: dp_shard groups, meant to cross nodes" in out
    assert main([*args, "--strict"]) == 1
    assert capsys.readouterr().err == "gangmesh plan: --strict: locality findings to fix: tp\n"


def test_an_unavoidable_crossing_is_told_apart_and_passes_strict(capsys):
    args = ["plan", "--world-size", "64", "--dp-replicate", "2", "--dp-shard", "4", "--tp", "8",
            "--ranks-per-node", "8", "--strict"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "locality findings: 1 unavoidable at these sizes\n" in out
    assert "  - unavoidable: dp_shard: 16 of 16 groups span nodes" in out
    assert "  - fine: tp (size 8) groups each stay on one node of 8 ranks" in out


def test_strict_applies_to_every_format(tmp_path):
    out = tmp_path / "plan.svg"
    args = ["plan", "--world-size", "12", "--tp", "4", "--ranks-per-node", "6", "--strict"]
    assert main([*args, "--format", "svg", "--output", str(out)]) == 1
    assert out.read_text().startswith("<svg")
    assert main([*args, "--format", "json", "--output", str(out)]) == 1


def test_json_has_every_group_of_every_dimension(tmp_path):
    out = tmp_path / "plan.json"
    assert main(["plan", "--world-size", "8", "--dp-replicate", "2", "--format", "json",
                 "--output", str(out), "--rank", "3", "--ranks-per-node", "4"]) == 0  # fmt: skip
    document = json.loads(out.read_text())
    plan = MeshTopology(8, dp_replicate=2)
    assert document["dims"] == plan.dims
    for dim, groups in document["groups"].items():
        assert groups == plan.groups(dim).tolist()
        assert document["counts"][dim] == {"size": plan.size_of(dim), "groups": len(groups)}
    assert document["rank"]["groups"]["dp_shard"] == [0, 1, 2, 3]
    assert document["locality_findings"] == []


def test_json_counts_leave_out_the_groups_and_keep_the_rank(capsys):
    assert main(["plan", "--world-size", str(2**20), "--tp", "8", "--pp", "8", "--format",
                 "json", "--json-content", "counts", "--rank", "9", "--ranks-per-node", "8"]) == 0  # fmt: skip
    document = json.loads(capsys.readouterr().out)
    assert "groups" not in document
    assert document["counts"]["tp"] == {"size": 8, "groups": 2**17}
    assert document["counts"]["dp"] == {"size": 2**14, "groups": 64}
    assert document["rank"]["groups"]["tp"] == list(range(8, 16))
    assert document["rank"]["coordinate"] == {"pp": 0, "dp_replicate": 0, "dp_shard": 1,
                                              "cp": 0, "tp": 1}  # fmt: skip


def test_json_findings_say_whether_they_are_avoidable(capsys):
    assert main(["plan", "--world-size", "12", "--tp", "4", "--ranks-per-node", "6",
                 "--format", "json", "--json-content", "counts"]) == 0  # fmt: skip
    (finding,) = json.loads(capsys.readouterr().out)["locality_findings"]
    assert finding["dim"] == "tp" and finding["avoidable"] is True
    assert finding["group"] == [4, 5, 6, 7] and finding["nodes"] == [0, 1]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--world-size", "10", "--tp", "4"],
            "--tp: --tp=4 does not divide --world-size 10, so --dp-shard cannot infer its size "
            "(--dp-shard is -1 by default)",
        ),
        (
            ["--world-size", "32", "--dp-shard", "3", "--tp", "2"],
            "--dp-shard, --tp: --dp-shard=3 * --tp=2 = 6, but --world-size is 32",
        ),
        (["--world-size", "8", "--tp", "-1"], "--dp-shard and --tp: at most one size may be -1"),
        (["--world-size", "8", "--rank", "8"], "--rank: expected a rank in [0, 8), got 8"),
        (["--world-size", "0"], "--world-size: expected an int >= 1, got 0"),
        (
            ["--world-size", "16", "--ranks-per-node", "3"],
            "--ranks-per-node: expected a factor of --world-size 16",
        ),
        (["--world-size", "8", "--ranks-per-node", "0"], "--ranks-per-node must be >= 1"),
        (["--world-size", "eight"], "argument --world-size: expected an int, got 'eight'"),
        (["--world-size", "8", "--order", "tp,pp"], "--order: expected each of pp, dp_replicate"),
        (["--world-size", "8", "--dp-shard", "4", "--tp", "2", "--ep", "3"], "--ep: expected a"),
        (["--world-size", "8", "--strict"], "--strict: checks locality, which needs --ranks-per"),
        (["--world-size", "8", "--json-content", "counts"], "--json-content: applies to --format"),
        (
            ["--world-size", "8", "--format", "svg", "--output", "/nonexistent/dir/x.svg"],
            "--output: cannot write /nonexistent/dir/x.svg: No such file or directory",
        ),
    ],
)
def test_bad_arguments_give_one_line_and_exit_code_2(args, line):
    run = run_cli("plan", *args)
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert run.stderr.startswith("gangmesh plan: error: ")
    assert line in run.stderr


def test_version_bare_command_and_help():
    version = run_cli("--version")
    assert (version.returncode, version.stdout) == (0, f"gangmesh {gangmesh.__version__}\n")
    bare = run_cli()
    assert bare.returncode == 2 and bare.stdout == ""
    assert bare.stderr.startswith("usage: gangmesh [-h] [--version] COMMAND ...")
    assert re.search(r"^\s+plan\s+print the gangs", bare.stderr, re.MULTILINE)
    assert re.search(r"^\s+check\s+check gang layouts", bare.stderr, re.MULTILINE)
    helped = run_cli("plan", "--help")
    assert helped.returncode == 0 and helped.stdout == help_text("plan")


def test_every_option_has_help_and_shows_its_default():
    _, commands = build_parsers()
    for name, command in commands.items():
        text = help_text(name)
        for action in command._actions:
            if action.help == "==SUPPRESS==" or not action.option_strings:
                continue
            assert action.help, (name, action.option_strings)
            if action.default not in (None, False, "==SUPPRESS=="):
                assert f"(default: {action.default})" in " ".join(text.split()), action.dest
    plan_help = " ".join(help_text("plan").split())
    assert "--format {table,json,svg} table: sizes, group counts" in plan_help
    assert "(default: table)" in plan_help and "(default: all)" in plan_help


NO_TORCH = """
import atexit, runpy, sys
loaded = lambda: sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "numpy"))
atexit.register(lambda: print("modules at exit:", *[m for m in loaded() if "." not in m]))
sys.argv[0] = "gangmesh"
runpy.run_module("gangmesh.tools.cli", run_name="__main__")
"""


@pytest.mark.parametrize("fmt", ["table", "json", "svg"])
def test_plan_never_imports_torch(fmt):
    args = ["plan", "--world-size", "64", "--tp", "4", "--ep", "2", "--ranks-per-node", "8",
            "--rank", "9", "--format", fmt]  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "modules at exit: numpy", "numpy but never torch"


def test_check_refuses_nodes_that_do_not_divide_the_processes_before_starting_any(capsys):
    assert main(["check", "--nproc", "4", "--ranks-per-node", "3"]) == 2
    err = capsys.readouterr().err
    assert "--ranks-per-node: expected a factor of --nproc 4" in err
    assert "starting" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nproc", "6", "--tp", "4"], "--tp: --tp=4 does not divide --nproc 6, so --dp-shard "
         "cannot infer its size (--dp-shard is -1 by default)"),
        (["--nproc", "4", "--tp", "3", "--dp-shard", "2"],
         "--dp-shard, --tp: --dp-shard=2 * --tp=3 = 6, but --nproc is 4"),
        (["--sizes", "1"], "--sizes: expected sizes of at least 4 bytes"),
    ],
)  # fmt: skip
def test_check_errors_name_the_options_typed(capsys, args, message):
    assert main(["check", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gangmesh check: error: {message}"), err
    assert "world_size" not in err and "tp=" not in err.replace("--tp=", "")


def test_order_also_takes_the_megatron_spelling_that_plans_print(capsys):
    plan = MeshTopology(16, tp=2, cp=2, order="pp,dp_replicate,dp_shard,tp,cp")
    args = ["plan", "--world-size", "16", "--tp", "2", "--cp", "2", "--format", "json"]
    assert main([*args, "--order", plan.megatron_order()]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["order"] == list(plan.order)
    assert document["groups"]["cp"] == plan.groups("cp").tolist()
    assert main([*args, "--order", "tp-cp-ep-dp"]) == 2
    assert "--order: expected Megatron-Core's spelling" in capsys.readouterr().err


def test_plans_print_the_megatron_spelling_only_of_orders_it_has(capsys):
    args = ["plan", "--world-size", "16", "--tp", "2", "--cp", "2"]
    assert main([*args, "--order", "pp,dp_replicate,dp_shard,tp,cp"]) == 0
    out = capsys.readouterr().out
    assert (
        "order pp,dp_replicate,dp_shard,tp,cp, outermost first; as Megatron-Core's order argument, "
        "innermost first: cp-tp-ep-dp-pp" in out
    )
    assert main([*args, "--order", "cp-tp-ep-dp-pp", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["megatron_order"] == "cp-tp-ep-dp-pp"
    # Megatron-Core's one dp cannot stand for dp_replicate and dp_shard apart.
    split = "pp,dp_replicate,cp,dp_shard,tp"
    assert main([*args, "--order", split]) == 0
    out = capsys.readouterr().out
    assert f"order {split}, outermost first\n" in out and "Megatron-Core" not in out
    assert main([*args, "--order", split, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["megatron_order"] is None


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["plan", "--tensor", "2"],
            "gangmesh plan: error: unknown option --tensor; did you mean --tp?",
        ),
        (
            ["plan", "--world-size", "4", "--pipeline=2"],
            "unknown option --pipeline; did you mean --pp?",
        ),
        (["plan", "--world-size", "4", "--dp-sharding", "2"], "did you mean --dp-shard?"),
        (
            ["check", "--nprocs", "4"],
            "gangmesh check: error: unknown option --nprocs; did you mean --nproc?",
        ),
        (
            ["plan", "--world-size", "4", "--wat"],
            "gangmesh plan: error: unknown option --wat (see gangmesh plan --help)\n",
        ),
    ],
)
def test_an_unknown_option_is_named_first_in_one_line_with_the_closest(args, said):
    run = run_cli(*args)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.endswith(f" (see gangmesh {args[0]} --help)\n"), run.stderr
    assert said in run.stderr, run.stderr
    assert "required" not in run.stderr, "the unknown option is named before a missing one"


def test_an_abbreviated_option_still_counts_as_the_option():
    assert main(["plan", "--world", "4", "--tp", "2"]) == 0
