# fairseq2
import torch
from fairseq2.gang import ReduceOperation, create_fsdp_gangs, setup_parallel_gangs, setup_root_gang

root_gang = setup_root_gang()
gangs = setup_parallel_gangs(root_gang, tp_size=2)
gangs = create_fsdp_gangs(gangs, intra_node_size=2)

total = torch.tensor(float(root_gang.rank))
gangs.sdp.all_reduce(total, ReduceOperation.SUM)
print(f"rank {root_gang.rank}: sdp sum {total.item()}, tp rank {gangs.tp.rank}")
