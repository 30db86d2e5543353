"""gangmesh's NCCL path on one GPU; skipped where CUDA is not available (as in CI)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.dist.launch import torchrun

pytestmark = [
    pytest.mark.dist,
    pytest.mark.skipif(
        not (torch.cuda.is_available() and dist.is_nccl_available()), reason="needs CUDA and NCCL"
    ),
]


def test_one_gpu_process_runs_every_collective_a_mesh_and_fsdp2_over_nccl(tmp_path):
    run = torchrun("nccl_one.py", 1, str(tmp_path), timeout=300)
    assert run.returncode == 0, run.output
    got = run.results(tmp_path)[0]
    assert got["backend"] == "ProcessGroupGang"
    assert got["nccl"] == "nccl"
    assert got["high_priority"] is True
    assert got["timeout_s"] == 60.0
    assert got["bound"] == "cuda:0"
    assert got["root_timeout_after_split_s"] == 60.0
    assert got["collectives"] == [[0.0, 1.0, 2.0, 3.0]] * 4
    assert "expected a tensor on the gang's device cuda:0" in got["cpu_tensor"]
    assert got["mesh_device"] == "cuda"
    assert got["fsdp_grad_error"] < 1e-5
    assert got["sub_gang"] in ("ProcessGroupGang", "FakeGang")


def test_a_mixed_backend_default_group_is_wrapped_on_its_cuda_leg(tmp_path):
    run = torchrun("nccl_mixed.py", 1, str(tmp_path), timeout=300)
    assert run.returncode == 0, run.output
    got = run.results(tmp_path)[0]
    assert got == {"device": "cuda:0", "sum": [1.0, 1.0], "from_mesh_device": "cuda:0"}
