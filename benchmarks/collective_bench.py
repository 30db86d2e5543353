"""Gang collectives vs the same raw torch.distributed call on the same group (gloo).

    python -m benchmarks.collective_bench [--procs 2,4] [--sizes 8,1K,64K,1M,16M] [--json F]

Each process alternates blocks of raw calls and Gang calls, several rounds; the fastest
block's time per call counts (the least disturbed by other processes on the machine), and
the slowest process counts. ratio = gang / raw.

A second table isolates the Gang layer's own cost per call: the same pairs on torch's fake
backend, where the collective itself does no communication.
"""

from __future__ import annotations

import argparse
import json
import os
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
from gangmesh.check import parse_sizes

TITLE = "Gang collectives vs raw torch.distributed on the same gloo group"
OPS = ("all_reduce", "all_gather", "broadcast")


def calls(gang: gm.ProcessGroupGang, op: str, numel: int) -> tuple[Callable[[], object], ...]:
    """(raw call, Gang call) for one op and message size."""
    pg = gang.as_process_group()
    tensor = torch.ones(numel, dtype=torch.float32)
    if op == "all_reduce":
        return (
            lambda: dist.all_reduce(tensor, group=pg),
            lambda: gang.all_reduce(tensor, gm.ReduceOperation.SUM),
        )
    if op == "all_gather":
        out = torch.empty(gang.size, numel, dtype=torch.float32)
        return (
            lambda: dist.all_gather_single(out.view(-1), tensor, group=pg),
            lambda: gang.all_gather(out, tensor),
        )
    source = gang.size - 1
    return (
        lambda: dist.broadcast(tensor, group=pg, group_src=source),
        lambda: gang.broadcast(tensor, source_rank=source),
    )


def per_call(fn: Callable[[], object], iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


def worker(out: str, sizes: list[int], rounds: int) -> None:
    gang = gm.setup_root_gang()
    assert isinstance(gang, gm.ProcessGroupGang)
    results = {}
    for op in OPS:
        for size in sizes:
            raw, ours = calls(gang, op, max(1, size // 4))
            iters = max(3, min(200, 2_000_000 // max(size, 1)))
            raw()
            ours()
            raw_times, gang_times = [], []
            for _ in range(rounds):
                raw_times.append(per_call(raw, iters))
                gang_times.append(per_call(ours, iters))
            results[f"{op}:{size}"] = [min(raw_times), min(gang_times)]
    Path(out, f"rank{gang.rank}.json").write_text(json.dumps(results))


def run(nproc: int, sizes_text: str, rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
            "--master-addr=127.0.0.1", f"--master-port={free_port()}",
            "-m", "benchmarks.collective_bench", "--worker", out,
            "--sizes", sizes_text, "--rounds", str(rounds),
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, check=True, timeout=1200, env=env, capture_output=True)
        per_rank = [json.loads(p.read_text()) for p in Path(out).glob("rank*.json")]
    return {key: [max(r[key][0] for r in per_rank), max(r[key][1] for r in per_rank)]
            for key in per_rank[0]}  # fmt: skip


def layer_cost(rounds: int, iters: int = 20_000) -> list[dict[str, object]]:
    """Per-call time of raw vs Gang calls on a fake 4-process group (no communication)."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        world = dist.group.WORLD
        assert isinstance(world, dist.ProcessGroup)
        gang = gm.ProcessGroupGang(world, torch.device("cpu"))
        rows = []
        for op in OPS:
            raw, ours = calls(gang, op, 2)
            raw_s = min(per_call(raw, iters) for _ in range(rounds))
            gang_s = min(per_call(ours, iters) for _ in range(rounds))
            rows.append({"op": op, "raw_us": raw_s * 1e6, "gang_us": gang_s * 1e6,
                         "added_us": (gang_s - raw_s) * 1e6})  # fmt: skip
        return rows
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--procs", default="2,4")
    parser.add_argument("--sizes", default="8,1K,64K,1M,16M")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    json_argument(parser)
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    if args.worker:
        worker(args.worker, sizes, args.rounds)
        return
    rows = []
    for nproc in (int(p) for p in args.procs.split(",")):
        for key, (raw, ours) in run(nproc, args.sizes, args.rounds).items():
            op, size = key.split(":")
            rows.append({"procs": nproc, "op": op, "bytes": int(size), "raw_us": raw * 1e6,
                         "gang_us": ours * 1e6, "ratio": ours / raw})  # fmt: skip
    cost = layer_cost(args.rounds)
    print_table(TITLE, rows)
    print()
    print_table("Gang layer cost per call (fake backend, no communication)", cost)
    write_json(args.json, TITLE, [*rows, *cost])


if __name__ == "__main__":
    main()
