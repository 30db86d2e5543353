"""Two jobs of two ranks joined, closed by each rank 0 as soon as both rank 0s met, while rank
1 of each has not yet read how its rank 0's meeting went.

    joined_close.py OUT JOB ADDRESS GATE_PORT

Rank 1 reads its rank 0's word only once both rank 0s closed their joins (they say so in the
gate store at GATE_PORT): the latest a slow rank could read it. Each rank writes the epoch it
joined in and the other job's size.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist
from common import write_results

import gangmesh as gm
from gangmesh.assembly import join_meeting

JOBS = ("trainer", "generator")


def after_both_closed(gate: dist.TCPStore, read: Any) -> Any:
    """``read``, called once both jobs' rank 0 closed its join."""

    def late_read(*args: Any) -> Any:
        gate.wait([f"closed/{job}" for job in JOBS], timedelta(seconds=60))
        return read(*args)

    return late_read


def main() -> None:
    job, address, port = sys.argv[2], sys.argv[3], int(sys.argv[4])
    sys.argv[1] = str(Path(sys.argv[1]) / job)  # where write_results writes
    gate = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    root = gm.setup_root_gang(timeout=timedelta(seconds=60))
    if root.rank == 1:
        join_meeting.outcome = after_both_closed(gate, join_meeting.outcome)
    other = JOBS[1] if job == JOBS[0] else JOBS[0]
    joined = gm.join_jobs(root, job=job, other=other, address=address, plan={},
                          timeout=timedelta(seconds=10), wait=timedelta(seconds=60))  # fmt: skip
    said = {"epoch": joined.epoch, "other_size": joined.other_plan.world_size}
    if root.rank == 0:  # a rank 0 that closed before the other met it would have left it
        gate.set(f"met/{job}", "1")
        gate.wait([f"met/{job}" for job in JOBS], timedelta(seconds=60))
    joined.close()
    if root.rank == 0:
        gate.set(f"closed/{job}", "1")
    write_results(root.rank, said)
    root.close()


if __name__ == "__main__":
    main()
