"""Faults in a compiled tensor-parallel training loop on 2 processes (tp = 2, timeout 10 s).

    compiled_faults.py OUT sigkill|compile_error

Each step shares tp rank 0's batch over the tp gang (a broadcast), then runs two parallel
blocks (docs/examples/compiled_tp.py); the broadcast and each block are compiled apart,
gang calls included.

- "sigkill": backend "eager", ``fullgraph=True``; rank 1 is SIGKILLed in the middle of step 3,
  between its two blocks, while rank 0 goes on into the second block's all-reduce.
- "compile_error": backend "inductor" on a machine without a working C++ compiler (its
  ``cpp.cxx`` names none), ``fullgraph`` off as torch.compile's default: compiling fails on
  every rank.

Every rank that gets an error writes it as it leaves ``with gangs:`` (its type, first line,
culprits), then lets it go uncaught, as a user's script would.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
from common import write_results

import gangmesh as gm

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "docs" / "examples"))
from compiled_tp import ParallelBlock
from toy_model import DIM, Block

TIMEOUT = timedelta(seconds=10)
VICTIM, STEP = 1, 3


def shared(batch: torch.Tensor, tp: gm.Gang) -> torch.Tensor:
    """The batch of tp rank 0, on every rank of the tp gang."""
    tp.broadcast(batch, source_rank=0)
    return batch


def main() -> None:
    mode = sys.argv[2]
    root = gm.setup_root_gang(timeout=TIMEOUT)
    gangs = gm.create_gangs(root, tp=2)
    if mode == "compile_error":
        torch._inductor.config.cpp.cxx = ("no-such-c++",)
    backend, fullgraph = ("inductor", False) if mode == "compile_error" else ("eager", True)
    torch.manual_seed(0)
    blocks = [ParallelBlock(Block(), gangs.tp) for _ in range(2)]
    compiled = [torch.compile(block, backend=backend, fullgraph=fullgraph) for block in blocks]
    share = torch.compile(shared, backend=backend, fullgraph=fullgraph)
    optimizer = torch.optim.SGD([p for block in blocks for p in block.parameters()], lr=0.01)
    try:
        with gangs:
            for step in range(100):
                x = share(torch.randn(4, DIM), gangs.tp)
                x = compiled[0](x)
                if root.rank == VICTIM and step == STEP and mode == "sigkill":
                    write_results(root.rank, {"pid": os.getpid(), "broke_at": time.time()})
                    os.kill(os.getpid(), signal.SIGKILL)
                compiled[1](x).square().mean().backward()
                optimizer.step()
                optimizer.zero_grad()
    except Exception as ex:
        write_results(
            root.rank,
            {
                "type": type(ex).__name__,
                "error": str(ex).strip().splitlines()[0],
                "culprits": list(getattr(ex, "culprits", [])),
                "at": time.time(),
            },
        )
        raise


if __name__ == "__main__":
    main()
