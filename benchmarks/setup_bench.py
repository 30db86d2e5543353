"""Time to build Gangs vs bare init_device_mesh of the same meshes, and communicators per process.

    python -m benchmarks.setup_bench [--worlds 1024,4096,16384] [--real-procs 8] [--json F]

Layouts: pp=2, tp=8 (tp=2 on gloo), dp_shard inferred; and the same with ep=4 (expert
mesh too). A second table counts communicators only, for a 5-D layout of 256 ranks (pp 2,
dp_replicate 2, dp_shard 4, cp 2, tp 8), dense and with ep=8 or expert=True at ep=1.
Baseline: what a user writes without gangmesh, in the same process and run:
init_device_mesh of the dense shape with the flattened dp, plus, with ep, a second
init_device_mesh of the expert shape. Simulation: torch's fake backend, the last rank of
each world; both sides alternate, median of --repeats. Real: 8 local gloo processes under
torchrun, the slowest process counts. Communicators: the groups this process holds: gangmesh's
(one per distinct set of two or more ranks) and the baseline meshes' (one per dimension and
flattened dimension, one-process ones included); the default group counts on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

import gangmesh as gm
from benchmarks.report import free_port, json_argument, median, print_table, write_json
from gangmesh.runtime._c10d import ensure_fake_backend

TITLE = "Gangs setup vs bare init_device_mesh of the same meshes (+ flattened dp)"
COUNTS_TITLE = "Communicators per process: 256 ranks, pp 2, dp_replicate 2, dp_shard 4, cp 2, tp 8"
FIVE_D = {"pp": 2, "dp_replicate": 2, "dp_shard": 4, "cp": 2, "tp": 8}
TIMEOUT = timedelta(minutes=5)


def bare_meshes(plan: gm.MeshTopology) -> list[DeviceMesh]:
    """The meshes a user would build by hand for ``plan``."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flattened dim.*")
        dense = init_device_mesh("cpu", plan.shape, mesh_dim_names=plan.order)
        dense["dp_replicate", "dp_shard"]._flatten("dp")
        meshes = [dense]
        if plan.uses_experts:
            names = tuple(plan.expert_dims)
            meshes.append(
                init_device_mesh("cpu", tuple(plan.expert_dims.values()), mesh_dim_names=names)
            )
    return meshes


def bare_communicators(meshes: list[DeviceMesh]) -> int:
    """Distinct groups the meshes hold, one-process ones included (each is a real backend
    on gloo and NCCL), and the default group."""
    groups = {
        id(mesh[name].get_group())
        for mesh in meshes
        for name in [*(mesh.mesh_dim_names or ()), *mesh._flatten_mapping]
    }
    return len(groups | {id(dist.group.WORLD)})


def time_pair(plan: gm.MeshTopology, root: gm.ProcessGroupGang, repeats: int) -> dict[str, Any]:
    """Median seconds of (bare meshes, Gangs), alternating in this process, and counts."""
    bare, ours = [], []
    bare_count = ours_count = 0
    for _ in range(repeats):
        start = time.perf_counter()
        meshes = bare_meshes(plan)
        bare.append(time.perf_counter() - start)
        bare_count = bare_communicators(meshes)
        start = time.perf_counter()
        gangs = gm.create_gangs(root, **plan.layout.keywords(), timeout=TIMEOUT)
        ours.append(time.perf_counter() - start)
        ours_count = len(gangs.communicators())
        gangs.close()
    return {"bare_s": median(bare), "gangs_s": median(ours), "ratio": median(ours) / median(bare),
            "bare_groups": bare_count, "gangs_groups": ours_count}  # fmt: skip


def simulated(
    world_size: int, ep: int, repeats: int, dims: dict[str, Any] | None = None
) -> dict[str, Any]:
    ensure_fake_backend()
    plan = gm.MeshTopology(world_size, **(dims or {"pp": 2, "tp": 8}), ep=ep)
    store = dist.HashStore()  # type: ignore[attr-defined]
    root = gm.ProcessGroupGang.create_default_process_group(
        torch.device("cpu"), backend="fake", store=store, rank=world_size - 1, world_size=world_size
    )
    try:
        return time_pair(plan, root, repeats)
    finally:
        root.close()


def real_worker(out: str, repeats: int) -> None:
    """Run inside torchrun: time both and write this rank's results."""
    root = gm.setup_root_gang(timeout=TIMEOUT)
    assert isinstance(root, gm.ProcessGroupGang)
    results = {ep: time_pair(gm.MeshTopology(root.size, pp=2, tp=2, ep=ep), root, repeats)
               for ep in (1, 2)}  # fmt: skip
    Path(out, f"rank{root.rank}.json").write_text(json.dumps(results))


def real(nproc: int, repeats: int) -> dict[int, dict[str, Any]]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
            "--master-addr=127.0.0.1", f"--master-port={free_port()}",
            "-m", "benchmarks.setup_bench", "--worker", out, "--repeats", str(repeats),
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, check=True, timeout=600, env=env, capture_output=True)
        per_rank = [json.loads(p.read_text()) for p in Path(out).glob("rank*.json")]
    slowest = {}
    for ep in ("1", "2"):
        rows = [r[ep] for r in per_rank]
        bare = max(r["bare_s"] for r in rows)
        ours = max(r["gangs_s"] for r in rows)
        slowest[int(ep)] = {**rows[0], "bare_s": bare, "gangs_s": ours, "ratio": ours / bare}
    return slowest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worlds", default="1024,4096,16384")
    parser.add_argument("--real-procs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    json_argument(parser)
    args = parser.parse_args()
    if args.worker:
        real_worker(args.worker, args.repeats)
        return
    rows = []
    for world in (int(w) for w in args.worlds.split(",")):
        for ep in (1, 4):
            rows.append({"mode": "fake", "world_size": world, "ep": ep,
                         **simulated(world, ep, args.repeats)})  # fmt: skip
    if args.real_procs:
        for ep, row in real(args.real_procs, args.repeats).items():
            rows.append({"mode": "gloo", "world_size": args.real_procs, "ep": ep, **row})
    print_table(TITLE, rows)
    counts = []
    for ep, expert in ((1, False), (1, True), (8, False)):
        row = simulated(256, ep, 1, {**FIVE_D, "expert": expert})
        groups = {name: row[name] for name in ("bare_groups", "gangs_groups")}
        counts.append({"world_size": 256, "ep": ep, "expert": expert, **groups})
    print_table(COUNTS_TITLE, counts)
    write_json(args.json, TITLE, rows + counts)


if __name__ == "__main__":
    main()
