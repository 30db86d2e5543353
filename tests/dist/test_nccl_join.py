"""Two jobs launched apart, joined on one GPU: a push over NCCL bridges; skipped where CUDA is
not available (as in CI)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import gangmesh as gm
from tests.dist.test_joined import Launch, launched_apart, results

pytestmark = [
    pytest.mark.dist,
    pytest.mark.skipif(
        not (torch.cuda.is_available() and dist.is_nccl_available()), reason="needs CUDA and NCCL"
    ),
]


def test_a_push_between_two_gpu_jobs_arrives_whole(tmp_path):
    with gm.serve_join() as server:
        runs = launched_apart(server, tmp_path, {
            "trainer": Launch("joined_cuda.py", 1, ()),
            "generator": Launch("joined_cuda.py", 1, ()),
        })  # fmt: skip
    for run in runs.values():
        assert run.returncode == 0, run.output
    assert results(tmp_path / "trainer")[0] == {"pushed": True}
    assert results(tmp_path / "generator")[0] == {"version": 7, "equal": True}
