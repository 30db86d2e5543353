"""A gang's collectives in a program torch.export traces: the functional collectives, by the
group's name, in the exported graph, with the eager call's result (a gloo world of one)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import gangmesh as gm


@pytest.fixture
def root():
    gang = gm.ProcessGroupGang.create_default_process_group(
        torch.device("cpu"), store=dist.HashStore(), rank=0, world_size=1,
        timeout=timedelta(seconds=30),
    )  # fmt: skip
    yield gang
    gang.close()


class Exchange(torch.nn.Module):
    def __init__(self, gang: gm.Gang) -> None:
        super().__init__()
        self.gang = gang

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 3
        self.gang.all_reduce(y, gm.ReduceOperation.MAX)
        self.gang.broadcast(y, source_rank=0)
        return y + 1


@pytest.mark.parametrize("strict", [False, True])
def test_an_exported_program_holds_the_gang_collectives(root, strict):
    x = torch.arange(4.0)
    program = torch.export.export(Exchange(root), (x,), strict=strict)
    ops = [  # the graph and its submodules (no_grad regions are submodules of their own)
        str(node.target)
        for module in program.graph_module.modules()
        if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
    ]
    assert sorted(op for op in ops if op.startswith("_c10d_functional.")) == [
        "_c10d_functional.all_reduce.default",
        "_c10d_functional.broadcast.default",
        "_c10d_functional.wait_tensor.default",
        "_c10d_functional.wait_tensor.default",
    ]
    assert torch.equal(program.module()(x), Exchange(root)(x))
