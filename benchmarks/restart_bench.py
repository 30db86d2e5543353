"""How often a job whose process died comes back under torchrun --max-restarts 1.

    python -m benchmarks.restart_bench [--runs 10] [--json F]

The job (tests/dist/workers/restart.py, 2 gloo processes) sets up, all-reduces, and on the
first attempt rank 1 exits; the restarted attempt must set up again and finish. Baseline:
the same job on raw torch.distributed (init_process_group from torchrun's environment),
in the same run, for static and c10d rendezvous.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import free_port, json_argument, print_table, write_json

TITLE = "Restarted jobs that came back (torchrun --max-restarts 1, rank 1 dies on attempt 0)"
WORKER = Path(__file__).resolve().parents[1] / "tests/dist/workers/restart.py"


def one_job(rendezvous: str, plain: bool) -> tuple[bool, float]:
    """(came back, seconds) for one restarted job."""
    if rendezvous == "static":
        where = ["--master-addr=127.0.0.1", f"--master-port={free_port()}"]
    else:
        where = ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}"]
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
            "--max-restarts=1", *where, str(WORKER), out, *(["plain"] if plain else []),
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parents[3])}
        start = time.perf_counter()
        try:
            done = subprocess.run(command, env=env, capture_output=True, timeout=300)
            came_back = done.returncode == 0 and len(list(Path(out).glob("rank*.json"))) == 2
        except subprocess.TimeoutExpired:
            came_back = False
        return came_back, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    json_argument(parser)
    args = parser.parse_args()
    rows = []
    for rendezvous in ("static", "c10d"):
        for plain in (True, False):
            outcomes = [one_job(rendezvous, plain) for _ in range(args.runs)]
            rows.append({
                "rendezvous": rendezvous,
                "library": "raw torch" if plain else "gangmesh",
                "came_back": sum(ok for ok, _ in outcomes),
                "runs": args.runs,
                "slowest_s": max(seconds for _, seconds in outcomes),
            })  # fmt: skip
    print_table(TITLE, rows)
    write_json(args.json, TITLE, rows)


if __name__ == "__main__":
    main()
