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


def gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """torch sees ``count`` GPUs, each with a UUID of its index."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda d: type("P", (), {"uuid": f"GPU-{d.index}"})
    )


# One row per launcher of docs/howto.rst's table: the variables that launcher sets, the GPUs
# torch sees in the process, and the device the process takes.
LAUNCHES = {
    "torchrun on an 8-GPU node": (
        {
            "RANK": "13",
            "WORLD_SIZE": "16",
            "LOCAL_RANK": "5",
            "LOCAL_WORLD_SIZE": "8",
            "MASTER_ADDR": "node0",
            "MASTER_PORT": "29500",
        },
        8,
        torch.device("cuda", 5),
    ),
    "srun --gpus-per-task=1 --ntasks-per-node 8": (
        {
            "SLURM_PROCID": "13",
            "SLURM_NTASKS": "16",
            "SLURM_LOCALID": "5",
            "SLURM_NODEID": "1",
            "SLURM_NTASKS_PER_NODE": "8",
            "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
            "SLURM_GPUS_PER_TASK": "1",
            "CUDA_VISIBLE_DEVICES": "5",
            "SLURM_JOB_NODELIST": "g[1-2]",
        },
        1,
        torch.device("cuda", 0),
    ),
    "srun -N 2 -n 16 (no --ntasks-per-node)": (
        {
            "SLURM_PROCID": "13",
            "SLURM_NTASKS": "16",
            "SLURM_LOCALID": "5",
            "SLURM_NODEID": "1",
            "SLURM_STEP_TASKS_PER_NODE": "8(x2)",
            "SLURM_TASKS_PER_NODE": "8(x2)",
            "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
            "SLURM_JOB_NODELIST": "g[1-2]",
        },
        8,
        torch.device("cuda", 5),
    ),
    "srun -N 2 -n 10, uneven nodes": (
        {
            "SLURM_PROCID": "9",
            "SLURM_NTASKS": "10",
            "SLURM_LOCALID": "1",
            "SLURM_NODEID": "1",
            "SLURM_STEP_TASKS_PER_NODE": "8,2",
            "SLURM_JOB_NODELIST": "g[1-2]",
        },
        2,
        torch.device("cuda", 1),
    ),
    "a container per process (Kubernetes' device plugin)": (
        {
            "RANK": "3",
            "WORLD_SIZE": "8",
            "LOCAL_RANK": "3",
            "LOCAL_WORLD_SIZE": "8",
            "MASTER_ADDR": "trainer-0",
            "MASTER_PORT": "29500",
            "NVIDIA_VISIBLE_DEVICES": "GPU-6f2c1e0a-4d2b-11ee-be56-0242ac120002",
        },
        1,
        torch.device("cuda", 0),
    ),
    "torchrun with CUDA_VISIBLE_DEVICES per rank from a wrapper": (
        {
            "RANK": "2",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "2",
            "LOCAL_WORLD_SIZE": "4",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500",
            "CUDA_VISIBLE_DEVICES": "2",
        },
        1,
        torch.device("cuda", 0),
    ),
}


@pytest.mark.parametrize("launch", sorted(LAUNCHES))
def test_every_launcher_gives_each_process_a_gpu(launch, monkeypatch):
    from gangmesh.runtime.environment import read_launch_environment

    variables, count, expected = LAUNCHES[launch]
    gpus(monkeypatch, count)
    env = read_launch_environment(variables)
    assert env is not None
    assert default_device(env.local_rank, env.local_world_size, variables) == expected


def test_a_container_that_shows_every_gpu_chooses_none(monkeypatch):
    # NVIDIA's images say "all": every process sees every GPU, as on a bare machine
    gpus(monkeypatch, 1)
    with pytest.raises(ValueError, match=r"^device: LOCAL_WORLD_SIZE=4 processes"):
        default_device(2, 4, {"NVIDIA_VISIBLE_DEVICES": "all"})


def test_two_processes_of_a_host_on_one_gpu_are_refused_once_all_have_claimed(monkeypatch):
    # CUDA_VISIBLE_DEVICES=0 for a whole job of 4: each process takes cuda:0, and setup's
    # claims, compared in the job's store, refuse it before NCCL starts
    from gangmesh.assembly import gpu_claims

    gpus(monkeypatch, 1)
    monkeypatch.delenv("NCCL_HOSTID", raising=False)
    store = torch.distributed.HashStore()
    device = default_device(1, 4, {"CUDA_VISIBLE_DEVICES": "0"})
    assert device == torch.device("cuda", 0)
    keys = [gpu_claims.claim(store, device, rank) for rank in range(4)]
    for key in keys:
        with pytest.raises(ValueError) as refused:
            gpu_claims.check(store, key, device)
        message = str(refused.value)
        assert message.startswith("device: cuda:0 is GPU GPU-0 of host "), message
        assert "for global ranks [0, 1, 2, 3]" in message, message


def test_a_gpu_per_process_or_per_nccl_host_passes_the_claims(monkeypatch):
    from gangmesh.assembly import gpu_claims

    gpus(monkeypatch, 2)
    store = torch.distributed.HashStore()
    own = [gpu_claims.claim(store, torch.device("cuda", r), r) for r in range(2)]
    for rank, key in enumerate(own):  # cuda:0 and cuda:1 of one host
        gpu_claims.check(store, key, torch.device("cuda", rank))
    shared = []
    for rank in range(2, 4):  # several ranks on one GPU, each its own NCCL host
        monkeypatch.setenv("NCCL_HOSTID", f"host{rank}")
        shared.append(gpu_claims.claim(store, torch.device("cuda", 0), rank))
    for key in shared:
        gpu_claims.check(store, key, torch.device("cuda", 0))
    assert gpu_claims.claim(store, torch.device("cpu"), 5) is None
