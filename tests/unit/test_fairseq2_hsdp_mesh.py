"""fairseq2 0.8.1's ``to_fsdp2`` builds its HSDP mesh wrong wherever data parallelism is not
the whole world (tp > 1, pp > 1): ``DeviceMesh.from_group([rdp, sdp],
mesh=torch.arange(dp.size).view(rdp.size, sdp.size))`` numbers the mesh by data-parallel
ranks where DeviceMesh takes global ones. Shown on simulated rank 5 of 8 (tp 2 x
dp_replicate 2 x dp_shard 2, gangs from gangmesh's ``create_gangs``, which are right), with
the mesh gangmesh builds for the same gangs beside it."""

from __future__ import annotations

import pytest
import torch
from torch.distributed import get_process_group_ranks
from torch.distributed.fsdp import fully_shard

pytest.importorskip("fairseq2", reason="fairseq2 is not installed")

from fairseq2.nn import Linear
from fairseq2.nn.fsdp import to_fsdp2

RANK = 5  # rdp 1, sdp 0, tp 1: dp rank 2 of the data parallel gang [1, 3, 5, 7]


def groups_of(mesh) -> list[list[int]]:
    return [get_process_group_ranks(mesh.get_group(dim)) for dim in range(mesh.ndim)]


def test_fairseq2_s_hsdp_mesh_leaves_out_a_rank_that_gangmesh_s_mesh_places(simulated_gangs):
    gangs = simulated_gangs(8, RANK, tp=2, dp_replicate=2, dp_shard=2)
    assert (gangs.rdp.rank, gangs.sdp.rank, gangs.tp.rank, gangs.dp.rank) == (1, 0, 1, 2)

    torch.manual_seed(0)
    theirs = to_fsdp2(Linear(4, 4, bias=False), gangs, lambda module, wrap: module)
    mesh = theirs.weight.device_mesh
    assert groups_of(mesh) == [[1, 5], [5, 7]]  # the gangs' groups, right
    assert mesh.mesh.tolist() == [[0, 1], [2, 3]]  # but numbered 0..dp.size-1
    assert mesh.get_coordinate() is None  # so rank 5 is not in its own mesh
    with pytest.raises(RuntimeError, match=r"size of tensor b \(0\)"):
        theirs(torch.ones(2, 4))  # FSDP2 takes this rank's shard to be empty

    ours = Linear(4, 4, bias=False)
    fully_shard(ours, mesh=gangs.meshes["dp_shard_cp"]["dp_replicate", "dp_shard_cp"])
    mesh = ours.weight.device_mesh
    assert groups_of(mesh) == [[1, 5], [5, 7]]
    assert mesh.mesh.tolist() == [[1, 3], [5, 7]]  # global ranks
    assert mesh.get_coordinate() == [1, 0]
    assert ours(torch.ones(2, 4)).shape == (2, 4)
