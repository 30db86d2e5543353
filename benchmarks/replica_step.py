"""One process of replica_bench: train a 4 MB model for some steps and write the step times.

    torchrun --nproc-per-node 4 benchmarks/replica_step.py OUT plain
    GANGMESH_REPLICA_GROUP=G torchrun --nproc-per-node 2 benchmarks/replica_step.py OUT managed \\
        LIGHTHOUSE

plain: HSDP over the 4 processes (dp_replicate 2 x dp_shard 2); managed: this launch is one
replica group (dp_shard 2), reduced with the other through torchft.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard

import gangmesh as gm

WIDTH, LAYERS, WARMUP, STEPS = 512, 4, 5, 30  # 4 x 512 x 512 float32 weights: 4 MB


def main() -> None:
    out, mode = Path(sys.argv[1]), sys.argv[2]
    logging.getLogger("torchft").setLevel(logging.CRITICAL)
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)))
    optimizer: torch.optim.Optimizer
    if mode == "plain":
        gangs = gm.create_gangs(root, dp_replicate=2, dp_shard=-1)
        mesh = gangs.meshes["dp_shard_cp"]["dp_replicate", "dp_shard_cp"]
    else:
        replicas = gm.join_replicas(root, lighthouse=sys.argv[3], min_replicas=2)
        gangs = gm.create_gangs(root, dp_shard=-1, replicas=replicas)
        mesh = gangs.meshes["dp_shard_cp"]["dp_shard_cp"]
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    if mode != "plain":
        optimizer = replicas.wrap(model, optimizer)
    inputs = torch.randn(8, WIDTH)
    times = []
    for step in range(WARMUP + STEPS):
        start = time.perf_counter()
        optimizer.zero_grad()
        model(inputs).square().mean().backward()
        optimizer.step()
        if step >= WARMUP:
            times.append(time.perf_counter() - start)
    root.barrier()
    if root.rank == 0:
        name = "plain" if mode == "plain" else f"group{replicas.group}"
        (out / f"{name}.json").write_text(json.dumps(times))
    if mode != "plain":
        replicas.close()


if __name__ == "__main__":
    main()
