"""fairseq2 0.8.1's own layers, trained on gangmesh's gangs and meshes.

torchrun --nproc-per-node 4 docs/examples/migration/fairseq2_library.py   # tp 2 x dp_shard 2

gangmesh plans the gangs; fairseq2's ``set_gangs`` makes them fairseq2's current gangs,
where its sharded layers find their tp gang; FSDP2 shards over gangmesh's mesh of the
data dimensions (right for HSDP at any tp). Entered with ``with gangs:`` as well, a rank
that breaks a step is named by every other one.
"""

from __future__ import annotations

import fairseq2.gang
import torch
from fairseq2.nn import (
    ColumnShardedLinear,
    Linear,
    RowShardedLinear,
    StandardEmbedding,
    VocabShardedEmbedding,
)
from torch import Tensor, nn
from torch.distributed.fsdp import fully_shard
from torch.nn.functional import cross_entropy, relu

import gangmesh as gm

VOCAB, DIM, HIDDEN, LENGTH, BATCH, STEPS = 32, 16, 32, 7, 8, 5


class Model(nn.Module):
    """An embedding, a feed-forward block and an output projection: fairseq2's layers, made
    whole from one seed, then sharded as the current gangs say."""

    def __init__(self, sharded: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = StandardEmbedding(VOCAB, DIM)
        self.up, self.down = Linear(DIM, HIDDEN, bias=True), Linear(HIDDEN, DIM, bias=True)
        self.out = Linear(DIM, VOCAB, bias=False)
        if sharded:  # over fairseq2.gang.get_current_gangs().tp
            self.embed = VocabShardedEmbedding.from_embedding(self.embed)
            self.up = ColumnShardedLinear.from_linear(self.up, gather_output=False)
            self.down = RowShardedLinear.from_linear(self.down, scatter_input=False)
            self.out = ColumnShardedLinear.from_linear(self.out)

    def forward(self, x: Tensor) -> Tensor:
        h = self.embed(x)
        return self.out(h + self.down(relu(self.up(h))))


def train(model: nn.Module, dp: gm.Gang | None) -> list[float]:
    """SGD on this data parallel rank's slice of each global batch; each step's global loss."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    data = torch.randint(
        0, VOCAB, (STEPS, BATCH, LENGTH + 1), generator=torch.Generator().manual_seed(1)
    )
    size = BATCH // (dp.size if dp else 1)
    mine = slice((dp.rank if dp else 0) * size, ((dp.rank if dp else 0) + 1) * size)
    losses = []
    for step in data:
        x, y = step[mine, :-1], step[mine, 1:]
        loss = cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss = loss.detach()
        if dp is not None:  # fairseq2's enum, taken by a gangmesh gang
            dp.all_reduce(loss, fairseq2.gang.ReduceOperation.MEAN)
        losses.append(loss.item())
    return losses


def main() -> None:
    root = gm.setup_root_gang()
    gangs = gm.create_gangs(root, tp=2 if root.size % 2 == 0 else 1)
    if root.rank == 0:
        print(gangs)
    with gangs, fairseq2.gang.set_gangs(gangs):
        model = Model(sharded=True)
        fully_shard(model, mesh=gangs.meshes["dp_shard_cp"]["dp_replicate", "dp_shard_cp"])
        losses = train(model, gangs.dp)
    alone = train(Model(sharded=False), None)
    worst = max(abs(a - b) for a, b in zip(losses, alone, strict=True))
    if root.rank == 0:
        for step, (loss, expected) in enumerate(zip(losses, alone, strict=True)):
            print(f"step {step}: loss {loss:.6f} (one process {expected:.6f})")
        print(f"largest difference from one process: {worst:.1e}")
    gangs.close()
    root.close()
    if worst > 1e-5:
        raise SystemExit(f"rank {root.rank}: the losses differ from one process by {worst:.1e}")


if __name__ == "__main__":
    main()
