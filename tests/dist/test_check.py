"""gangmesh check on local gloo processes: a pass, a bad layout, a process that dies."""

from __future__ import annotations

import json
import re
import socket
import sys
from pathlib import Path

import pytest

from tests.dist.launch import forked_module, run_command

pytestmark = pytest.mark.dist


def check(*args: str, timeout: float = 240):
    """``python -m gangmesh.tools.cli check args``, forked from the warm interpreter."""
    return forked_module("gangmesh.tools.cli", "check", *args, timeout=timeout)


def check_in_new_interpreter(*args: str, timeout: float = 240):
    """The same as a new interpreter, whose command line names its arguments in /proc."""
    return run_command(
        [sys.executable, "-m", "gangmesh.tools.cli", "check", *args], timeout=timeout
    )


def processes_mentioning(marker: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_a_launcher_with_torch_and_one_thread_forks_its_workers_itself(tmp_path):
    from tests.dist.launch import processes

    run = processes("launch_parent.py", 1, str(tmp_path), timeout=120, env_of=lambda rank: {})
    assert run.returncode == 0, run.output
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert len(records) == 2, run.output
    assert all(r["parent"] == r["launcher"] for r in records), records


def test_no_arguments_checks_four_local_processes(tmp_path):
    report = tmp_path / "check.json"
    run = check("--json", str(report), "--sizes", "8,64K", "--iters", "3")
    assert run.returncode == 0, run.output
    assert "gangmesh check: 4 processes on cpu" in run.output
    assert "PASSED: every gang of 4 processes matches the plan" in run.output
    summary = json.loads(report.read_text())
    assert summary["failures"] == []
    assert summary["gangs"]["dp"]["pass"] and summary["gangs"]["dp"]["size"] == 4
    assert set(summary["gangs"]["root"]["sizes"]) == {"8", "65536"}
    assert summary["communicators_per_process"] == [1, 1, 1, 1]  # dp = sdp = the root's group


def test_eight_processes_with_tensor_and_pipeline_parallel(tmp_path):
    report = tmp_path / "check.json"
    run = check("--nproc", "8", "--tp", "2", "--pp", "2", "--json", str(report),
                "--sizes", "8", "--iters", "2")  # fmt: skip
    assert run.returncode == 0, run.output
    gangs = json.loads(report.read_text())["gangs"]
    assert {name: (g["size"], g["groups"]) for name, g in gangs.items()} == {
        "root": (8, 1),
        "pp": (2, 4),
        "dp": (2, 4),
        "rdp": (1, 8),
        "sdp": (2, 4),
        "cp": (1, 8),
        "tp": (2, 4),
    }  # fmt: skip  (a dense job: no expert gangs)
    assert all(g["pass"] for g in gangs.values())
    assert re.search(r"^tp +2 +4 pass( +[0-9.]+){2}$", run.output, re.MULTILINE)


def test_expert_parallel_gangs_are_checked_with_all_to_all(tmp_path):
    report = tmp_path / "check.json"
    run = check("--nproc", "8", "--tp", "2", "--ep", "4", "--json", str(report),
                "--sizes", "8", "--iters", "2")  # fmt: skip
    assert run.returncode == 0, run.output
    summary = json.loads(report.read_text())
    assert {name: summary["gangs"][name]["size"] for name in ("ep", "efsdp", "etp", "edp")} == {
        "ep": 4, "efsdp": 2, "etp": 1, "edp": 2,
    }  # fmt: skip
    # root, tp [0,1], dp = sdp [0,2,4,6], ep [0,1,2,3], efsdp = edp [0,4]
    assert summary["communicators_per_process"] == [5] * 8
    record = summary["layout_record"]
    assert [g["members"] for g in record["gangs"]["ep"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [g["description"] for g in record["gangs"]["ep"]] == [
        "gangmesh:ep:0,1,2,3", "gangmesh:ep:4,5,6,7"
    ]  # fmt: skip
    assert {g["group_name"] for g in record["gangs"]["ep"]} <= set(record["group_names"])
    assert "PASSED" in run.output


def test_an_impossible_layout_is_one_line_and_exit_code_2():
    run = check("--nproc", "6", "--tp", "4", timeout=60)
    assert run.returncode == 2
    assert run.output.strip().count("\n") == 0
    assert run.output.startswith(
        "gangmesh check: error: --tp: --tp=4 does not divide --nproc 6, so --dp-shard cannot infer its size"
    )


def test_a_process_that_exits_is_named_as_the_cause(tmp_path):
    marker = str(tmp_path / "fault.json")
    run = check_in_new_interpreter(
        "--inject-rank", "2", "--timeout", "20", "--json", marker, timeout=120
    )
    assert run.returncode == 1, run.output
    host = socket.gethostname()
    assert (
        f"gangmesh check: FAILED: rank 2 on {host} exited with code 3; 3 other processes failed after it"
        in run.output
    )
    assert "rank 1 saw a collective fail: rank 1: all_gather failed on gang 'root'" in run.output
    assert processes_mentioning(marker) == []


@pytest.mark.parametrize(
    ("fault", "rank", "cause"),
    [
        ("kill", "2", "died of SIGKILL"),
        ("stop", "3", "stopped answering: it was stopped (SIGSTOP or a debugger); killed"),
    ],
)
def test_a_process_killed_or_stopped_is_named_as_the_cause(tmp_path, fault, rank, cause):
    marker = str(tmp_path / "fault.json")
    run = check_in_new_interpreter("--nproc", "4", "--tp", "2", "--timeout", "5", "--inject-rank",
                                   rank, "--inject-fault", fault, "--json", marker,
                                   timeout=120)  # fmt: skip
    assert run.returncode == 1, run.output
    first = f"gangmesh check: FAILED: rank {rank} on {socket.gethostname()} {cause}; 3 other"
    assert first in run.output
    others = [r for r in "0123" if r != rank]
    for other in others:
        assert f"  rank {other} saw a collective fail" in run.output
    assert "killed after the others failed" not in run.output
    assert processes_mentioning(marker) == []


def test_a_rank_late_at_every_barrier_is_named_consistently_slowest(tmp_path):
    report = tmp_path / "check.json"
    run = check("--nproc", "4", "--tp", "2", "--expert", "--sizes", "8", "--iters", "5",
                "--inject-rank", "3", "--inject-fault", "slow", "--json", str(report),
                timeout=180)  # fmt: skip
    assert run.returncode == 0, run.output
    host = socket.gethostname()
    assert re.search(rf"^  tp +rank 3 on {host}: last at 5 of 5 barriers", run.output, re.M)
    assert (
        f"consistently slowest: rank 3 on {host} (in root, dp, sdp, tp, efsdp, edp)" in run.output
    )
    late = json.loads(report.read_text())["stragglers"]
    assert {name: (e["rank"], e["consistent"]) for name, e in late.items()} == {
        name: (3, True) for name in ("root", "dp", "sdp", "tp", "efsdp", "edp")
    }
    assert late["tp"]["group"] == [2, 3]


def test_under_torchrun_each_process_takes_part_as_its_rank():
    from tests.dist.launch import free_port

    run = run_command(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4",
         "--master-addr=127.0.0.1", f"--master-port={free_port()}",
         "-m", "gangmesh.tools.cli", "check", "--tp", "2", "--sizes", "8", "--iters", "2"],
        timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.output
    assert (
        "gangmesh check: 4 processes on cpu\nlayout: pp=1, dp_replicate=1, dp_shard=2, cp=1, tp=2\n"
        in run.output
    )
    assert "PASSED: every gang of 4 processes matches the plan" in run.output


def two_nodes(tmp_path, *args: str) -> tuple[list, dict]:
    """``gangmesh check`` under two torchrun launchers of 2 processes each, meeting through
    c10d rendezvous on 127.0.0.1, as two nodes would."""
    import threading

    from tests.dist.launch import free_port

    report = tmp_path / "check.json"
    endpoint = f"127.0.0.1:{free_port()}"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
        "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", "--rdzv-id=two-nodes",
        "-m", "gangmesh.tools.cli", "check", *args, "--json", str(report), "--sizes", "8",
        "--iters", "2", "--timeout", "60",
    ]  # fmt: skip
    runs: list = [None, None]

    def launch(node: int) -> None:
        runs[node] = run_command(command, timeout=240)

    threads = [threading.Thread(target=launch, args=(node,)) for node in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return runs, json.loads(report.read_text()) if report.exists() else {}


def test_two_nodes_each_rank_placed_and_checked(tmp_path):
    runs, summary = two_nodes(tmp_path, "--dp-replicate", "2")
    assert [run.returncode for run in runs] == [0, 0], "\n".join(run.output for run in runs)
    output = "".join(run.output for run in runs)
    assert "nodes: 2, 2 ranks each" in output
    assert "PASSED: every gang of 4 processes matches the plan" in output
    assert sorted(p["node"] for p in summary["nodes"]) == [0, 0, 1, 1]
    assert summary["nodes"][0]["node"] == summary["nodes"][1]["node"], "ranks 0 and 1 share a node"
    assert summary["locality_findings"] == []


def test_two_nodes_flag_a_tp_gang_larger_than_a_node(tmp_path):
    runs, summary = two_nodes(tmp_path, "--tp", "4")
    assert [run.returncode for run in runs] == [0, 0], "\n".join(run.output for run in runs)
    (finding,) = summary["locality_findings"]
    assert finding["dim"] == "tp" and finding["avoidable"]
    assert finding["message"].endswith("use tp=2 (dp_shard becomes 2)")


@pytest.mark.parametrize("placed", [False, True], ids=["launcher_order", "placement"])
def test_interleaved_hosts_are_judged_by_host_and_placement_keeps_tp_inside(tmp_path, placed):
    from tests.dist.launch import free_port, processes

    report, port = tmp_path / "check.json", str(free_port())
    flags = ["--tp", "2", "--sizes", "8", "--iters", "2", "--json", str(report)]
    run = processes(
        "check_rank.py", 4, *flags, *(["--placement"] if placed else []), timeout=180,
        env_of=lambda rank: {
            "RANK": str(rank), "WORLD_SIZE": "4", "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
            "GANGMESH_HOST": "ab"[rank % 2],  # ranks 0, 2 on host a; 1, 3 on host b
        },
    )  # fmt: skip
    assert run.returncode == 0, run.output
    summary = json.loads(report.read_text())
    assert [node["host"] for node in summary["nodes"]] == ["a", "b", "a", "b"]
    tp = [f for f in summary["locality_findings"] if f["dim"] == "tp"]
    if placed:
        assert tp == [], run.output
        assert "PASSED: every gang of 4 processes matches the plan" in run.output
    else:
        (finding,) = tp
        assert finding["level"] == "node" and finding["avoidable"]
        assert "placement=True" in finding["message"], finding["message"]


PARTS = ["--part", "trainer=4:dp_shard=2,tp=2", "--part", "generator=4:dp_replicate=2,tp=2"]


def test_a_job_of_two_parts_is_checked_part_by_part_with_a_bridge(tmp_path):
    out = tmp_path / "parts.json"
    run = check(*PARTS, "--ranks-per-node", "4", "--iters", "2", "--json", str(out))
    assert run.returncode == 0, run.output
    assert "part trainer: ranks 0-3" in run.output
    assert "part generator: ranks 4-7" in run.output
    assert "bridge of each part's first rank [0, 4]: broadcast and all_reduce" in run.output
    assert "PASSED: parts trainer, generator and their bridge" in run.output
    summary = json.loads(out.read_text())
    assert [p["name"] for p in summary["parts"]] == ["trainer", "generator"]
    assert [p["ranks"] for p in summary["parts"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    record = summary["parts"][1]["layout_record"]
    groups = {name: [g["members"] for g in found] for name, found in record["gangs"].items()}
    assert groups["tp"] == [[4, 5], [6, 7]] and groups["rdp"] == [[4, 6], [5, 7]]
    assert [r["rank"] for r in record["ranks"]] == [4, 5, 6, 7]
    assert summary["bridge"] == {"ranks": [0, 4], "passed": True}


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--part", "trainer=4:tp=3", "--part", "generator=4"], "--part trainer=4:tp=3"),
        ([*PARTS, "--nproc", "6"], "--nproc: expected the sum of the --part sizes"),
        (["--part", "trainer=4", "--part", "generator=-1"], "inferred from --nproc"),
        ([*PARTS, "--tp", "2"], "--tp: not with --part"),
    ],
)
def test_a_bad_part_is_refused_before_any_process_starts(args, said):
    run = check(*args)
    assert run.returncode == 2, run.output
    assert said in run.output
    assert "starting" not in run.output
