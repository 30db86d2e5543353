"""A training step whose failures are named vs the same step on a bare torch mesh.

    python -m benchmarks.naming_bench [--nproc 2] [--steps 20] [--pairs 15]

Under torchrun, ``--nproc`` gloo processes train the same small model with FSDP2, twice in
each process: on a mesh of ``init_device_mesh`` (the baseline: raw torch, no gangmesh) and on
``gangs.meshes["dp_shard_cp"]``, each step inside ``with gangs:`` (torch's errors of a failed
collective leave it as a GangError naming the culprit; the job's failure reports, the last
words and the stop notice are installed). Blocks of ``--steps`` steps alternate baseline,
named, named, baseline (ABBA); the ratio of each pair, median over ``--pairs``, the slowest
process counts. Target: at most 1.03x.
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
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from pathlib import Path

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import gangmesh as gm
from benchmarks.report import free_port, json_argument, print_table, write_json

TITLE = "FSDP2 step inside 'with gangs:' on gangmesh's mesh / on a bare init_device_mesh (ABBA)"
TARGET = 1.03
WIDTH = 256


def model_on(mesh: object) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(WIDTH, WIDTH) for _ in range(4)))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def stepper(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scope: Callable[[], AbstractContextManager[object]],
) -> Callable[[int], float]:
    """A function that runs ``steps`` training steps, each inside ``scope()``, and returns
    the seconds they took."""
    batch = torch.randn(16, WIDTH)

    def run(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            with scope():
                model(batch).pow(2).mean().backward()
                optimizer.step()
                optimizer.zero_grad()
        return time.perf_counter() - start

    return run


def worker(out: str, steps: int, pairs: int) -> None:
    """Run inside torchrun: time both steps, alternating, and write this rank's ratios."""
    root = gm.setup_root_gang(torch.device("cpu"), timeout=timedelta(seconds=60))
    gangs = gm.create_gangs(root)
    bare = stepper(*model_on(init_device_mesh("cpu", (root.size,))), nullcontext)
    named = stepper(*model_on(gangs.meshes["dp_shard_cp"]["dp_shard_cp"]), lambda: gangs)
    bare(steps), named(steps)  # warm both
    ratios, times = [], {"bare": [], "named": []}
    for _ in range(pairs):
        a1, b1, b2, a2 = bare(steps), named(steps), named(steps), bare(steps)
        ratios.append((b1 + b2) / (a1 + a2))
        times["bare"] += [a1, a2]
        times["named"] += [b1, b2]
    result = {
        "bare_step_ms": 1e3 * statistics.median(times["bare"]) / steps,
        "named_step_ms": 1e3 * statistics.median(times["named"]) / steps,
        "ratio": statistics.median(ratios),
    }
    Path(out, f"rank{root.rank}.json").write_text(json.dumps(result))
    gangs.close()
    root.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    json_argument(parser)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.pairs)
        return
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={args.nproc}",
            "--master-addr=127.0.0.1", f"--master-port={free_port()}",
            "-m", "benchmarks.naming_bench", "--worker", out,
            "--steps", str(args.steps), "--pairs", str(args.pairs),
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, check=True, timeout=900, env=env, capture_output=True)
        per_rank = [json.loads(p.read_text()) for p in sorted(Path(out).glob("rank*.json"))]
    slowest = max(per_rank, key=lambda row: row["ratio"])
    rows = [{"nproc": args.nproc, "steps": args.steps, **slowest, "target": TARGET}]
    print_table(TITLE, rows)
    write_json(args.json, TITLE, rows)


if __name__ == "__main__":
    main()
