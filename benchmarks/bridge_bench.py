"""Pushing a trainer's weights to a generator over bridges vs raw torch.distributed broadcasts.

    python -m benchmarks.bridge_bench [--dim 256] [--blocks 4] [--pairs 15] [--pushes 5]

The job of docs/examples/two_models.py on 8 local gloo processes: a trainer part (dp_shard 2 x
tp 2, ranks 0-3) and a generator part (2 replicas x tp 2, ranks 4-7). For each tp rank, the
trainer's dp_shard rank 0 sends its tp shard of every weight of a model of ``--blocks`` MLP
blocks of width ``--dim`` (4x hidden) to the generator processes of that tp rank: one
broadcast per tensor over ``parts.bridge`` (Gang.broadcast), against ``dist.broadcast`` of the
same tensors over groups of the same ranks made with ``dist.new_group``. Alternating blocks
of ``--pushes`` pushes (raw, gang, gang, raw), the slowest process of each block counting;
the ratio is the median over ``--pairs`` pairs. Target: at most 1.1x.
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
from pathlib import Path

import torch
import torch.distributed as dist

import gangmesh as gm
from benchmarks.report import free_port, json_argument, print_table, write_json

TITLE = "Trainer weights to the generator: bridges vs raw broadcasts (8 gloo processes)"
TARGET = 1.1
TRAINER = {"dp_shard": 2, "tp": 2}
GENERATOR = {"dp_replicate": 2, "dp_shard": 1, "tp": 2}


def tp_shards(dim: int, blocks: int) -> list[torch.Tensor]:
    """One tp rank's shards of the weights: per block an up (column) and a down (row) linear
    layer of hidden size 4 x ``dim``, split over tp 2, with biases and a layer norm."""
    hidden = 4 * dim // 2
    shapes = [(hidden, dim), (hidden,), (dim, hidden), (dim,), (dim,), (dim,)] * blocks
    return [torch.randn(shape) for shape in shapes]


def timed(push: Callable[[], None], pushes: int, root: gm.Gang) -> float:
    """Seconds for ``pushes`` pushes on the slowest process."""
    root.barrier()
    start = time.perf_counter()
    for _ in range(pushes):
        push()
    took = torch.tensor([time.perf_counter() - start])
    root.all_reduce(took, gm.ReduceOperation.MAX)
    return float(took.item())


def worker(out: str, dim: int, blocks: int, pairs: int, pushes: int) -> None:
    root = gm.setup_root_gang()
    parts = gm.create_parts(root, trainer=4, generator=4)
    layouts = {"trainer": TRAINER, "generator": GENERATOR}
    routes = parts.pair_by_coordinate("tp", layouts, where={"trainer": {"dp_shard": 0}})
    bridges = [parts.bridge(**route) for route in routes]
    members = [sorted(rank for ranks in route.values() for rank in ranks) for route in routes]
    raw_groups = [dist.new_group(ranks) for ranks in members]
    weights = tp_shards(dim, blocks)
    sources = [route["trainer"][0] for route in routes]
    me = root.rank

    def gang_push() -> None:
        for bridge, source in zip(bridges, sources, strict=True):
            if bridge is not None:
                at = bridge.global_ranks.index(source)  # type: ignore[attr-defined]
                for weight in weights:
                    bridge.broadcast(weight, at)

    def raw_push() -> None:
        for group, source, ranks in zip(raw_groups, sources, members, strict=True):
            if me in ranks:
                for weight in weights:
                    dist.broadcast(weight, src=source, group=group)

    gang_push(), raw_push()
    ratios, raw_s, gang_s = [], [], []
    for _ in range(pairs):
        a1, b1 = timed(raw_push, pushes, root), timed(gang_push, pushes, root)
        b2, a2 = timed(gang_push, pushes, root), timed(raw_push, pushes, root)
        ratios.append((b1 + b2) / (a1 + a2))
        raw_s.append((a1 + a2) / (2 * pushes))
        gang_s.append((b1 + b2) / (2 * pushes))
    if me == 0:
        numel = sum(w.numel() for w in weights)
        row = {"bytes_per_tp_rank": numel * 4, "tensors": len(weights),
               "raw_ms": statistics.median(raw_s) * 1e3,
               "bridge_ms": statistics.median(gang_s) * 1e3,
               "ratio": statistics.median(ratios), "target": TARGET}  # fmt: skip
        Path(out, "row.json").write_text(json.dumps(row))
    for group in raw_groups:
        dist.destroy_process_group(group)
    parts.close()
    root.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dim", type=int, default=256, help="model width")
    parser.add_argument("--blocks", type=int, default=4, help="MLP blocks")
    parser.add_argument("--pairs", type=int, default=15, help="ABBA pairs")
    parser.add_argument("--pushes", type=int, default=5, help="pushes per timed block")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    json_argument(parser)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.dim, args.blocks, args.pairs, args.pushes)
        return
    rows = []
    for dim in sorted({64, args.dim}):
        with tempfile.TemporaryDirectory() as out:
            cmd = [
                sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=8",
                "--master-addr=127.0.0.1", f"--master-port={free_port()}",
                "-m", "benchmarks.bridge_bench", "--worker", out, "--dim", str(dim),
                "--blocks", str(args.blocks), "--pairs", str(args.pairs),
                "--pushes", str(args.pushes),
            ]  # fmt: skip
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            subprocess.run(cmd, check=True, timeout=1200, env=env, capture_output=True)
            rows.append(json.loads(Path(out, "row.json").read_text()))
    print_table(TITLE, rows)
    write_json(args.json, TITLE, rows)


if __name__ == "__main__":
    main()
