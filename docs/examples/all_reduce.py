"""Sum rank + 1 over every process, then meet at a barrier.

torchrun --nproc-per-node 4 docs/examples/all_reduce.py
"""

import torch

from gangmesh import ReduceOperation, setup_root_gang

gang = setup_root_gang()

tensor = torch.tensor(gang.rank + 1.0, device=gang.device)

gang.all_reduce(tensor, ReduceOperation.SUM)
print(f"Rank {gang.rank}: Tensor after all_reduce = {tensor.item()}")

gang.barrier()
