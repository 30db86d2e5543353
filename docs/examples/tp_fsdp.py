"""2-D parallel: tensor parallel blocks and FSDP2 over one mesh, gangs.meshes["dp_shard_cp"].

torchrun --nproc-per-node 4 docs/examples/tp_fsdp.py     # TP 2 x DP 2
"""

from __future__ import annotations

from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
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

# In each block, `up` is split by output features and `down` by input features, so the
# activation between them stays sharded and one all-reduce per block restores it.
BLOCK_PLAN = {"up": ColwiseParallel(), "down": RowwiseParallel()}


def main() -> None:
    setup_logging()
    root = gm.setup_root_gang()
    tp = 2 if root.size % 2 == 0 else 1
    gangs = gm.create_gangs(root, tp=tp)
    if root.rank == 0:
        log.info("TP %d x DP %d on %d processes: %s", tp, gangs.dp.size, root.size, gangs)

    model = make_model(root.device)
    # FSDP2 needs its mesh and the tensor parallel mesh sliced from one root mesh.
    mesh = gangs.meshes["dp_shard_cp"]
    for block in model.blocks:
        parallelize_module(block, mesh["tp"], BLOCK_PLAN)
        fully_shard(block, mesh=mesh["dp_shard_cp"])
    fully_shard(model, mesh=mesh["dp_shard_cp"])
    # `up` rows are split by tp, then by dp.
    check_sharded(model.blocks[0].up.weight, gangs.tp.size * gangs.dp.size, root.rank)

    losses = train_data_parallel(model, gangs.dp)
    compare(losses, reference_losses(root.device), root.rank)


if __name__ == "__main__":
    main()
