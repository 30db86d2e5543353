"""2-D parallel: tensor parallel blocks over gangs.mesh["tp"], FSDP2 over the data dims.

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
    assert gangs.mesh is not None
    for block in model.blocks:
        parallelize_module(block, gangs.mesh["tp"], BLOCK_PLAN)
        fully_shard(block, mesh=gangs.mesh["dp_shard"])
    fully_shard(model, mesh=gangs.mesh["dp_shard"])
    # `up` rows are split by tp, then by dp.
    check_sharded(model.blocks[0].up.weight, gangs.tp.size * gangs.dp.size, root.rank)

    losses = train_data_parallel(model, gangs.dp)
    compare(losses, reference_losses(root.device), root.rank)


if __name__ == "__main__":
    main()
