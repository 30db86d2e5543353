# gangmesh: the same code, importing from gangmesh.compat.fairseq2
import torch

from gangmesh.compat.fairseq2 import (
    ProcessGroupGang,
    ReduceOperation,
    create_fsdp_gangs,
    create_parallel_gangs,
)

root_gang = ProcessGroupGang.create_default_process_group(torch.device("cpu"))
rank = root_gang.rank

gangs = create_parallel_gangs(root_gang, tp_size=2)  # dp: [0,2,4,6] [1,3,5,7]
total = torch.tensor(float(rank))
gangs.dp.all_reduce(total, ReduceOperation.SUM)
print(f"rank {rank}: dp sum {total.item()}, tp rank {gangs.tp.rank}")

value = torch.tensor(float(rank))
try:
    gangs.dp.broadcast(value, source_rank=1)  # dp rank 1 is global rank 2 or 3
    print(f"rank {rank}: broadcast from dp rank 1 gives {value.item()}")
except Exception as error:
    print(f"rank {rank}: broadcast: {type(error).__name__}: {str(error).split(' <')[0]}")

try:
    gangs = create_fsdp_gangs(gangs, intra_node_size=2)  # HSDP with tp_size=2, on gloo
    print(f"rank {rank}: HSDP sdp size {gangs.sdp.size}, rdp size {gangs.rdp.size}")
except Exception as error:
    print(f"rank {rank}: HSDP: {type(error).__name__}: {error}")
