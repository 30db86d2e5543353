"""local_samples on a simulated rank of a large world, and in a real world of 2 processes.

Neither test imports the plugin: installing gangmesh is enough.
"""

from __future__ import annotations

import pytest
import torch
from batch_slicing import local_samples

import gangmesh as gm


def test_the_last_rank_of_a_large_world(simulated_gangs):
    gangs = simulated_gangs(4096, 4095, dp_replicate=2, tp=8)  # dp: 2 x 256 ranks
    assert (gangs.dp.rank, gangs.dp.size) == (511, 512)
    assert local_samples(gangs.plan, gangs.root.rank, 1024) == range(1022, 1024)


@pytest.mark.gangmesh_world(2)
def test_the_ranks_of_a_real_world_read_every_sample_once(root_gang):
    gangs = gm.create_gangs(root_gang)  # dp over both processes
    reads = torch.zeros(10)
    mine = local_samples(gangs.plan, root_gang.rank, 10)
    reads[mine.start : mine.stop] += 1
    gangs.dp.all_reduce(reads, gm.ReduceOperation.SUM)
    assert reads.tolist() == [1.0] * 10
    gangs.close()
