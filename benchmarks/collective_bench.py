"""Gang collectives vs the same raw torch.distributed call on the same group.

    python -m benchmarks.collective_bench [--pairs 121] [--procs 2,4] [--sizes 8,1K,64K,1M,16M]
                                          [--nccl]

First table: the Gang layer's own cost. On torch's fake backend the collective moves no
data, so only the wrapper shows: each op on the root gang and on a sub-gang, as
alternating blocks raw, gang, gang, raw (ABBA), the ratio of each pair's gang time to
its raw time, median over ``--pairs`` pairs. Target: at most 1.06x.

Second table: the same calls on real gloo groups of 2 and 4 local processes, 8 B to
16 MB; the fastest of several alternating blocks per side, the slowest process counts.
On a 2-core machine these are bound by scheduling; they show the order of magnitude.

With ``--nccl`` (a machine with a GPU), a third table: the first table's ABBA ratios on a
one-process NCCL world, tensors on cuda:0, each block ended by a CUDA synchronise.
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
from gangmesh.tools.check_report import parse_sizes

LAYER_TITLE = "Gang call / raw torch.distributed call on the same group (fake backend, ABBA)"
GLOO_TITLE = "Gang collectives vs raw torch.distributed on the same gloo group"
NCCL_TITLE = "Gang call / raw torch.distributed call, one-process NCCL world (cuda:0, ABBA)"
TARGET = 1.06
OPS = (
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_to_list",
    "reduce_scatter",
    "all_to_all",
    "all_to_all_split",
    "barrier",
)
GLOO_OPS = ("all_reduce", "all_gather", "broadcast")
SUM = gm.ReduceOperation.SUM

_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def calls(gang: gm.ProcessGroupGang, op: str, numel: int) -> tuple[Callable[[], object], ...]:
    """(raw call, Gang call) for one op and message size, on the same group and tensors
    (on the gang's device)."""
    pg = gang.as_process_group()
    n = gang.size
    on = gang.device
    tensor = torch.ones(numel, dtype=torch.float32, device=on)
    source = n - 1
    if op == "all_reduce":
        return (lambda: dist.all_reduce(tensor, group=pg), lambda: gang.all_reduce(tensor, SUM))
    if op == "broadcast":
        return (
            lambda: dist.broadcast(tensor, group=pg, group_src=source),
            lambda: gang.broadcast(tensor, source_rank=source),
        )
    if op == "all_gather":
        out = torch.empty(n * numel, device=on)
        return (
            lambda: _all_gather_single(out, tensor, group=pg),
            lambda: gang.all_gather(out, tensor),
        )
    if op == "all_gather_to_list":
        outs = [torch.empty(numel, device=on) for _ in range(n)]
        return (
            lambda: dist.all_gather(outs, tensor, group=pg),
            lambda: gang.all_gather_to_list(outs, tensor),
        )
    if op == "reduce_scatter":
        big, out = torch.ones(n * numel, device=on), torch.empty(numel, device=on)
        return (
            lambda: _reduce_scatter_single(out, big, group=pg),
            lambda: gang.reduce_scatter(out, big, SUM),
        )
    if op in ("all_to_all", "all_to_all_split"):
        big, out = torch.ones(n * numel, device=on), torch.empty(n * numel, device=on)
        splits = [numel] * n if op == "all_to_all_split" else None
        return (
            lambda: dist.all_to_all_single(out, big, splits, splits, group=pg),
            lambda: gang.all_to_all(out, big, splits, splits),
        )
    return (lambda: dist.barrier(group=pg), gang.barrier)


def block(fn: Callable[[], object], iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def abba_ratio(
    raw: Callable[[], object], ours: Callable[[], object], pairs: int, iters: int
) -> tuple[float, float, float]:
    """(median gang/raw ratio of ABBA pairs, median raw us, median gang us) per call."""
    raw(), ours()
    ratios, raw_us, gang_us = [], [], []
    for _ in range(pairs):
        a1, b1, b2, a2 = (
            block(raw, iters),
            block(ours, iters),
            block(ours, iters),
            block(raw, iters),
        )
        ratios.append((b1 + b2) / (a1 + a2))
        raw_us.append((a1 + a2) / (2 * iters) * 1e6)
        gang_us.append((b1 + b2) / (2 * iters) * 1e6)
    return statistics.median(ratios), statistics.median(raw_us), statistics.median(gang_us)


def layer_cost(pairs: int, iters: int = 40) -> list[dict[str, object]]:
    """Ratios on the fake backend: rank 1 of 4, the root gang, the sub-gang [1, 2, 3] and the
    reordered sub-gang [2, 1, 3] (no target: it moves pieces into its own rank order, which
    the raw call on its group does not)."""
    from gangmesh.runtime._c10d import ensure_fake_backend

    ensure_fake_backend()
    root = gm.ProcessGroupGang.create_default_process_group(
        torch.device("cpu"), backend="fake", store=dist.HashStore(), rank=1, world_size=4
    )
    try:
        sub, reordered = root.create_gang([1, 2, 3]), root.create_gang([2, 1, 3])
        assert isinstance(sub, gm.ProcessGroupGang) and isinstance(reordered, gm.ProcessGroupGang)
        rows = []
        for name, gang in (("root", root), ("sub-gang", sub), ("reordered", reordered)):
            target = None if gang is reordered else TARGET
            for op in OPS:
                raw, ours = calls(gang, op, 2)
                ratio, raw_us, gang_us = abba_ratio(raw, ours, pairs, iters)
                rows.append({"gang": name, "op": op, "raw_us": raw_us, "gang_us": gang_us,
                             "ratio": ratio, "target": target or "-"})  # fmt: skip
        return rows
    finally:
        root.close()


def over_target(rows: list[dict[str, object]]) -> str:
    """The rows above their target, in one line ("" if none)."""
    over = [
        f"{row['gang']} {row['op']} {row['ratio']:.3f}x"
        for row in rows
        if isinstance(row.get("target"), float) and row["ratio"] > row["target"]  # type: ignore[operator]
    ]
    return f"above the {TARGET}x target: {', '.join(over)}" if over else ""


def nccl_cost(pairs: int, iters: int = 40) -> list[dict[str, object]]:
    """Ratios on a one-process NCCL world (cuda:0)."""
    root = gm.ProcessGroupGang.create_default_process_group(
        torch.device("cuda", 0), store=dist.HashStore(), rank=0, world_size=1
    )
    try:
        rows = []
        for op in OPS:
            raw, ours = calls(root, op, 2)
            ratio, raw_us, gang_us = abba_ratio(raw, ours, pairs, iters)
            rows.append({"gang": "root", "op": op, "raw_us": raw_us, "gang_us": gang_us,
                         "ratio": ratio, "target": TARGET})  # fmt: skip
        return rows
    finally:
        root.close()


def per_call(fn: Callable[[], object], iters: int) -> float:
    return block(fn, iters) / iters


def worker(out: str, sizes: list[int], rounds: int) -> None:
    gang = gm.setup_root_gang()
    assert isinstance(gang, gm.ProcessGroupGang)
    results = {}
    for op in GLOO_OPS:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=121, help="ABBA pairs per op (fake backend)")
    parser.add_argument("--procs", default="2,4", help="gloo world sizes; empty for none")
    parser.add_argument("--sizes", default="8,1K,64K,1M,16M")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--nccl", action="store_true", help="also time a one-GPU NCCL world")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    json_argument(parser)
    args = parser.parse_args()
    sizes = parse_sizes(args.sizes)
    if args.worker:
        worker(args.worker, sizes, args.rounds)
        return
    cost = layer_cost(args.pairs)
    print_table(LAYER_TITLE, cost)
    print(over_target(cost) or f"every row with a target within {TARGET}x")
    rows = []
    for nproc in (int(p) for p in args.procs.split(",") if p):
        for key, (raw, ours) in run(nproc, args.sizes, args.rounds).items():
            op, size = key.split(":")
            rows.append({"procs": nproc, "op": op, "bytes": int(size), "raw_us": raw * 1e6,
                         "gang_us": ours * 1e6, "ratio": ours / raw})  # fmt: skip
    if rows:
        print()
        print_table(GLOO_TITLE, rows)
    nccl = nccl_cost(args.pairs) if args.nccl else []
    if nccl:
        print()
        print_table(NCCL_TITLE, nccl)
        print(over_target(nccl) or f"every row within {TARGET}x")
    write_json(args.json, LAYER_TITLE, [*cost, *rows, *nccl])


if __name__ == "__main__":
    main()
