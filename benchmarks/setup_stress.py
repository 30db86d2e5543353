"""Setups under load: several 4-process jobs at once, each started by a plain launch (rank 0
serves the store), a short timeout, no fault; every job must finish.

    python -m benchmarks.setup_stress [--jobs 8] [--rounds 5] [--timeout 5]

Each process runs setup_root_gang, create_gangs(tp=2), a tp all_reduce and a barrier. A
job fails if any of its processes exits non-zero; the first line of each failing process's
error is printed. Not a timing: a count of setups that failed without a fault.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from datetime import timedelta

from benchmarks.report import free_port

RANKS = 4


def job(timeout: float) -> None:
    """One process of a job (under the variables a launcher sets)."""
    import torch

    import gangmesh as gm

    try:
        root = gm.setup_root_gang(timeout=timedelta(seconds=timeout))
        gangs = gm.create_gangs(root, tp=2)
        gangs.tp.all_reduce(torch.ones(2), gm.ReduceOperation.SUM)
        root.barrier()
        gangs.close()
        root.close()
    except gm.GangError as ex:
        print(f"FAIL rank {os.environ['RANK']}: {str(ex).splitlines()[0]}", flush=True)
        sys.exit(1)


def round_of(jobs: int, timeout: float) -> list[str]:
    """Start ``jobs`` jobs at once; the failure lines of the jobs that failed."""
    started = []
    for index in range(jobs):
        port = free_port()
        for rank in range(RANKS):
            env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                   "RANK": str(rank), "WORLD_SIZE": str(RANKS), "LOCAL_RANK": str(rank),
                   "LOCAL_WORLD_SIZE": str(RANKS), "OMP_NUM_THREADS": "1"}  # fmt: skip
            command = [sys.executable, "-m", "benchmarks.setup_stress", "--job", str(timeout)]
            process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)  # fmt: skip
            started.append((index, process))
    failed: dict[int, list[str]] = {}
    for index, process in started:
        try:
            out, _ = process.communicate(timeout=timeout * 6 + 60)
        except subprocess.TimeoutExpired:
            process.kill()
            out = process.communicate()[0] + "\nFAIL: still running, killed"
        if process.returncode != 0:
            said = [line for line in out.splitlines() if line.startswith("FAIL")]
            failed.setdefault(index, []).extend(said or [f"exit status {process.returncode}"])
    return [f"job {index}: {' | '.join(lines)}" for index, lines in sorted(failed.items())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=8, help="jobs at once")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=5.0, help="setup timeout, seconds")
    parser.add_argument("--job", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job is not None:
        job(args.job)
        return
    total = 0
    for number in range(args.rounds):
        failures = round_of(args.jobs, args.timeout)
        total += len(failures)
        print(f"round {number}: {len(failures)} of {args.jobs} jobs failed", flush=True)
        for line in failures:
            print(f"  {line}", flush=True)
    print(f"{total} of {args.rounds * args.jobs} jobs failed without a fault")


if __name__ == "__main__":
    main()
