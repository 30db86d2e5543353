"""Jobs of processes started on two hosts of a bed: gangmesh check, a restart and a host cut
off the link under torchrun multi-node (c10d rendezvous, an agent per host), and a host
whose processes die."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from gangmesh.testing.netns import namespaces_unavailable
from tests.dist.multihost import torchrun_on_hosts, workers_on_hosts

pytestmark = [
    pytest.mark.dist,
    pytest.mark.skipif(bool(namespaces_unavailable()), reason=namespaces_unavailable() or "-"),
]

TIMEOUT_S = 5.0


def test_gangmesh_check_under_torchrun_multi_node_passes_and_names_the_hosts(bed, tmp_path):
    report = tmp_path / "check.json"
    run = torchrun_on_hosts(bed, 2, "-m", "gangmesh.tools.cli", "check", "--tp", "2", "--sizes", "8",
                            "--iters", "2", "--timeout", "60", "--json", str(report),
                            timeout=240)  # fmt: skip
    assert run.returncode == 0, run.output
    assert "PASSED: every gang of 4 processes matches the plan" in run.output
    assert re.search(r"^  node \d on host0: ranks \d-\d$", run.output, re.MULTILINE), run.output
    assert re.search(r"^  node \d on host1: ranks \d-\d$", run.output, re.MULTILINE), run.output
    summary = json.loads(report.read_text())
    hosts = [node["host"] for node in summary["nodes"]]
    assert sorted(hosts) == ["host0", "host0", "host1", "host1"]
    assert hosts[0] == hosts[1] and hosts[2] == hosts[3], "a node's ranks are consecutive"
    assert summary["locality_findings"] == [], "tp stays on one host"


def test_a_torchrun_multi_node_job_restarts_after_a_rank_on_host1_dies(bed, tmp_path):
    run = torchrun_on_hosts(bed, 1, "host_restart.py", str(tmp_path), max_restarts=1,
                            timeout=240)  # fmt: skip
    assert run.returncode == 0, run.output
    results = {int(p.stem[4:]): json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")}
    assert sorted(results) == [0, 1], run.output
    for result in results.values():
        assert result["first"] is False and result["sum"] == 2.0
    # The agents' counts differ (host1's restarted after a failure, host0's healthy one
    # kept 0), and the job sets up all the same.
    assert sorted(r["restart_count"] for r in results.values()) == [0, 1]


def test_a_host_whose_processes_die_ends_the_other_hosts_collectives_in_time(bed, tmp_path):
    run = workers_on_hosts(bed, "host_faults.py", 2, str(tmp_path), timeout=120)
    results = {int(p.stem[4:]): json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")}
    assert sorted(results) == [0, 1], f"only host0's ranks survive\n{run.output}"
    for rank, result in results.items():
        assert result["host"] == "host0"
        assert result["error"].startswith(
            f"all_reduce(SUM) failed on gang 'root' (size 4, rank {rank}"
        ), result["error"]
        assert result["waited"] < TIMEOUT_S + 5, "raised within the timeout and 5 s more"
        assert result["step"] <= 3, "host0 stops at the step host1 no longer joins"


def test_a_host_cut_under_torchrun_ends_every_process_once_tcp_gives_up(bed, tmp_path):
    # What docs/howto.rst tells users to set: without it, the agent on the cut host waits
    # on the rendezvous store for as long as TCP retransmits (about 15 minutes).
    for host in bed.hosts:
        subprocess.run(bed.command(host.index, ["sh", "-c", "echo 5 > /proc/sys/net/ipv4/tcp_retries2"]),
                       check=True, timeout=30)  # fmt: skip
    run = torchrun_on_hosts(bed, 1, "host_cut.py", str(tmp_path), timeout=150)
    assert not run.output.startswith("TIMED OUT"), f"an agent did not end\n{run.output}"
    assert run.returncode == 1, run.output
    results = {int(p.stem[4:]): json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")}
    survivors = {rank: r for rank, r in results.items() if r["host"] == "host0"}
    assert len(survivors) == 1, run.output
    for rank, result in survivors.items():
        assert result["error"].startswith(
            f"all_reduce(SUM) failed on gang 'root' (size 2, rank {rank}"
        )
        assert result["waited"] < TIMEOUT_S + 5, "raised within the timeout and 5 s more"
        assert result["step"] == 3, "host0 stops at the step host1 no longer joins"
