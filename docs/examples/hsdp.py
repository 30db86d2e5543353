"""FSDP2 over gangs.mesh: hybrid sharding (HSDP) or full sharding, checked against one process.

torchrun --nproc-per-node 4 docs/examples/hsdp.py            # HSDP: 2 replicas x 2 shards
torchrun --nproc-per-node 4 docs/examples/hsdp.py --fsdp     # FSDP: 4 shards
"""

from __future__ import annotations

import sys

from torch.distributed.fsdp import fully_shard
from toy_model import (
    check_sharded,
    compare,
    log,
    make_model,
    reference_losses,
    setup_logging,
    train_data_parallel,
)

import gangmesh as gm


def main() -> None:
    setup_logging()
    root = gm.setup_root_gang()
    fsdp = "--fsdp" in sys.argv or root.size % 2
    replicas = 1 if fsdp else 2
    gangs = gm.create_gangs(root, dp_replicate=replicas, dp_shard=-1)
    if root.rank == 0:
        noun = "process" if root.size == 1 else "processes"
        log.info("%s on %d %s: %s", "FSDP" if fsdp else "HSDP", root.size, noun, gangs)

    model = make_model(root.device)
    assert gangs.mesh is not None
    mesh = gangs.mesh["dp_shard"] if fsdp else gangs.mesh["dp_replicate", "dp_shard"]
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    check_sharded(model.blocks[0].up.weight, gangs.sdp.size, root.rank)

    losses = train_data_parallel(model, gangs.dp)
    compare(losses, reference_losses(root.device), root.rank)


if __name__ == "__main__":
    main()
