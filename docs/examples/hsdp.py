"""FSDP2 over gangs.meshes["dp_shard_cp"]: hybrid (HSDP) or full sharding, checked against one
process.

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
    # The mesh FSDP2 shards over: dp_shard x cp merged (cp is 1 here), beside dp_replicate.
    data = gangs.meshes["dp_shard_cp"]
    mesh = data["dp_shard_cp"] if fsdp else data["dp_replicate", "dp_shard_cp"]
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    check_sharded(model.blocks[0].up.weight, gangs.sdp.size, root.rank)

    losses = train_data_parallel(model, gangs.dp)
    compare(losses, reference_losses(root.device), root.rank)


if __name__ == "__main__":
    main()
