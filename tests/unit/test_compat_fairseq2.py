"""gangmesh.compat.fairseq2: the names migration.rst promises, and their behaviour."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import gangmesh as gm
from gangmesh.compat import fairseq2 as compat
from gangmesh.testing import simulate_gangs
from tests.dist.launch import free_port

CPU = torch.device("cpu")
META = torch.device("meta")
FAIRSEQ2_0_8_1 = {
    "Gang", "ReduceOperation", "GangError", "raise_operational_gang_error", "FakeGang",
    "ProcessGroupGang", "Gangs", "get_default_gangs", "set_default_gangs", "set_gangs",
    "get_current_gangs", "maybe_get_current_gangs", "GangContext", "create_parallel_gangs",
    "create_fsdp_gangs", "create_fake_gangs", "broadcast_flag", "all_sum",
}  # fmt: skip
"""Every public name fairseq2 0.8.1's gang module defines."""
MIGRATION = Path(__file__).parents[2] / "docs/migration.rst"
LAUNCH_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE", "SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
)  # fmt: skip


@pytest.fixture
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment in which neither torchrun nor SLURM started this process."""
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def names_in(section: str) -> set[str]:
    """The double-backquoted names of one entry of migration.rst's list of names."""
    lines = MIGRATION.read_text(encoding="utf-8").split(f"\n{section}\n", 1)[1].splitlines()
    entry = " ".join(line for line in itertools.takewhile(lambda line: line[:1] == " ", lines))
    return set(re.findall(r"``(?:\w+\.)?(\w+)``", entry))


def test_every_name_the_migration_page_offers_is_there():
    fields = {"root", "dp", "rdp", "sdp", "tp", "pp", "device", "close"}
    assert all(hasattr(compat.Gangs, field) for field in fields)
    for section in ("Offered, from fairseq2 0.8.1", "Offered, from older fairseq2 releases"):
        for name in names_in(section) - fields - {"num_threads"}:
            owner = compat.ProcessGroupGang if "process_group" in name else compat
            if name in ("create_gang", "make_gang"):
                owner = compat.Gang
            assert hasattr(owner, name), (section, name)
    assert set(compat.__all__) <= {name for name in dir(compat) if not name.startswith("_")}


def test_what_the_page_says_is_not_offered_is_not_here():
    missing = names_in("Not offered") - {"setup_hybrid_fsdp_gangs"}
    assert missing == {"from_process_group"}
    assert not hasattr(compat.ProcessGroupGang, "from_process_group")


def test_every_public_name_of_fairseq2_0_8_1_s_gang_module_is_here():
    assert set(compat.__all__) >= FAIRSEQ2_0_8_1
    assert names_in("Offered, from fairseq2 0.8.1") >= FAIRSEQ2_0_8_1 | {"Device"}


def test_the_installed_fairseq2_gang_module_has_no_public_name_more():
    gang = pytest.importorskip("fairseq2.gang", reason="fairseq2 is not installed")
    defined = {
        name
        for name, value in vars(gang).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == gang.__name__
    }
    assert defined == FAIRSEQ2_0_8_1


def test_the_launch_helpers_read_torchrun_then_slurm_and_default_to_one_process(no_launcher):
    assert (compat.get_rank(), compat.get_world_size()) == (0, 1)
    assert (compat.get_local_rank(), compat.get_local_world_size()) == (0, 1)
    for name, value in {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1",
                        "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29500"}.items():  # fmt: skip
        no_launcher.setenv(name, value)
    assert (compat.get_rank(), compat.get_world_size()) == (5, 8)
    assert (compat.get_local_rank(), compat.get_local_world_size()) == (1, 4)
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        no_launcher.delenv(name)
    for name, value in {"SLURM_PROCID": "6", "SLURM_NTASKS": "16", "SLURM_LOCALID": "2",
                        "SLURM_NTASKS_PER_NODE": "8"}.items():  # fmt: skip
        no_launcher.setenv(name, value)
    assert (compat.get_rank(), compat.get_world_size()) == (6, 16)
    assert (compat.get_local_rank(), compat.get_local_world_size()) == (2, 8)
    no_launcher.setenv("RANK", "9")
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        compat.get_rank()


def test_from_default_process_group_wraps_a_running_group_without_owning_it():
    with pytest.raises(RuntimeError, match="not initialised"):
        compat.ProcessGroupGang.from_default_process_group()
    with simulate_gangs(8, 3) as gangs:
        root = compat.ProcessGroupGang.from_default_process_group()
        assert (root.rank, root.size, root.device) == (3, 8, CPU)
        assert root.as_process_group() is gangs.root.as_process_group()
        again = compat.ProcessGroupGang.init_default_process_group(ok_initialized=True)
        assert again.as_process_group() is dist.group.WORLD
        with pytest.raises(RuntimeError, match="already initialised"):
            compat.ProcessGroupGang.init_default_process_group()
        root.close()
        again.close()
        assert dist.is_initialized()


def test_init_default_process_group_starts_a_real_world_from_torchrun_variables(no_launcher):
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": str(free_port())}.items():  # fmt: skip
        no_launcher.setenv(name, value)
    threads = torch.get_num_threads()
    root = compat.ProcessGroupGang.init_default_process_group(device=CPU, num_threads=1)
    try:
        assert torch.get_num_threads() == 1
        assert (root.rank, root.size) == (0, 1) and dist.get_backend() == "gloo"
        t = torch.ones(2)
        root.all_reduce(t, compat.ReduceOperation.SUM)
        assert t.tolist() == [1.0, 1.0]
    finally:
        root.close()
        torch.set_num_threads(threads)
    assert not dist.is_initialized(), "the gang that started the default group shuts it down"


def test_one_process_asking_for_tensor_parallelism_is_told_to_start_more(no_launcher):
    root = compat.setup_root_gang(CPU)
    try:
        assert root.size == 1 and isinstance(root, gm.ProcessGroupGang)
        hint = "this job has one process: run it under torchrun --nproc-per-node 2"
        for call in (compat.setup_parallel_gangs, compat.create_parallel_gangs):
            with pytest.raises(ValueError, match=rf"^tp_size: expected a factor .*; {hint}"):
                call(root, tp_size=2)
        with pytest.raises(ValueError, match=hint):
            gm.create_gangs(root, tp=2)
        with compat.create_parallel_gangs(root) as gangs:
            with pytest.raises(ValueError, match=rf"^intra_node_size: .*; {hint}"):
                compat.setup_hybrid_fsdp_gangs(gangs, intra_node_size=2)
            assert gangs.device == CPU and gangs["tp"].size == 1
        gangs.close()
    finally:
        root.close()
