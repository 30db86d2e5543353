"""Replica groups (torchft): a step's cost, the survivors' stall after a loss, a heal's time.

    python -m benchmarks.replica_bench [--rounds 3] [--losses 3] [--json F]

Step: 4 gloo processes train a 4 MB model (benchmarks/replica_step.py), as plain HSDP
(dp_replicate 2 x dp_shard 2, one torchrun launch) and as two replica groups of dp_shard 2
(two launches and a lighthouse, the cross-group reduction through torchft), taking turns
in one run; the median step of each, and the ratio (target: at most 1.25x). Loss: the
recipe docs/examples/fault_tolerant_hsdp.py --local (heartbeat timeout 1 s), whose line says
how long group 0 stalled after group 1 lost a process and how long group 1 took from its
processes' return to its first committed step (target: at most 1 s).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

import gangmesh as gm
from benchmarks.report import free_port, json_argument, median, print_table, write_json

REPO = Path(__file__).resolve().parents[1]
STEP = REPO / "benchmarks/replica_step.py"
RECIPE = REPO / "docs/examples/fault_tolerant_hsdp.py"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "RUST_LOG": "warn"}


def torchrun(processes: int, *args: str, group: int | None = None) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={processes}",
               "--master-addr=127.0.0.1", f"--master-port={free_port()}",
               str(STEP), *args]  # fmt: skip
    env = ENV if group is None else {**ENV, "GANGMESH_REPLICA_GROUP": str(group)}
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def step_times(managed: bool) -> list[float]:
    """The step times of one run (group 0's where managed)."""
    with tempfile.TemporaryDirectory() as out:
        if managed:
            with gm.start_lighthouse(2, heartbeat_timeout=timedelta(seconds=5)) as lighthouse:
                runs = [torchrun(2, out, "managed", lighthouse.address, group=g) for g in (0, 1)]
                codes = [run.wait(timeout=300) for run in runs]
        else:
            codes = [torchrun(4, out, "plain").wait(timeout=300)]
        if set(codes) != {0}:
            raise SystemExit(f"a run failed: {codes}")
        written = Path(out) / ("group0.json" if managed else "plain.json")
        return list(json.loads(written.read_text()))


def loss() -> dict[str, float]:
    """The stall and the heal of one run of the recipe."""
    done = subprocess.run([sys.executable, str(RECIPE), "--local"], env=ENV, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    found = re.search(r"stalled ([\d.]+) s\).* in ([\d.]+) s with", done.stdout)
    if done.returncode or not found:
        raise SystemExit(f"the recipe failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    return {"stall_s": float(found[1]), "heal_s": float(found[2])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--losses", type=int, default=3)
    json_argument(parser)
    args = parser.parse_args()
    plain: list[float] = []
    managed: list[float] = []
    for _ in range(args.rounds):
        plain += step_times(managed=False)
        managed += step_times(managed=True)
    title = "A step of a 4 MB model on 4 gloo processes: two replica groups vs plain HSDP"
    rows = [
        {"setup": "plain HSDP (dp_replicate 2 x dp_shard 2)", "median_step_s": median(plain),
         "ratio": 1.0},
        {"setup": "2 replica groups x dp_shard 2 (torchft)", "median_step_s": median(managed),
         "ratio": median(managed) / median(plain)},
    ]  # fmt: skip
    print_table(title, rows)
    losses = [loss() for _ in range(args.losses)]
    loss_title = "Recipe --local: group 0's stall after group 1's loss, group 1's heal"
    print_table(loss_title, losses)
    write_json(args.json, title, rows + losses)


if __name__ == "__main__":
    main()
