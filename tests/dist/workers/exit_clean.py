"""The seed example, then tp gangs and 50 tp all_reduces just before the end; no close().

With ``--raise-on R`` rank R raises after the collectives. With ``--threads-to DIR`` each
rank writes, once gangmesh's exit hook has run, the names of the threads it still has.
"""

import atexit
import json
import os
import sys
from pathlib import Path

import torch

from gangmesh import ReduceOperation, create_parallel_gangs, setup_root_gang


def write_threads() -> None:
    """Runs after gangmesh's hook: atexit calls hooks in reverse order of registration."""
    names = [
        Path(f"/proc/self/task/{t}/comm").read_text().strip() for t in os.listdir("/proc/self/task")
    ]
    out = Path(sys.argv[sys.argv.index("--threads-to") + 1])
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps({"threads": names}))


if "--threads-to" in sys.argv:
    atexit.register(write_threads)

gang = setup_root_gang()
tensor = torch.tensor(gang.rank + 1.0, device=gang.device)
gang.all_reduce(tensor, ReduceOperation.SUM)
print(f"Rank {gang.rank}: Tensor after all_reduce = {tensor.item()}")
gang.barrier()

gangs = create_parallel_gangs(gang, tp_size=2)
for _ in range(50):
    gangs.tp.all_reduce(torch.ones(16), ReduceOperation.SUM)

if "--raise-on" in sys.argv and gang.rank == int(sys.argv[sys.argv.index("--raise-on") + 1]):
    raise RuntimeError(f"deliberate failure on rank {gang.rank}")
