"""Weight pushes between two jobs launched apart, against raw broadcasts and rank 0 gathering.

    python -m benchmarks.join_bench [--mib 16,64,256] [--pairs 5] [--pushes 3] [--json F]

Two torchrun jobs of 4 gloo processes each, joined at a join server this process serves: a
trainer (FSDP2 2 x TP 2: each weight split by tp, then dp_shard) pushes ``--mib`` MiB of
square float32 weights (16 MiB each) to a generator (TP 2 x 2 replicas). Measured in the same
processes:

- push: ``joined.push`` / ``joined.receive`` (each trainer rank packs its own shard, one
  broadcast per route to the generator ranks that hold it, the agreement in each job);
- raw: the same broadcasts of the same bytes, from and into the same tensors, on groups of
  the same ranks made with torch's public ``ProcessGroupGloo`` on the same server: what the
  routes carry, without the push's header, marks, naming, versions and agreement. Target:
  push at most 1.1x raw;
- gather: trainer rank 0 gathers every shard (``dist.gather`` on the trainer's world),
  assembles the whole weights and broadcasts them to all 4 generator ranks, which cut out
  their shards. Target: push at least 1.5x faster;
- join: seconds from the later job's ``join_jobs`` call to its return. Target: at most 2 s.

Blocks of ``--pushes`` pushes alternate (raw, push, push, raw, then gather), the slowest
process of both jobs counting; medians over ``--pairs``.
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

import gangmesh as gm
from benchmarks.report import free_port, json_argument, print_table, write_json
from gangmesh.assembly.weight_push import landing, sent
from gangmesh.plan.push_plan import PushPlan

TITLE = "Weight push between two jobs launched apart (FSDP2 2 x TP 2 -> TP 2 x 2 replicas, gloo)"
LAYOUTS = {"trainer": {"dp_shard": 2, "tp": 2}, "generator": {"dp_replicate": 2, "tp": 2}}
DIM = 2048
"""Width of each square weight: 16 MiB of float32."""


def shards(role: str, mib: int) -> dict[str, gm.TensorShards]:
    split = ("tp", "dp_shard") if role == "trainer" else ("tp",)
    return {f"w{i}": gm.TensorShards((DIM, DIM), "float32", {0: split}) for i in range(mib // 16)}


def timed(step: Callable[[], object], times: int, root: gm.Gang) -> float:
    """Seconds for ``times`` calls on the slowest process of this job."""
    start = time.perf_counter()
    for _ in range(times):
        step()
    took = torch.tensor([time.perf_counter() - start])
    root.all_reduce(took, gm.ReduceOperation.MAX)
    return float(took.item())


class Baselines:
    """The raw broadcasts of each route, and rank 0's gather and broadcast, on groups of the
    same ranks made on the join server (a namespace of their own)."""

    def __init__(
        self,
        role: str,
        root: gm.Gang,
        plan: PushPlan,
        address: str,
        tensors: dict[str, torch.Tensor],
    ) -> None:
        host, port = address.rsplit(":", 1)
        self.store = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=120))
        self.role, self.root, self.plan = role, root, plan
        me = ("trainer" if role == "trainer" else "generator", root.rank)
        self.routes = []
        for index, route in enumerate(plan.routes):
            members = [("trainer", route.sender), *(("generator", r) for r in route.receivers)]
            if me in members:
                store = dist.PrefixStore(f"bench/raw{index}", self.store)
                group = dist.ProcessGroupGloo(
                    store, members.index(me), len(members), timedelta(seconds=120)
                )
                pieces = [  # the broadcasts the push makes, from and into the same tensors
                    sent(p, plan, root.rank, tensors) if role == "trainer"
                    else landing(p, plan, root.rank, tensors)[0]
                    for p in route.pieces
                ]  # fmt: skip
                self.routes.append((group, pieces))
        whole = [("trainer", 0), *(("generator", g) for g in range(4))]
        self.whole = torch.empty(plan.total_bytes // 4, dtype=torch.float32)
        self.fan = None
        if me in whole:
            store = dist.PrefixStore("bench/fan", self.store)
            self.fan = dist.ProcessGroupGloo(store, whole.index(me), 5, timedelta(seconds=120))

    def raw(self) -> None:
        options = dist.BroadcastOptions()
        works = [group.broadcast([t], options) for group, pieces in self.routes for t in pieces]
        for work in works:
            work.wait()

    def gather(self, tensors: dict[str, torch.Tensor]) -> None:
        """Trainer rank 0 gathers the shards and assembles whole weights; it broadcasts them
        to every generator rank, which cuts out its own."""
        plan, names = self.plan, self.plan.names
        whole = self.whole.view(len(names), DIM, DIM)
        if self.role == "trainer":
            local = torch.cat([tensors[n].reshape(-1) for n in names])
            parts = [torch.empty_like(local) for _ in range(4)] if self.root.rank == 0 else None
            dist.gather(local, parts, dst=0)
            if parts is not None:
                for rank, part in enumerate(parts):
                    for i, piece in enumerate(part.view(len(names), -1)):
                        box = plan.sender_box(names[i], rank)
                        whole[i][box.start[0] : box.start[0] + box.size[0]] = piece.view(box.size)
        if self.fan is not None:
            self.fan.broadcast([self.whole], dist.BroadcastOptions()).wait()
        if self.role == "generator":
            for i, name in enumerate(names):
                box = plan.receiver_box(name, self.root.rank)
                tensors[name].copy_(whole[i][box.start[0] : box.start[0] + box.size[0]])


def worker(role: str, out: str, address: str, mib: int, pairs: int, pushes: int) -> None:
    root = gm.setup_root_gang(timeout=timedelta(seconds=180))
    gangs = gm.create_gangs(root, **LAYOUTS[role])
    other = "generator" if role == "trainer" else "trainer"
    started = time.time()
    joined = gm.join_jobs(root, job=role, other=other, address=address, plan=gangs.plan,
                          shards=shards(role, mib), timeout=timedelta(seconds=120))  # fmt: skip
    joined_at = time.time()
    plan = joined.push_plan("trainer")
    boxes = plan.sender_box if role == "trainer" else plan.receiver_box
    tensors = {name: torch.randn(boxes(name, root.rank).size) for name in plan.names}
    baselines = Baselines(role, root, plan, address, tensors)
    version = iter(range(10**9))

    def push() -> None:
        if role == "trainer":
            joined.push(next(version), tensors)
        else:
            joined.receive(tensors)

    push(), baselines.raw(), baselines.gather(tensors)
    blocks: dict[str, list[float]] = {"raw": [], "push": [], "gather": []}
    for _ in range(pairs):
        for kind in ("raw", "push", "push", "raw", "gather"):
            step = {
                "raw": baselines.raw,
                "push": push,
                "gather": lambda: baselines.gather(tensors),
            }[kind]
            blocks[kind].append(timed(step, pushes, root) / pushes)
    if root.rank == 0:
        said = {"blocks": blocks, "started": started, "joined": joined_at}
        Path(out, f"{role}.json").write_text(json.dumps(said))
    joined.close()
    gangs.close()
    root.close()


def launch(role: str, out: str, address: str, args: list[str]) -> subprocess.Popen[bytes]:
    """One job of 4 processes under torchrun, its output in ``out/ROLE.log``."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=4",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}", "-m", "benchmarks.join_bench",
        "--worker", role, out, address, *args,
    ]  # fmt: skip
    log = open(Path(out, f"{role}.log"), "wb")  # noqa: SIM115 (closed by the child's end)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def run(mib: int, pairs: int, pushes: int) -> dict[str, Any]:
    """One pair of jobs joined; the row of ``mib``."""
    args = ["--mib", str(mib), "--pairs", str(pairs), "--pushes", str(pushes)]
    with gm.serve_join() as server, tempfile.TemporaryDirectory() as out:
        jobs = {role: launch(role, out, server.address, args) for role in LAYOUTS}
        for role, job in jobs.items():
            if job.wait(timeout=1800) != 0:
                raise SystemExit(Path(out, f"{role}.log").read_text()[-4000:])
        said = {role: json.loads(Path(out, f"{role}.json").read_text()) for role in LAYOUTS}
    blocks = [said[role]["blocks"] for role in LAYOUTS]
    slowest = {
        kind: [max(pair) for pair in zip(*(b[kind] for b in blocks), strict=True)]
        for kind in ("raw", "push", "gather")
    }
    raw, push, gather = (statistics.median(slowest[k]) for k in ("raw", "push", "gather"))
    later = max(said[role]["started"] for role in LAYOUTS)
    join = max(said[role]["joined"] for role in LAYOUTS) - later
    return {"mib": mib, "raw_ms": raw * 1e3, "push_ms": push * 1e3, "push/raw": push / raw,
            "gather_ms": gather * 1e3, "gather/push": gather / push, "join_s": join}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", default="16,64,256", help="MiB of weights (x16), comma-separated")
    parser.add_argument("--pairs", type=int, default=5, help="ABBA pairs")
    parser.add_argument("--pushes", type=int, default=3, help="pushes per timed block")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    json_argument(parser)
    args = parser.parse_args()
    if args.worker:
        role, out, address = args.worker
        worker(role, out, address, int(args.mib), args.pairs, args.pushes)
        return
    rows = [run(int(mib), args.pairs, args.pushes) for mib in args.mib.split(",")]
    print_table(TITLE, rows)
    write_json(args.json, TITLE, rows)


if __name__ == "__main__":
    main()
