"""setup_root_gang under torchrun and under SLURM's variables; the seed examples; clean exits."""

from __future__ import annotations

import re

import pytest

from tests.dist.launch import REPO, slurm_like, torchrun, torchrun_like

pytestmark = pytest.mark.dist


@pytest.mark.parametrize("launcher", ["torchrun", "slurm"])
def test_setup_root_gang_reads_the_launcher(tmp_path, launcher):
    if launcher == "torchrun":
        run = torchrun("launch_env.py", 4, str(tmp_path))
    else:
        run = slurm_like("launch_env.py", 4, str(tmp_path))
    assert run.returncode == 0, run.output
    results = run.results(tmp_path)
    assert sorted(results) == [0, 1, 2, 3]
    for rank, got in results.items():
        assert got == {
            "launcher": launcher,
            "rank": rank,
            "size": 4,
            "local_rank": rank,
            "local_world_size": 4,
            "kind": "ProcessGroupGang",
            "sum": 6.0,
        }


def test_seed_all_reduce_example_prints_the_sums():
    run = torchrun_like(REPO / "docs/examples/all_reduce.py", 4)
    assert run.returncode == 0, run.output
    lines = sorted(re.findall(r"Rank (\d): Tensor after all_reduce = ([\d.]+)", run.output))
    assert lines == [(str(r), "10.0") for r in range(4)]


def test_seed_parallel_gangs_example_prints_dp_and_tp_ranks():
    run = torchrun_like(REPO / "docs/examples/parallel_gangs.py", 4)
    assert run.returncode == 0, run.output
    for rank in range(4):
        assert f"Rank {rank}: Data Parallel Rank: {rank // 2}" in run.output
        assert f"Rank {rank}: Tensor Parallel Rank: {rank % 2}" in run.output


def test_at_exit_no_gloo_thread_outlives_gangmeshs_hook(tmp_path):
    """gloo threads alive when the interpreter finalises can abort the process at exit."""
    run = torchrun_like("exit_clean.py", 4, "--threads-to", str(tmp_path), finalize=True)
    assert run.returncode == 0, run.output
    results = run.results(tmp_path)
    assert sorted(results) == [0, 1, 2, 3]
    for rank, got in results.items():
        assert not [name for name in got["threads"] if "gloo" in name], (rank, got)


def test_a_script_that_never_closes_exits_zero_every_time():
    """Each rank a new process that ends as a new interpreter does (finalisation and C++
    teardown included), which must never abort."""
    codes = []
    for _ in range(12):
        run = torchrun_like("exit_clean.py", 4, finalize=True)
        assert "terminate called" not in run.output, run.output
        codes.append(run.returncode)
    assert codes == [0] * 12


def test_an_exception_on_one_rank_still_fails_the_job_with_its_traceback():
    run = torchrun("exit_clean.py", 4, "--raise-on", "1", timeout=120)
    assert run.returncode != 0
    assert "Traceback" in run.output
    assert "RuntimeError: deliberate failure on rank 1" in run.output


def test_torchrun_master_port_0_fails_at_once_saying_what_to_use():
    # torchrun --master-port 0 hands its workers MASTER_PORT=0, not the port its store took.
    run = torchrun("launch_env.py", 2, "unused", options=("--master-port=0",), timeout=120)
    assert run.returncode != 0, run.output
    assert "MASTER_PORT: expected a port >= 1, got 0: torchrun --master-port 0" in run.output
    assert "--standalone" in run.output
