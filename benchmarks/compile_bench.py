"""A compiled step whose collectives are Gang calls vs the same step with the raw torch calls.

    python -m benchmarks.compile_bench [--nproc 2] [--backends eager,inductor] [--steps 10]
                                       [--pairs 101]

Under torchrun, ``--nproc`` gloo processes (one tp gang of all of them) compile two steps
per backend, each with ``fullgraph=True``, once with Gang calls and once with what a user
writes without gangmesh:

- "tp block": forward and backward of a tensor-parallel MLP block whose autograd functions
  sum over the gang (``gang.all_reduce`` / ``torch.distributed.all_reduce(group=pg)``, which
  dynamo rewrites into a functional collective).
- "every collective": all_reduce, all_gather, reduce_scatter, all_to_all, broadcast and
  barrier of small tensors; the raw side calls the public functions dynamo rewrites, and for
  broadcast and barrier, which it rewrites on no supported torch, the functional collectives.

Blocks of ``--steps`` steps alternate raw, gang, gang, raw (ABBA); the ratio of each pair,
median over ``--pairs``, the slowest process counts. Target: at most 1.02x.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as functional
import torch.nn.functional as F
from torch import Tensor

import gangmesh as gm
from benchmarks.report import free_port, json_argument, print_table, write_json

TITLE = "Compiled step with Gang collectives / with raw torch.distributed calls (gloo, ABBA)"
TARGET = 1.02
DIM, HIDDEN, BATCH = 64, 256, 16
SUM = gm.ReduceOperation.SUM

Sum = Callable[[Tensor], None]
"""Sums a tensor over the gang, in place."""


class _SumGradients(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, sum_over_gang: Sum) -> Tensor:
        ctx.sum_over_gang = sum_over_gang
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        grad = grad.contiguous().clone()
        ctx.sum_over_gang(grad)
        return grad, None


class _SumOutputs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, sum_over_gang: Sum) -> Tensor:
        x = x.contiguous().clone()
        sum_over_gang(x)
        return x

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


def tp_block(sum_over_gang: Sum, size: int, backend: str) -> Callable[[], None]:
    """Forward and backward of an MLP block sliced over a gang of ``size``, compiled by
    ``backend``."""
    torch.manual_seed(0)
    up = torch.randn(HIDDEN // size, DIM, requires_grad=True)
    down = torch.randn(DIM, HIDDEN // size, requires_grad=True)
    x = torch.randn(BATCH, DIM)

    def forward(x: Tensor) -> Tensor:
        hidden = F.gelu(F.linear(_SumGradients.apply(x, sum_over_gang), up))
        return x + _SumOutputs.apply(F.linear(hidden, down), sum_over_gang)

    compiled = torch.compile(forward, backend=backend, fullgraph=True)

    def step() -> None:
        compiled(x).square().mean().backward()

    return step


def every_collective(gang: gm.Gang, raw: bool, backend: str) -> Callable[[], None]:
    """One call of each collective on small tensors, by Gang calls or raw ones, compiled by
    ``backend``."""
    n, pg = gang.size, gang.as_process_group()
    name = pg.group_name
    tensor, rows = torch.ones(16), torch.ones(16 * n)
    gathered, scattered, exchanged = torch.empty(16 * n), torch.empty(16), torch.empty(16 * n)

    def with_gang(t: Tensor) -> None:
        gang.all_reduce(t, SUM)
        gang.all_gather(gathered, t)
        gang.reduce_scatter(scattered, rows, SUM)
        gang.all_to_all(exchanged, rows)
        gang.broadcast(t, source_rank=0)
        gang.barrier()

    def with_torch(t: Tensor) -> None:
        dist.all_reduce(t, group=pg)
        dist.all_gather_into_tensor(gathered, t, group=pg)
        dist.reduce_scatter_tensor(scattered, rows, group=pg)
        dist.all_to_all_single(exchanged, rows, group=pg)
        t.copy_(functional.broadcast(t, 0, name))
        functional.all_reduce(torch.zeros(1), "sum", name)

    compiled = torch.compile(with_torch if raw else with_gang, backend=backend, fullgraph=True)
    return lambda: compiled(tensor)


def abba(
    raw: Callable[[], None], ours: Callable[[], None], steps: int, pairs: int
) -> dict[str, float]:
    """Compile both steps, then time them in ABBA blocks of ``steps``: the median of each."""

    def block(step: Callable[[], None]) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        return time.perf_counter() - start

    raw(), ours()  # compile both
    ratios, raw_s, gang_s = [], [], []
    for _ in range(pairs):
        a1, b1, b2, a2 = block(raw), block(ours), block(ours), block(raw)
        ratios.append((b1 + b2) / (a1 + a2))
        raw_s += [a1, a2]
        gang_s += [b1, b2]
    return {
        "raw_step_us": 1e6 * statistics.median(raw_s) / steps,
        "gang_step_us": 1e6 * statistics.median(gang_s) / steps,
        "ratio": statistics.median(ratios),
    }


def worker(out: str, backends: list[str], steps: int, pairs: int) -> None:
    """Run inside torchrun: time each step both ways and write this rank's rows."""
    root = gm.setup_root_gang(torch.device("cpu"), timeout=timedelta(seconds=120))
    gangs = gm.create_gangs(root, tp=root.size)
    pg = gangs.tp.as_process_group()
    rows = []
    for backend in backends:
        torch._dynamo.reset()
        size = gangs.tp.size
        block_gang = tp_block(lambda t: gangs.tp.all_reduce(t, SUM), size, backend)
        block_raw = tp_block(lambda t: dist.all_reduce(t, group=pg), size, backend)
        rows.append({"backend": backend, "step": "tp block",
                     **abba(block_raw, block_gang, steps, pairs)})  # fmt: skip
        each_gang = every_collective(gangs.tp, False, backend)
        each_raw = every_collective(gangs.tp, True, backend)
        rows.append({"backend": backend, "step": "every collective",
                     **abba(each_raw, each_gang, steps, pairs)})  # fmt: skip
    Path(out, f"rank{root.rank}.json").write_text(json.dumps(rows))
    gangs.close()
    root.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--backends", default="eager,inductor")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=101)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    json_argument(parser)
    args = parser.parse_args()
    backends = args.backends.split(",")
    if args.worker:
        worker(args.worker, backends, args.steps, args.pairs)
        return
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.nproc}",
            "--master-addr=127.0.0.1", f"--master-port={free_port()}",
            "-m", "benchmarks.compile_bench", "--worker", out, "--backends", args.backends,
            "--steps", str(args.steps), "--pairs", str(args.pairs),
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, check=True, timeout=1800, env=env, capture_output=True)
        per_rank = [json.loads(p.read_text()) for p in sorted(Path(out).glob("rank*.json"))]
    rows = [
        {"nproc": args.nproc, **max(same, key=lambda row: row["ratio"]), "target": TARGET}
        for same in zip(*per_rank, strict=True)
    ]
    print_table(TITLE, rows)
    write_json(args.json, TITLE, rows)


if __name__ == "__main__":
    main()
