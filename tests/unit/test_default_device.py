"""The device a process takes where its program names none: one GPU per process of a node,
refused before NCCL starts where there are fewer; GANGMESH_DEVICE chooses instead.

CUDA is made to look available here with stand-ins for torch.cuda's two questions (this
machine has no GPU); nothing starts: each refusal comes before any store or group.
"""

from __future__ import annotations

import pytest
import torch

import gangmesh as gm
from gangmesh.runtime.default_group import default_device
from tests.shown import assert_line_shown

TORCHRUN = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "4",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}  # fmt: skip


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.delenv("GANGMESH_DEVICE", raising=False)


def test_more_local_processes_than_gpus_are_refused_before_anything_starts(one_gpu, monkeypatch):
    for name, value in TORCHRUN.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as refused:
        gm.setup_root_gang()
    message = str(refused.value)
    assert message.startswith("device: LOCAL_WORLD_SIZE=4 processes on this node"), message
    assert "torch sees 1 GPU" in message and "--nproc-per-node 1" in message, message
    assert "CUDA_VISIBLE_DEVICES" in message and "torch.device('cpu')" in message, message
    assert not torch.distributed.is_initialized()
    said = [f"ValueError: {message}"]
    assert_line_shown("howto.rst", "ValueError: device: LOCAL_WORLD_SIZE", "LOCAL_RANK", said)


def test_a_process_per_gpu_takes_its_own(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.delenv("GANGMESH_DEVICE", raising=False)
    assert [default_device(rank, 8) for rank in (0, 7)] == [torch.device("cuda", r) for r in (0, 7)]
    with pytest.raises(ValueError, match=r"^device: LOCAL_WORLD_SIZE=16 processes"):
        default_device(3, 16)


def test_gangmesh_device_chooses_the_device_type(one_gpu, monkeypatch):
    monkeypatch.setenv("GANGMESH_DEVICE", "cpu")
    assert default_device(2, 4) == torch.device("cpu")  # 4 processes on 1 GPU: cpu, as asked
    monkeypatch.setenv("GANGMESH_DEVICE", "cuda")
    assert default_device(0, 1) == torch.device("cuda", 0)
    monkeypatch.setenv("GANGMESH_DEVICE", "gpu")
    with pytest.raises(ValueError, match=r"^GANGMESH_DEVICE: expected cpu or cuda, got 'gpu'"):
        default_device(0, 1)


def test_without_gpus_the_default_is_cpu_and_cuda_asked_for_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("GANGMESH_DEVICE", raising=False)
    assert default_device(3, 4) == torch.device("cpu")
    monkeypatch.setenv("GANGMESH_DEVICE", "cuda")
    with pytest.raises(ValueError, match=r"^GANGMESH_DEVICE: cuda, but torch sees no GPU"):
        default_device(0, 1)


def test_gangmesh_check_on_gpus_needs_one_per_process_and_says_so(monkeypatch, capsys):
    from gangmesh.tools.check_command import local_device
    from gangmesh.tools.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["check", "--nproc", "2", "--device", "cuda"]) == 2
    assert "--device: cuda, but torch sees no GPU on this machine" in capsys.readouterr().err
    assert local_device(None, 4) == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert main(["check", "--nproc", "2", "--device", "cuda"]) == 2
    said = capsys.readouterr().err
    assert "torch sees 1 GPU for --nproc 2; use --nproc 1 or --device cpu" in said, said
    assert local_device(None, 2) == "cpu"  # more processes than GPUs: gloo by default
    assert local_device(None, 1) == "cuda"  # a GPU for each: NCCL by default
    assert local_device("cpu", 1) == "cpu"
