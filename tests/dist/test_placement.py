"""Placement on 8 real gloo processes whose host identities interleave: 0, 2, 4, 6 on one
host, 1, 3, 5, 7 on the other (as SLURM's cyclic distribution numbers them)."""

from __future__ import annotations

import pytest

from tests.dist.launch import free_port, processes

pytestmark = pytest.mark.dist

WORLD = 8


def _run(tmp_path, mode: str, layout: str = "hsdp") -> dict[int, dict]:
    port = str(free_port())
    out = tmp_path / mode

    def env_of(rank: int) -> dict[str, str]:
        return {
            "RANK": str(rank),
            "WORLD_SIZE": str(WORLD),
            "LOCAL_RANK": str(rank // 2),
            "LOCAL_WORLD_SIZE": str(WORLD // 2),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "GANGMESH_HOST": "host-a" if rank % 2 == 0 else "host-b",
        }

    run = processes("placement.py", WORLD, str(out), mode, layout, timeout=240, env_of=env_of)
    assert run.returncode == 0, run.output
    found = run.results(out)
    assert sorted(found) == list(range(WORLD)), run.output
    return found


def test_without_placement_the_tp_groups_cross_hosts(tmp_path):
    found = _run(tmp_path, "numbered")
    for rank, result in found.items():
        assert result["placement"] == []
        assert result["tp_members"] == [rank - rank % 2, rank - rank % 2 + 1]
        assert len(set(result["tp_hosts"])) == 2, "each tp gang spans both hosts"
        assert ["tp", "node", 4] in result["findings"]
        assert result["mesh_disagreements"] == []
        assert result["losses"] == pytest.approx(result["reference"], rel=1e-5)


def test_with_placement_every_tp_group_shares_a_host_and_trains_like_one_process(tmp_path):
    found = _run(tmp_path, "placed")
    for rank, result in found.items():
        assert result["placement"] == [0, 2, 4, 6, 1, 3, 5, 7]
        assert rank in result["tp_members"] and len(result["tp_members"]) == 2
        assert {m % 2 for m in result["tp_members"]} == {rank % 2}, "tp members share a host"
        assert len(set(result["tp_hosts"])) == 1, "the real tp group runs on one host"
        assert [f for f in result["findings"] if f[0] == "tp"] == []
        assert result["mesh_tp_rank"] == result["tp_rank"]
        assert result["mesh_disagreements"] == []
        assert result["losses"] == pytest.approx(result["reference"], rel=1e-5)


def test_placed_fsdp_and_tp_reorder_the_data_dimension_and_still_train_like_one_process(tmp_path):
    # 4 shards x tp 2: host order gives tp [0,2] [4,6] [1,3] [5,7]; the shards then take
    # the order in which every dp_shard group ascends, as torch numbers its members.
    found = _run(tmp_path, "placed", "fsdp")
    for rank, result in found.items():
        assert result["placement"] == [0, 2, 1, 3, 4, 6, 5, 7]
        assert {m % 2 for m in result["tp_members"]} == {rank % 2}
        assert len(set(result["tp_hosts"])) == 1
        assert result["mesh_disagreements"] == [], "mesh coordinates are the groups' ranks"
        assert result["losses"] == pytest.approx(result["reference"], rel=1e-5)
