"""fairseq2 0.8.1's own modules, trained for a few steps on the data parallel slices of
global batches, and the same training in one process.

Two models: one made of fairseq2's layers (a vocabulary-sharded token embedding, an
embedding-dimension-sharded position embedding, a column-sharded and a row-sharded linear
with one all-reduce between them, a column-sharded output projection), each process making
the whole model from one seed and a tensor parallel one keeping its shards (fairseq2's
``from_linear`` and ``from_embedding``); and a one-layer LLaMA from fairseq2's own model
hub, which shards it over the gangs it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from fairseq2.models.llama import LLaMAConfig, get_llama_model_hub
from fairseq2.nn import (
    BatchLayout,
    ColumnShardedLinear,
    Linear,
    RowShardedLinear,
    ShardedEmbedding,
    StandardEmbedding,
    VocabShardedEmbedding,
)
from torch import Tensor
from torch.nn import Module
from torch.nn.functional import cross_entropy, relu

VOCAB, DIM, HIDDEN, LENGTH, BATCH, STEPS, LR = 32, 16, 32, 7, 8, 5, 0.5
CPU = torch.device("cpu")
LLAMA = LLaMAConfig(
    model_dim=DIM,
    max_seq_len=LENGTH + 1,
    vocab_size=VOCAB,
    num_layers=1,
    num_attn_heads=2,
    num_key_value_heads=2,
    ffn_inner_dim=HIDDEN,
    ffn_inner_dim_scale=1.0,
    ffn_inner_dim_multiple_of=1,
)


class Tiny(Module):
    """Token and position embeddings, a residual feed-forward block, an output projection."""

    def __init__(
        self, tokens: Module, positions: Module, up: Module, down: Module, out: Module
    ) -> None:
        super().__init__()
        self.tokens, self.positions, self.up, self.down, self.out = (
            tokens,
            positions,
            up,
            down,
            out,
        )

    def forward(self, x: Tensor) -> Tensor:
        h = self.tokens(x) + self.positions(torch.arange(x.size(1)))
        h = h + self.down(relu(self.up(h)))
        return self.out(h)


def whole_model() -> Tiny:
    """The model of one process, the same in every process."""
    torch.manual_seed(0)
    return Tiny(
        StandardEmbedding(VOCAB, DIM),
        StandardEmbedding(LENGTH, DIM),
        Linear(DIM, HIDDEN, bias=True),
        Linear(HIDDEN, DIM, bias=True),
        Linear(DIM, VOCAB, bias=False),
    )


def sharded_model() -> Tiny:
    """The model with every layer sharded over the tp gang of fairseq2's current gangs
    (``fairseq2.gang.get_current_gangs``), by fairseq2's own classes."""
    whole = whole_model()
    return Tiny(
        VocabShardedEmbedding.from_embedding(whole.tokens),
        ShardedEmbedding.from_embedding(whole.positions),
        ColumnShardedLinear.from_linear(whole.up, gather_output=False),
        RowShardedLinear.from_linear(whole.down, scatter_input=False),
        ColumnShardedLinear.from_linear(whole.out),
    )


class Decoder(Module):
    """A fairseq2 decoder model as a module from tokens to logits."""

    def __init__(self, model: Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x, BatchLayout.of(x))


def llama(gangs: object | None) -> Decoder:
    """A LLaMA made by fairseq2's hub from one seed: sharded as ``gangs`` say, or whole."""
    torch.manual_seed(0)
    hub = get_llama_model_hub()
    if gangs is None:
        return Decoder(hub.create_new_model(LLAMA, device=CPU))
    return Decoder(hub.create_new_model(LLAMA, gangs=gangs))


def batches() -> list[tuple[Tensor, Tensor]]:
    """The global batches of every step, and one more to evaluate after the last."""
    generator = torch.Generator().manual_seed(1)
    data = torch.randint(0, VOCAB, (STEPS + 1, BATCH, LENGTH + 1), generator=generator)
    return [(step[:, :-1], step[:, 1:]) for step in data]


@dataclass
class Losses:
    """The loss of each step on the global batch, and after the last step."""

    steps: list[float]
    after: float

    def as_dict(self) -> dict[str, object]:
        """The losses as JSON takes them."""
        return asdict(self)


def train(
    model: Module, dp_rank: int, dp_size: int, mean_over_dp: Callable[[Tensor], Tensor]
) -> Losses:
    """SGD on this data parallel rank's slice of each global batch; ``mean_over_dp``
    averages a loss over the data parallel ranks."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    size = BATCH // dp_size
    mine = slice(dp_rank * size, (dp_rank + 1) * size)
    losses = []
    *steps, last = batches()
    for x, y in steps:
        loss = cross_entropy(model(x[mine]).reshape(-1, VOCAB), y[mine].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(mean_over_dp(loss.detach()).item())
    with torch.no_grad():
        x, y = last
        after = cross_entropy(model(x[mine]).reshape(-1, VOCAB), y[mine].reshape(-1))
    return Losses(losses, mean_over_dp(after).item())


def one_process(model: Module) -> Losses:
    """The same training in one process, on whole batches."""
    return train(model, 0, 1, lambda loss: loss)
