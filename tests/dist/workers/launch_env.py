"""Report what setup_root_gang read from the launcher's environment."""

from __future__ import annotations

import torch
from common import write_results

import gangmesh as gm
from gangmesh.runtime.environment import read_launch_environment

env = read_launch_environment()
assert env is not None
gang = gm.setup_root_gang()
total = torch.tensor([float(gang.rank)])
gang.all_reduce(total, gm.ReduceOperation.SUM)
write_results(
    gang.rank,
    {
        "launcher": env.launcher,
        "rank": gang.rank,
        "size": gang.size,
        "local_rank": env.local_rank,
        "local_world_size": env.local_world_size,
        "kind": type(gang).__name__,
        "sum": total.item(),
    },
)
