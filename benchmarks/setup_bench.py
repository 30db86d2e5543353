"""Time to build Gangs vs a bare init_device_mesh of the same shape and flattened dims.

    python -m benchmarks.setup_bench [--max-exp 16] [--real-procs 8] [--json F]

Simulation: torch's fake backend, the last rank of worlds of 2**10..2**16.
Real: 8 local gloo processes under torchrun; each process times both, alternating,
and the slowest process counts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import gangmesh as gm
from benchmarks.report import free_port, json_argument, median, print_table, write_json
from gangmesh.topology import DIM_NAMES, MeshTopology

TITLE = "Gangs setup vs bare init_device_mesh (pp=2, tp=8 or 2, dp_shard inferred; + dp flattened)"
TIMEOUT = timedelta(minutes=5)


def bare_mesh(plan: MeshTopology) -> None:
    mesh = init_device_mesh("cpu", plan.shape, mesh_dim_names=DIM_NAMES)
    mesh["dp_replicate", "dp_shard"]._flatten("dp")


def gangs(root: gm.Gang, plan: MeshTopology) -> None:
    gm.create_gangs(root, **plan.dims, timeout=TIMEOUT)


def time_pair(plan: MeshTopology, root: gm.Gang, repeats: int) -> tuple[float, float]:
    """Median seconds of (bare mesh, Gangs), measured alternately in this process."""
    bare, ours = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        bare_mesh(plan)
        bare.append(time.perf_counter() - start)
        start = time.perf_counter()
        gangs(root, plan)
        ours.append(time.perf_counter() - start)
    return median(bare), median(ours)


def simulated(world_size: int, repeats: int) -> tuple[float, float]:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    plan = MeshTopology(world_size, pp=2, tp=8)
    dist.init_process_group("fake", store=FakeStore(), rank=world_size - 1, world_size=world_size)
    try:
        world = dist.group.WORLD
        assert isinstance(world, dist.ProcessGroup)
        root = gm.ProcessGroupGang(world, torch.device("cpu"))
        return time_pair(plan, root, repeats)
    finally:
        dist.destroy_process_group()


def real_worker(out: str, repeats: int) -> None:
    """Run inside torchrun: time both and write this rank's medians."""
    root = gm.setup_root_gang(timeout=TIMEOUT)
    plan = MeshTopology(root.size, pp=2, tp=2)
    bare, ours = time_pair(plan, root, repeats)
    Path(out, f"rank{root.rank}.json").write_text(json.dumps([bare, ours]))


def real(nproc: int, repeats: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
            "--master-addr=127.0.0.1", f"--master-port={free_port()}",
            "-m", "benchmarks.setup_bench", "--worker", out, "--repeats", str(repeats),
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, check=True, timeout=600, env=env, capture_output=True)
        pairs = [json.loads(p.read_text()) for p in Path(out).glob("rank*.json")]
    return max(b for b, _ in pairs), max(g for _, g in pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-exp", type=int, default=16)
    parser.add_argument("--real-procs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    json_argument(parser)
    args = parser.parse_args()
    if args.worker:
        real_worker(args.worker, args.repeats)
        return
    rows = []
    for exp in range(10, args.max_exp + 1, 2):
        bare, ours = simulated(2**exp, args.repeats)
        rows.append({"mode": "fake", "world_size": 2**exp, "bare_mesh_s": bare,
                     "gangs_s": ours, "ratio": ours / bare})  # fmt: skip
    if args.real_procs:
        bare, ours = real(args.real_procs, args.repeats)
        rows.append({"mode": "gloo", "world_size": args.real_procs, "bare_mesh_s": bare,
                     "gangs_s": ours, "ratio": ours / bare})  # fmt: skip
    print_table(TITLE, rows)
    write_json(args.json, TITLE, rows)


if __name__ == "__main__":
    main()
